#!/bin/bash
# Issue 21 item 3, seventh session (2026-12-04), fifth call: the final build of the session ("new": mapped SRC, the fp8 decode vectorised, the converted states in reused 2 MiB-page buffers) on every
# format and on an fp8 SRC, beside the last session's binary ("base") on specforge; SRC as in
# calls 24-25 (make_export_src, 300 samples), plus the same in fp8 (SRC_fp8).
# Carry build-gpu/pack (carry.tar.xz of carry/{base,new,lib,make_export_src}).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/carry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call27.log
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nproc) cores"
C=$PWD/build-gpu/carry
mkdir -p /root/e3x build/bin
ln -sfn "$C/lib" build/lib-gpu
for d in bf16 fp8; do
  dir=/root/e3x/src; [ $d = fp8 ] && dir=/root/e3x/src_fp8
  $C/make_export_src $dir --hidden 4096 --layers-total 32 --dtype $d --samples 300 --tokens 650 \
    --samples-per-shard 100 --vocab 128256 > "$OUT/logs/make_src_$d.log" 2>&1 || { say "make_export_src $d failed"; exit 1; }
done
exp() {  # LABEL BIN FORMATS DTYPES
  env SRC=/root/e3x/src FORMATS="$3" DTYPES="$4" OUT=$OUT/logs COLD=0 BIN=$C/$2 LABEL=$1 \
    DEST_DIR=/root/e3x/ex_$1 timeout 200 bash tests/gpu/issue21_export.sh > /dev/null
}
exp new new "specforge speculators modelopt" "bf16 fp8"
exp base base specforge bf16
exp new new specforge bf16
exp base base specforge bf16
exp new new specforge bf16
grep -E "specforge|speculators|modelopt|GB written" "$OUT/logs/issue21_export.log" >> "$LOG"
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
