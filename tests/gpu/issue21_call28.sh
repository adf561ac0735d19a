#!/bin/bash
# Issue 21 item 3, for the next session with a GPU machine (written 2026-12-04, when none was
# lent): the eighth session's build ("new": cuBLASLt opened at the first GEMM, Open MPI's fast
# singleton defaults, states decoded and rearranged straight into the O_DIRECT buffer) against
# the seventh's ("base", 6b0ac0b), each started directly as the README shows (LAUNCH empty) and,
# for comparison with calls 23-27, under `mpirun -np 1`. SRC as in calls 24-27 (make_export_src,
# 300 samples, 12.15 GB bf16; SRC_fp8 6.09 GB), warm, then cold.
# Carry build-gpu/pack (carry.tar.xz of carry/{base,new,lib,make_export_src}).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/carry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call28.log
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nproc) cores"
C=$PWD/build-gpu/carry
mkdir -p /root/e3x build/bin
ln -sfn "$C/lib" build/lib-gpu
for b in base new; do
  for i in 1 2 3; do /usr/bin/time -f "$b --version: %e s" "$C/$b" --version > /dev/null 2>> "$LOG"; done
done
for d in bf16 fp8; do
  dir=/root/e3x/src; [ $d = fp8 ] && dir=/root/e3x/src_fp8
  $C/make_export_src $dir --hidden 4096 --layers-total 32 --dtype $d --samples 300 --tokens 650 \
    --samples-per-shard 100 --vocab 128256 > "$OUT/logs/make_src_$d.log" 2>&1 || { say "make_export_src $d failed"; exit 1; }
done
exp() {  # LABEL BIN FORMATS DTYPES COLD [LAUNCH]
  env SRC=/root/e3x/src FORMATS="$3" DTYPES="$4" OUT=$OUT/logs COLD=$5 BIN=$C/$2 LABEL=$1 LAUNCH="${6:-}" \
    DEST_DIR=/root/e3x/ex_$1 timeout 240 bash tests/gpu/issue21_export.sh > /dev/null
}
exp new new "specforge speculators modelopt" "bf16 fp8" 0
exp base base "specforge speculators modelopt" "bf16 fp8" 0
exp new new specforge bf16 0
exp base base specforge bf16 0
exp new_mpirun new specforge bf16 0 "mpirun --allow-run-as-root -np 1"
exp new new specforge "bf16 fp8" 1
exp base base specforge bf16 1
grep -E "specforge|speculators|modelopt|GB written" "$OUT/logs/issue21_export.log" >> "$LOG"
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
