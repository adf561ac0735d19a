#!/bin/bash
# Issue 21 on the GPU machine (device tool), from the repository root, with build-gpu/{base,new}
# (the binary before and after a change), build-gpu/load_bench, build-gpu/lib-gpu and
# build-gpu/sharedbench (a copy of ../shared/bench) carried. Logs under $OUT.
#   setup:  a llama3_8b-shape checkpoint (random bf16, $N chat-length samples, make_checkpoint.py)
#   dd:     the local disk's direct-write speed
#   load:   cat of the shards against load_bench and the run's ready line
#   runs:   whole runs of each binary to the disk and to /dev/shm, bf16 and fp8, with the progress
#           lines (steady tok/s) and the writer path's account
#   kimi:   a 2-layer cut of the Kimi-K2 shape (57 KB of states per token) to the disk, bf16 and fp8
#   compute: the same llama3_8b run writing one capture and no final state (a quarter of the
#           bytes) to /dev/shm: the compute-only pace on these samples
#   cold:   the checkpoint on the local disk, page cache dropped before each: cat, load_bench, the ready line
#   hf:     hf_extract.py on the same llama3_8b files (the peer), and bench's compute-only figure
set -uo pipefail
STAGES=${*:-setup dd load runs}
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/issue21.log
BENCH=build-gpu/sharedbench
N=${N:-1000}
CK=/dev/shm/l3
DISK=/root/e3out
SHM=/dev/shm/e3out
BINS=${BINS:-base new}
DTYPES=${DTYPES:-bf16 fp8}
say() { echo "$*" | tee -a "$LOG"; }
secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
say "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader); $(nproc) cores; $(free -g | awk '/Mem/{print $2}') GB; disk: $(df -h /root | tail -1)"
mkdir -p $DISK $SHM
if [[ " $STAGES " == *" setup "* ]] && [ ! -f $CK/data.jsonl ]; then
  t=$(date +%s.%N)
  python3 $BENCH/make_checkpoint.py $BENCH/configs/llama3_8b.json $CK $N 2>&1 | tail -1 | tee -a "$LOG"
  say "checkpoint: $(du -sh $CK/ckpt | cut -f1) in $(ls $CK/ckpt/*.safetensors | wc -l) shards, made in $(secs $t) s"
fi
if [[ " $STAGES " == *" dd "* ]]; then
  r=$(dd if=/dev/zero of=$DISK/dd.bin bs=64M count=128 oflag=direct 2>&1 | tail -1); rm -f $DISK/dd.bin
  say "dd oflag=direct 8 GiB to $DISK: $r"
  r=$(dd if=/dev/zero of=$SHM/dd.bin bs=64M count=128 2>&1 | tail -1); rm -f $SHM/dd.bin
  say "dd 8 GiB to $SHM: $r"
fi
if [[ " $STAGES " == *" load "* ]]; then
  t=$(date +%s.%N); cat $CK/ckpt/*.safetensors > /dev/null; say "cat of the shards (page cache): $(secs $t) s"
  build-gpu/load_bench $CK/ckpt --backend cuda --repeat 3 2>&1 | tail -3 | tee -a "$LOG"
  build-gpu/load_bench $CK/ckpt --backend cuda --repeat 2 --load-threads 16 2>&1 | tail -2 | sed 's/^/16 threads: /' | tee -a "$LOG"
fi
# run BIN DEST DTYPE [extra args]: one whole run; its ready, progress, done and writer lines.
run() {
  local bin=$1 dest=$2 dtype=$3; shift 3
  local o=$dest/out_$(basename "$(dirname "$bin")")_$dtype
  rm -rf "$o"; sync
  local t; t=$(date +%s.%N)
  $bin --model $CK/ckpt --data $CK/data.jsonl --out "$o" --max-seq-len 4096 --dtype "$dtype" --progress-interval 2 "$@" \
    > "$o.log" 2>&1
  local rc=$? wall; wall=$(secs "$t")
  say "-- $(basename "$(dirname "$bin")") to $dest, $dtype $*: rc $rc, wall $wall s, $(du -sh "$o" | cut -f1)"
  grep -oE "ready on .*|[0-9]+ tok/s.*|done: .*|writer path: .*|critical.*" "$o.log" | sed 's/^/   /' | tee -a "$LOG"
  cp "$o.log" "$OUT/$(basename "$o")_$(basename "$dest").log"
  rm -rf "$o"
}
if [[ " $STAGES " == *" runs "* ]]; then
  for dtype in $DTYPES; do
    for b in $BINS; do
      run build-gpu/$b/eagle3_extract $DISK $dtype
      run build-gpu/$b/eagle3_extract $SHM $dtype
    done
  done
fi
if [[ " $STAGES " == *" compute "* ]]; then
  run build-gpu/new/eagle3_extract $SHM bf16 --layers 2 --final none
fi
if [[ " $STAGES " == *" cold "* ]]; then
  C=/root/l3cold; rm -rf $C; mkdir -p $C; cp -r $CK/ckpt $C/; head -8 $CK/data.jsonl > $C/data.jsonl
  drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
  if drop 2>/dev/null; then
    t=$(date +%s.%N); cat $C/ckpt/*.safetensors > /dev/null; say "cold: cat of the shards $(secs $t) s"
    drop; build-gpu/load_bench $C/ckpt --backend cuda --repeat 1 2>&1 | tail -1 | sed 's/^/cold: load_bench /' | tee -a "$LOG"
    drop; rm -rf $DISK/cold; t=$(date +%s.%N)
    build-gpu/new/eagle3_extract --model $C/ckpt --data $C/data.jsonl --out $DISK/cold 2>&1 | grep -oE "ready on .*" | sed 's/^/cold: /' | tee -a "$LOG"
    say "cold: the 8-sample run took $(secs $t) s"
    rm -rf $DISK/cold
  else
    say "cold: /proc/sys/vm/drop_caches is not writable"
  fi
  rm -rf $C
fi
if [[ " $STAGES " == *" hf "* ]]; then
  rm -rf $DISK/hf; t=$(date +%s.%N)
  python3 $BENCH/hf_extract.py $CK/ckpt $CK/data.jsonl $DISK/hf 2>&1 | tail -1 | tee -a "$LOG"
  say "HF hf_extract.py to $DISK, whole run: $(secs $t) s wall; output $(du -sh $DISK/hf | cut -f1)"
  rm -rf $DISK/hf
  build-gpu/new/eagle3_extract bench --config $BENCH/configs/llama3_8b.json --batch 8 --seq 2048 --iters 10 --warmup 2 2>&1 \
    | grep '^{' | tail -1 | sed 's/^/bench llama3_8b: /' | tee -a "$LOG"
fi
if [[ " $STAGES " == *" kimi "* ]]; then
  K=/dev/shm/k2
  [ "${KEEP_LLAMA:-0}" = 1 ] || rm -rf $CK  # /dev/shm holds half the memory: the 40 GB checkpoint needs the room
  if [ ! -f $K/data.jsonl ]; then
    python3 -c "import json; c=json.load(open('$BENCH/configs/kimi_k2_3layer.json')); c['num_hidden_layers']=2; json.dump(c, open('/tmp/kimi_k2_2layer.json','w'))"
    t=$(date +%s.%N)
    python3 $BENCH/make_checkpoint.py /tmp/kimi_k2_2layer.json $K ${KN:-300} 2>&1 | tail -1 | tee -a "$LOG"
    say "kimi 2-layer checkpoint: $(du -sh $K/ckpt | cut -f1), made in $(secs $t) s"
  fi
  CK=$K
  for dtype in $DTYPES; do
    for b in ${KBINS:-new}; do run build-gpu/$b/eagle3_extract $DISK $dtype --layers 0,1,1; done
  done
  CK=/dev/shm/l3
fi
say "== $(date -u) end"
