#!/bin/bash
# Eighteenth session (2026-12-07): E3_GEMM_LOCKSTEP again after call 55 hung in it (thread 0 of the loaders
# waited alone, and the rest of its warp reached the loaders' named barrier without it; now warp 0 waits
# together). Short timeouts throughout, so that a hang costs seconds, not the call.
#   unit    the two GEMM bit tests (lockstep's bits against the other walks)
#   cmp     main's build ($C/base) against the new one with E3_GEMM_LOCKSTEP 0, 4, 8, 16, ROUNDS (2) rounds,
#           kimi_k2_3layer; deepseek_v2_lite_shape base / 0 / 8
#   ncu     kimi's gate/up launch, E3_GEMM_LOCKSTEP 0 and 8
#   golden  the golden cases with E3_GEMM_LOCKSTEP=8
# Carry build-gpu/pack (new, base, e3_unit_tests, golden_check, lib, configs). CALL=NN names the log.
set -uo pipefail
STAGES=${*:-unit cmp ncu golden}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-56}.log
. "$(dirname "$0")/lib.sh"
start_call
quick() {  # NAME CONFIG BIN [env...]: bench with a 40 s limit
  local name=$1 config=$2 bin=$3; shift 3
  env "$@" timeout 40 "$bin" bench --config "$config" --batch 8 --seq 2048 --iters 5 --warmup 2 > "$OUT/logs/bench_$name.log" 2>&1
  say "$(date -u +%T) $name rc $?: $(fields "$OUT/logs/bench_$name.log")"
}
if wants unit; then
  timeout 90 "$C/e3_unit_tests" --gtest_filter='CudaKernel.TheWarpSpecialised*:CudaKernel.AnExpertsLastMTile*:CudaOptions.*' \
    > "$OUT/logs/unit.log" 2>&1
  say "unit rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/logs/unit.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" "$OUT/logs/unit.log" | head -20 | tee -a "$LOG"
fi
if wants cmp; then
  k=$C/configs/kimi_k2_3layer.json d=$C/configs/deepseek_v2_lite_shape.json
  for round in $(seq 1 "${ROUNDS:-2}"); do
    quick "kimi_base_r$round" "$k" "$C/base"
    for w in 0 4 8 16; do quick "kimi_lockstep${w}_r$round" "$k" "$C/new" E3_GEMM_LOCKSTEP=$w; done
    quick "deepseek_base_r$round" "$d" "$C/base"
    for w in 0 8; do quick "deepseek_lockstep${w}_r$round" "$d" "$C/new" E3_GEMM_LOCKSTEP=$w; done
  done
fi
if wants ncu; then
  m='gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct'
  m+=',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
  for w in 0 8; do
    E3_GEMM_LOCKSTEP=$w timeout 60 ncu --clock-control none --kernel-name regex:grouped_gemm_ws --launch-skip 2 --launch-count 1 \
      --metrics "$m" "$C/new" bench --config "$C/configs/kimi_k2_3layer.json" --batch 8 --seq 2048 --iters 1 --warmup 1 \
      > "$OUT/logs/ncu_lockstep$w.log" 2>&1
    say "ncu lockstep $w rc $?:"
    grep -E "(gpu__time|dram__bytes|hit_rate|hmma)" "$OUT/logs/ncu_lockstep$w.log" | tee -a "$LOG"
  done
fi
if wants golden; then
  export E3_GEMM_LOCKSTEP=8
  golden_cases
  unset E3_GEMM_LOCKSTEP
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
