#!/bin/bash
# Issue 12 on the GPU machine (device tool), from the repository root, with build-gpu/{bin,lib-gpu,tests/...}
# and .gpu/shared/bench carried. Each stage prints its numbers and appends them to $OUT/issue12.log.
#   load:  the llama3_8b-shape checkpoint (random bf16, 1000 chat-length samples, make_checkpoint.py):
#          cat, HF from_pretrained, ours (load_bench and the run's ready line)
#   run:   a whole run on the 1000 samples, ours (wall, load included) against hf_extract.py, dd oflag=direct
#   bench: bench --out on kimi_k2_3layer in bf16 and fp8 (tokens/s end to end, GB/s written), dd, verify MB/s
set -uo pipefail
STAGES=${*:-load run}
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/issue12.log
BIN=$PWD/build-gpu/bin/eagle3_extract
BENCH=.gpu/shared/bench
CK=${CK:-/dev/shm/l3}     # the checkpoint in memory (the page cache case); CK=/root/l3 for the cold case
DISK=/root/e3out
say() { echo "$*" | tee -a "$LOG"; }
secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
say "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader); $(nproc) cores; disk: $(df -h /root | tail -1)"
dd_direct() {  # the disk's direct-write speed, 8 GiB
  mkdir -p $DISK
  local r; r=$(dd if=/dev/zero of=$DISK/dd.bin bs=64M count=128 oflag=direct 2>&1 | tail -1)
  rm -f $DISK/dd.bin
  say "dd oflag=direct 8 GiB to $DISK: $r"
}
if [[ " $STAGES " == *" load "* || " $STAGES " == *" run "* || " $STAGES " == *" cold "* ]] && [ ! -f $CK/data.jsonl ]; then
  python3 $BENCH/make_checkpoint.py $BENCH/configs/llama3_8b.json $CK 1000 2>&1 | tail -1 | tee -a "$LOG"
  say "checkpoint: $(du -sh $CK/ckpt | cut -f1) in $(ls $CK/ckpt/*.safetensors | wc -l) shards"
fi
if [[ " $STAGES " == *" load "* ]]; then
  t=$(date +%s.%N); cat $CK/ckpt/*.safetensors > /dev/null; say "cat of the shards (page cache): $(secs $t) s"
  python3 -c "
import time, torch
from transformers import AutoModelForCausalLM as M
for i in range(2):
    t = time.time(); m = M.from_pretrained('$CK/ckpt', dtype=torch.bfloat16, device_map='cuda:0'); torch.cuda.synchronize()
    print(f'HF from_pretrained to cuda:0: {time.time() - t:.2f} s'); del m; torch.cuda.empty_cache()
" 2>&1 | grep "HF from" | tee -a "$LOG"
  build-gpu/tests/load_bench $CK/ckpt --backend cuda --repeat 3 2>&1 | tail -4 | tee -a "$LOG"
fi
# cold: the same files read from the disk after dropping the page cache (as root), cat then ours.
if [[ " $STAGES " == *" cold "* ]]; then
  drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
  if drop 2>/dev/null; then
    t=$(date +%s.%N); cat $CK/ckpt/*.safetensors > /dev/null; say "cat of the shards, cold: $(secs $t) s"
    drop
    build-gpu/tests/load_bench $CK/ckpt --backend cuda --repeat 1 2>&1 | tail -1 | sed 's/^/cold: /' | tee -a "$LOG"
    drop
    build-gpu/tests/load_bench $CK/ckpt --backend cuda --load-threads 16 --repeat 1 2>&1 | tail -1 | sed 's/^/cold, 16 threads: /' | tee -a "$LOG"
  else
    say "cold: /proc/sys/vm/drop_caches is not writable here; no cold measurement"
  fi
fi
if [[ " $STAGES " == *" run "* ]]; then
  dd_direct
  rm -rf $DISK/ours
  t=$(date +%s.%N)
  $BIN --model $CK/ckpt --data $CK/data.jsonl --out $DISK/ours --max-seq-len 4096 2>&1 | grep -E "ready on|plan:|done:|critical" | tee -a "$LOG"
  say "ours, whole run (load included): $(secs $t) s wall; output $(du -sh $DISK/ours | cut -f1)"
  if [ "${NO_VERIFY:-0}" = 0 ]; then
    t=$(date +%s.%N)
    $BIN verify $DISK/ours 2>&1 | tail -2 | tee -a "$LOG"
    say "verify (output in the page cache): $(secs $t) s wall"
    if sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
      t=$(date +%s.%N)
      $BIN verify $DISK/ours 2>&1 | tail -1 | tee -a "$LOG"
      say "verify (cold): $(secs $t) s wall"
    fi
  fi
  [ "${NO_HF:-0}" = 1 ] && { rm -rf $DISK/ours; }
  rm -rf $DISK/ours
  [ "${NO_HF:-0}" = 1 ] || {
  t=$(date +%s.%N)
  python3 $BENCH/hf_extract.py $CK/ckpt $CK/data.jsonl $DISK/hf 2>&1 | tail -1 | tee -a "$LOG"
  say "HF hf_extract.py, whole run: $(secs $t) s wall; output $(du -sh $DISK/hf | cut -f1)"
  rm -rf $DISK/hf
  }
fi
if [[ " $STAGES " == *" bench "* ]]; then
  dd_direct
  for dtype in bf16 fp8; do
    rm -rf $DISK/bench_$dtype
    $BIN bench --config $BENCH/configs/kimi_k2_3layer.json --batch 8 --seq 2048 --iters 20 --warmup 2 --dtype $dtype \
      --out $DISK/bench_$dtype 2>&1 | grep -E '^\{|e2e|critical' | tail -2 | tee -a "$LOG"
    say "bench --out $dtype wrote $(du -sb $DISK/bench_$dtype | cut -f1) bytes"
    rm -rf $DISK/bench_$dtype
  done
fi
say "== $(date -u) end"
