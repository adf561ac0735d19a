#!/bin/bash
# Eighteenth session (2026-12-07): E3_GEMM_LOCKSTEP a third time. Call 56 ran it (same bits) 28% slower at every
# window: warp 0 of each loader waited every k-tile for its load of the siblings' progress. Now that load is
# looked at one k-tile later, and lockstep is a template flag (bf16 experts, 64-column k-tiles), so that with it
# off the loader is main's. Build docs/pending/issue21-bk32-lockstep.mbox as `new`. Lean: the two GEMM bit tests,
# then kimi_k2_3layer and deepseek_v2_lite_shape, main's build ($C/base) against the new one; no ncu (call 56's was
# cut by its 60 s limit and left the GPU's memory held: give ncu 240 s, as tests/gpu/lib.sh's run_ncu does).
set -uo pipefail
STAGES=${*:-unit cmp}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-57}.log
. "$(dirname "$0")/lib.sh"
start_call
export BENCH_LIMIT=40  # a hang costs seconds, not the call
if wants unit; then
  timeout 60 "$C/e3_unit_tests" --gtest_filter='CudaKernel.TheWarpSpecialised*:CudaKernel.AnExpertsLastMTile*' \
    > "$OUT/logs/unit.log" 2>&1
  say "unit rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/logs/unit.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" "$OUT/logs/unit.log" | head -20 | tee -a "$LOG"
fi
if wants cmp; then
  k=$C/configs/kimi_k2_3layer.json d=$C/configs/deepseek_v2_lite_shape.json
  for round in $(seq 1 "${ROUNDS:-2}"); do
    E3_BENCH_BIN=$C/base bench "kimi_base_r$round" "$k"
    for w in 0 8 16; do bench "kimi_lockstep${w}_r$round" "$k" E3_GEMM_LOCKSTEP=$w; done
    E3_BENCH_BIN=$C/base bench "deepseek_base_r$round" "$d"
    bench "deepseek_lockstep8_r$round" "$d" E3_GEMM_LOCKSTEP=8
  done
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
