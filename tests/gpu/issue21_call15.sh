#!/bin/bash
# Issue 21 item 4, sixth session (2026-12-04): binaries of the wgmma attention side by side in one
# call. Carry build-gpu/carry as for issue21_call14.sh, plus eagle3_extract_prev (the commit
# before); BINS names the binaries (files in the carry) to compare, ROUNDS how often to alternate,
# HF=1 adds shared/bench/hf_baseline.py on each shape after them; PROFILE=0 times without E3_PROFILE.
set -uo pipefail
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/issue21_call15.log
say() { echo "$*" | tee -a "$LOG"; }
fields() { grep -oE '"(tokens_per_s|mfu|step_ms)":[0-9.]+' "$1" | tr '\n' ' '; }
CFG=$C/sharedbench/configs
say "== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
timeout 300 "$C/e3_unit_tests" --gtest_filter='*Cuda*' > "$OUT/tests.log" 2>&1
rc=$?
say "unit rc $rc: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
[ $rc -eq 0 ] || { grep -E "Failure|Expected|Which is|FAILED|error" "$OUT/tests.log" | head -30 | tee -a "$LOG"; exit 1; }
for round in $(seq ${ROUNDS:-2}); do
  for s in ${BENCH_SHAPES:-deepseek_v2_lite_shape llama3_8b}; do
    for b in ${BINS:-eagle3_extract_prev eagle3_extract}; do
      E3_PROFILE=${PROFILE:-1} timeout 150 "$C/$b" bench --config "$CFG/$s.json" --batch 8 --seq 2048 --iters 5 --warmup 2 \
        > "$OUT/bench_${s}_$b.log" 2>&1
      say "$(date -u +%T) round $round $s $b rc $?: $(grep -E '^attention ' "$OUT/bench_${s}_$b.log" | tr -s ' ') $(fields "$OUT/bench_${s}_$b.log")"
    done
  done
done
if [ "${HF:-0}" = 1 ]; then
  for s in ${BENCH_SHAPES:-deepseek_v2_lite_shape llama3_8b}; do
    timeout 150 python3 "$C/sharedbench/hf_baseline.py" "$CFG/$s.json" > "$OUT/hf_$s.log" 2>&1
    say "$(date -u +%T) HF $s rc $?: $(tail -1 "$OUT/hf_$s.log")"
  done
fi
say "== done $(date -u)"
