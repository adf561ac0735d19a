#!/bin/bash
# Issue 21 item 3, seventh session (2026-12-04): verify's pass with a read pool (each shard
# copied out of the page cache by --readers threads ahead of the thread that hashes and checks
# it; "new", build-gpu/carry/new) against the last session's binary ("base", build-gpu/carry/base):
# the files compared, then warm exports alternately, then cold ones, with vmstat running.
# Carry build-gpu/pack (carry.tar.xz of carry/{base,new,lib,sharedbench}).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/carry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/issue21_call23.log
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo); THP $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
lscpu | grep -E "Thread|Core|Socket|NUMA|L2|L3" >> "$LOG"
mkdir -p build/bin .gpu/shared
ln -sfn "$PWD/build-gpu/carry/lib" build/lib-gpu
ln -sfn "$PWD/build-gpu/carry/base" build/bin/eagle3_extract
ln -sfn "$PWD/build-gpu/carry/sharedbench" .gpu/shared/bench
mkdir -p /root/e3x/issue21_ck
python3 build-gpu/carry/sharedbench/make_checkpoint.py build-gpu/carry/sharedbench/configs/llama3_8b.json /dev/shm/l3 300 > "$OUT/make_checkpoint.log" 2>&1
ln -sfn /dev/shm/l3/ckpt /root/e3x/issue21_ck/ckpt && cp /dev/shm/l3/data.jsonl /root/e3x/issue21_ck/
vmstat -n 1 > "$OUT/vmstat.log" 2>&1 &
VMSTAT=$!
common="SRC=/root/e3x/src FORMATS=specforge DTYPES=bf16"
exp() {  # LABEL BIN COLD [EXPORT_ARGS]
  say "-- $1 cold $3 ${4:-} from $(date -u +%T) (vmstat line $(wc -l < "$OUT/vmstat.log"))"
  env $common COLD=$3 BIN=$PWD/build-gpu/carry/$2 LABEL=$1 EXPORT_ARGS="${4:-}" DEST_DIR=/root/e3x/ex_$1 KEEP=${KEEP:-0} \
    timeout 120 bash tests/gpu/issue21_export.sh > /dev/null
}
KEEP=1 exp base base 0
KEEP=1 exp new new 0
a=$(cd /root/e3x/ex_base/issue21_bf16_specforge && find . -type f ! -name export.json | sort | xargs -P 8 -n 20 sha256sum | sort -k2 | sha256sum)
b=$(cd /root/e3x/ex_new/issue21_bf16_specforge && find . -type f ! -name export.json | sort | xargs -P 8 -n 20 sha256sum | sort -k2 | sha256sum)
say "files of base and new: $([ "$a" = "$b" ] && echo same || echo DIFFERENT) ($(find /root/e3x/ex_new/issue21_bf16_specforge -type f | wc -l) files)"
rm -rf /root/e3x/ex_base /root/e3x/ex_new
for round in 1 2; do
  exp base base 0
  exp new new 0
  exp new4 new 0 "--readers 4"
done
exp base base 1
exp new new 1
# verify alone, SRC in the page cache
for b in base new; do
  cat /root/e3x/src/shard-*.h5 > /dev/null
  say "verify $b: $(build-gpu/carry/$b verify /root/e3x/src 2>&1 | grep -oE 'read [0-9.]+ GB of .*')"
done
# Where the CPU goes in one warm export of new
if command -v perf > /dev/null; then
  cat /root/e3x/src/shard-*.h5 > /dev/null
  rm -rf /root/e3x/ex_perf
  perf record -g -o /tmp/perf.data build-gpu/carry/new export --format specforge /root/e3x/src /root/e3x/ex_perf > "$OUT/perf_export.log" 2>&1
  perf report -i /tmp/perf.data --no-children --sort dso,sym 2>/dev/null | grep -E "^ +[0-9.]+%" | head -40 > "$OUT/perf_top.txt"
  perf report -i /tmp/perf.data --no-children --sort comm,dso 2>/dev/null | grep -E "^ +[0-9.]+%" | head -30 > "$OUT/perf_threads.txt"
  rm -rf /root/e3x/ex_perf
else
  say "no perf here"
fi
kill $VMSTAT
grep -E "specforge|GB written" "$OUT/issue21_export.log" >> "$LOG"
say "== done $(date -u)"
