#!/bin/bash
# Issue 21 item 3, seventh session (2026-12-04), second call: the machine's memory and disk by
# kind of page (tests/gpu/memory_probe.cpp), then the export with its O_DIRECT write buffers and
# cold-read ring in 2 MiB pages ("new", build-gpu/carry/new, also with --readers 2) against the
# last session's binary ("base"). SRC is made without the GPU by make_export_src: 300 samples of
# 650-1300 tokens, llama3_8b's width, bf16, --final both (about 11.9 GB in 3 shards).
# Carry build-gpu/pack (carry.tar.xz of carry/{base,new,lib,make_export_src,memory_probe,perf}).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/carry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call24.log
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nproc) cores; THP $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag); kernel $(uname -r)"
C=$PWD/build-gpu/carry
mkdir -p /root/e3x build/bin
ln -sfn "$C/lib" build/lib-gpu
s=$(date +%s)
$C/make_export_src /root/e3x/src --hidden 4096 --layers-total 32 --dtype bf16 --samples 300 --tokens 650 \
  --samples-per-shard 100 --vocab 128256 > "$OUT/logs/make_src.log" 2>&1 || { say "make_export_src failed"; tail -3 "$OUT/logs/make_src.log"; exit 1; }
say "SRC: $(du -cb /root/e3x/src/shard-*.h5 | tail -1 | cut -f1) bytes in $(($(date +%s) - s)) s"
cat /root/e3x/src/shard-000000.h5 > /dev/null
say "-- memory_probe (shard 0 in the page cache; O_DIRECT writes into /root/e3x)"
$C/memory_probe /root/e3x/src/shard-000000.h5 12 /root/e3x 2>&1 | tee -a "$LOG"
exp() {  # LABEL BIN COLD [EXPORT_ARGS]
  grep AnonHugePages /proc/meminfo >> "$OUT/logs/meminfo.log"
  env SRC=/root/e3x/src FORMATS=specforge DTYPES=bf16 OUT=$OUT/logs COLD=$3 BIN=$C/$2 LABEL=$1 EXPORT_ARGS="${4:-}" \
    DEST_DIR=/root/e3x/ex_$1 KEEP=${KEEP:-0} timeout 120 bash tests/gpu/issue21_export.sh > /dev/null
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
  exp newr2 new 0 "--readers 2"
done
exp base base 1
exp new new 1
exp base base 1
exp new new 1
for b in base new; do
  cat /root/e3x/src/shard-*.h5 > /dev/null
  say "verify $b: $($C/$b verify /root/e3x/src 2>&1 | grep -oE 'read [0-9.]+ GB of .*')"
done
# Where the CPU goes in one warm export of each
for b in base new; do
  cat /root/e3x/src/shard-*.h5 > /dev/null
  rm -rf /root/e3x/ex_perf
  LD_LIBRARY_PATH=$C/perf/lib:$LD_LIBRARY_PATH $C/perf/perf record -F 499 -g -o /tmp/perf_$b.data $C/$b export --format specforge /root/e3x/src /root/e3x/ex_perf > "$OUT/logs/perf_export_$b.log" 2>&1 ||
    say "perf record failed: $(tail -2 "$OUT/logs/perf_export_$b.log")"
  LD_LIBRARY_PATH=$C/perf/lib:$LD_LIBRARY_PATH $C/perf/perf report -i /tmp/perf_$b.data --no-children --sort dso,sym 2>/dev/null | grep -E "^ +[0-9.]+%" | head -40 > "$OUT/logs/perf_top_$b.txt"
  LD_LIBRARY_PATH=$C/perf/lib:$LD_LIBRARY_PATH $C/perf/perf report -i /tmp/perf_$b.data --no-children --sort sym -g caller,0.5,callee --percent-limit 3 2>/dev/null | head -300 > "$OUT/logs/perf_callers_$b.txt"
  say "perf $b: $(grep -oE 'GB written in [0-9.]+ s' "$OUT/logs/perf_export_$b.log" | head -1); top: $(head -3 "$OUT/logs/perf_top_$b.txt" | tr -s ' ' | tr '\n' ';')"
  rm -rf /root/e3x/ex_perf
done
grep -E "specforge|GB written" "$OUT/logs/issue21_export.log" >> "$LOG"
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
