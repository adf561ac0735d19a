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
quick() {  # NAME CONFIG BIN [env...]: bench with a 40 s limit
  local name=$1 config=$2 bin=$3; shift 3
  env "$@" timeout 40 "$bin" bench --config "$config" --batch 8 --seq 2048 --iters 5 --warmup 2 > "$OUT/logs/bench_$name.log" 2>&1
  say "$(date -u +%T) $name rc $?: $(fields "$OUT/logs/bench_$name.log")"
}
if wants unit; then
  timeout 60 "$C/e3_unit_tests" --gtest_filter='CudaKernel.TheWarpSpecialised*:CudaKernel.AnExpertsLastMTile*' \
    > "$OUT/logs/unit.log" 2>&1
  say "unit rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/logs/unit.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" "$OUT/logs/unit.log" | head -20 | tee -a "$LOG"
fi
if wants cmp; then
  k=$C/configs/kimi_k2_3layer.json d=$C/configs/deepseek_v2_lite_shape.json
  for round in $(seq 1 "${ROUNDS:-2}"); do
    quick "kimi_base_r$round" "$k" "$C/base"
    for w in 0 8 16; do quick "kimi_lockstep${w}_r$round" "$k" "$C/new" E3_GEMM_LOCKSTEP=$w; done
    quick "deepseek_base_r$round" "$d" "$C/base"
    quick "deepseek_lockstep8_r$round" "$d" "$C/new" E3_GEMM_LOCKSTEP=8
  done
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
