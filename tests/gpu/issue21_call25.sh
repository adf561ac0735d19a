#!/bin/bash
# Issue 21 item 3, seventh session (2026-12-04), third call: a shard in the page cache mapped and
# checked where it lies, the export converting from the mapping ("new", build-gpu/carry/new),
# against call 24's binary that copies it out with pread into 2 MiB-page buffers ("copy") and the
# last session's ("base"). SRC as in call 24 (make_export_src, 300 samples, about 12.2 GB).
# Carry build-gpu/pack (carry.tar.xz of carry/{base,copy,new,lib,make_export_src}).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/carry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call25.log
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nproc) cores"
C=$PWD/build-gpu/carry
mkdir -p /root/e3x build/bin
ln -sfn "$C/lib" build/lib-gpu
$C/make_export_src /root/e3x/src --hidden 4096 --layers-total 32 --dtype bf16 --samples 300 --tokens 650 \
  --samples-per-shard 100 --vocab 128256 > "$OUT/logs/make_src.log" 2>&1 || { say "make_export_src failed"; exit 1; }
for i in 1 2 3; do
  s=$(date +%s.%N); $C/new --version > /dev/null 2>&1; e=$(date +%s.%N)
  say "new --version: $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f s", e - s }')"
done
exp() {  # LABEL BIN COLD
  env SRC=/root/e3x/src FORMATS=specforge DTYPES=bf16 OUT=$OUT/logs COLD=$3 BIN=$C/$2 LABEL=$1 \
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
  exp copy copy 0
  exp new new 0
done
exp base base 1
exp new new 1
for b in base new; do
  cat /root/e3x/src/shard-*.h5 > /dev/null
  say "verify $b: $($C/$b verify /root/e3x/src 2>&1 | grep -oE 'read [0-9.]+ GB of .*')"
done
grep -E "specforge|GB written" "$OUT/logs/issue21_export.log" >> "$LOG"
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
