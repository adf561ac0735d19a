#!/bin/bash
# Issue 13 on the GPU machine (device tool), from the repository root, with build-gpu/{bin,lib-gpu}
# and .gpu/shared/bench carried. Appends its numbers to $OUT/issue13.log.
#   src:     the llama3_8b-shape checkpoint (random bf16, make_checkpoint.py), the first N samples
#            of its chat-length data extracted with --final both (bf16) to the disk
#   export:  each format from that SRC, page cache dropped before each when allowed: wall, GB/s,
#            against cp -r of SRC and dd oflag=direct; the same with verify's checks included
#   peer:    the Python glue users write today (h5py read + torch.save per sample, SpecForge layout)
#   check:   tests/trainers/check_export.py on each export (this machine's torch 2.x loads them)
#   reader:  io/python's reader over SRC (GB/s decoded)
set -uo pipefail
STAGES=${*:-src export peer check reader}
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/issue13.log
BIN=$PWD/build-gpu/bin/eagle3_extract
BENCH=.gpu/shared/bench
CK=${CK:-/dev/shm/l3}
N=${N:-300}
DISK=/root/e3out
SRC=$DISK/src
say() { echo "$*" | tee -a "$LOG"; }
secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
gbs() { awk -v bytes="$1" -v s="$2" 'BEGIN { printf "%.2f", bytes / 1e9 / s }'; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo cold || echo warm; }
say "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader); $(nproc) cores; disk: $(df -h /root | tail -1)"
mkdir -p $DISK
if [[ " $STAGES " == *" src "* ]]; then
  [ -f $CK/data.jsonl ] || python3 $BENCH/make_checkpoint.py $BENCH/configs/llama3_8b.json $CK 1000 2>&1 | tail -1
  head -n "$N" $CK/data.jsonl > $DISK/data.jsonl
  rm -rf $SRC
  t=$(date +%s.%N)
  $BIN --model $CK/ckpt --data $DISK/data.jsonl --out $SRC --final both --max-seq-len 4096 2>&1 |
    grep -E "done:|critical" | tee -a "$LOG"
  say "extract $N samples --final both: $(secs $t) s; SRC $(du -sb $SRC | cut -f1) bytes in $(ls $SRC/*.h5 | wc -l) shards"
  r=$(dd if=/dev/zero of=$DISK/dd.bin bs=64M count=128 oflag=direct 2>&1 | tail -1); rm -f $DISK/dd.bin
  say "dd oflag=direct 8 GiB: $r"
fi
if [[ " $STAGES " == *" export "* ]]; then
  bytes=$(du -sb $SRC | cut -f1)
  state=$(drop); rm -rf $DISK/cp; t=$(date +%s.%N); cp -r $SRC $DISK/cp && sync; s=$(secs $t)
  say "cp -r SRC + sync ($state): $s s, $(gbs $bytes $s) GB/s"; rm -rf $DISK/cp
  for f in speculators specforge modelopt; do
    for mode in skip verify; do
      rm -rf $DISK/x_$f; state=$(drop)
      flag=; [ $mode = skip ] && flag=--skip-verify
      t=$(date +%s.%N); $BIN export --format $f $flag $SRC $DISK/x_$f > $OUT/export_$f.log 2>&1; rc=$?; sync; s=$(secs $t)
      w=$(du -sb $DISK/x_$f | cut -f1)
      say "export $f ${flag:-(with verify)} ($state): rc $rc, $s s incl. sync, wrote $w bytes: $(gbs $w $s) GB/s; $(grep -o 'ok: .*' $OUT/export_$f.log)"
    done
    [ $f = speculators ] || rm -rf $DISK/x_$f  # speculators is kept for check, the others remade there
  done
fi
if [[ " $STAGES " == *" peer "* ]]; then
  rm -rf $DISK/peer; state=$(drop)
  t=$(date +%s.%N)
  PYTHONPATH=io/python python3 - $SRC $DISK/peer <<'PY' 2>&1 | tail -2 | tee -a "$LOG"
# What users write today: read each sample with h5py (no HDF5 float conversion: raw bf16 bits),
# torch.save it in SpecForge's layout.
import glob, os, sys, h5py, numpy as np, torch
src, dest = sys.argv[1:]
n = 0
for path in sorted(glob.glob(src + "/shard-*.h5")):
    with h5py.File(path, "r") as f:
        for key, g in f["samples"].items():
            i = int(key)
            d = f"{dest}/rows_{i // 2000 * 2000}-{i // 2000 * 2000 + 2000}"
            os.makedirs(d, exist_ok=True)
            T, K, H = g["hidden_states"].shape
            buf = np.empty((T, K, H), np.uint16)
            g["hidden_states"].id.read(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=g["hidden_states"].id.get_type())
            fin = np.empty((T, H), np.uint16)
            g["last_hidden_state"].id.read(h5py.h5s.ALL, h5py.h5s.ALL, fin, mtype=g["last_hidden_state"].id.get_type())
            torch.save({"input_ids": torch.from_numpy(g["input_ids"][()].astype(np.int64)),
                        "loss_mask": torch.from_numpy(g["loss_mask"][()].astype(np.int64)),
                        "aux_hidden_state": torch.from_numpy(buf.reshape(1, T, K * H).view(np.int16)).view(torch.bfloat16),
                        "hidden_state": torch.from_numpy(fin.reshape(1, T, H).view(np.int16)).view(torch.bfloat16)},
                       f"{d}/data_{i}.ckpt")
            n += 1
print("peer samples", n)
PY
  sync; s=$(secs $t); w=$(du -sb $DISK/peer | cut -f1)
  say "python glue (h5py raw read + torch.save, specforge layout, $state): $s s incl. sync, wrote $w bytes: $(gbs $w $s) GB/s"
  rm -rf $DISK/peer
fi
if [[ " $STAGES " == *" check "* ]]; then
  for f in speculators specforge modelopt; do
    [ -d $DISK/x_$f ] || $BIN export --format $f --skip-verify $SRC $DISK/x_$f > /dev/null 2>&1
    t=$(date +%s.%N)
    python3 tests/trainers/check_export.py --format $f $SRC $DISK/x_$f 2>&1 | tail -2 | tee -a "$LOG"
    say "check_export $f (torch $(python3 -c 'import torch; print(torch.__version__)')): $(secs $t) s"
    rm -rf $DISK/x_$f
  done
fi
if [[ " $STAGES " == *" reader "* ]]; then
  for b in tests/python_reader/bench_*.py; do
    [ -f "$b" ] || continue
    PYTHONPATH=io/python python3 "$b" $SRC 2>&1 | tail -4 | tee -a "$LOG"
  done
fi
say "== done $(date -u)"
