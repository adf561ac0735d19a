#!/bin/bash
# Seventeenth session (2026-12-07), issue 21 item 4: E3_MOE_GATHER, the tokens copied into the
# experts' row order before the gate/up GEMM so that its loader brings A through the copy engine
# rather than row by row with cp.async. Call 51 saw kimi's gate/up launch 12% slower when each of
# the loader's loads merely carried an L2 policy, so the loader's gather may be what holds it.
#   unit    the GPU's unit tests (the gathered form's bits against the cp.async kernel's)
#   cmp     main's build ($C/base), then the new one with E3_MOE_GATHER 0 and 1 and E3_L2_SIDES=1, interleaved,
#           ROUNDS rounds, deepseek_v2_lite_shape and kimi_k2_3layer (bf16), then kimi's INT4 / FP8 experts, gather 0 and 1
#   ncu     kimi's gate/up launch (NCU_LAUNCHES, 2) with E3_MOE_GATHER 0 and 1, and the gather kernel itself
#   golden  the golden cases with E3_MOE_GATHER=1 (tests/gpu/lib.sh)
# Carry build-gpu/pack (tar of build-gpu/carry: new, base, e3_unit_tests, golden_check, lib, configs). CALL=NN names the log.
set -uo pipefail
STAGES=${*:-unit cmp ncu golden}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-52}.log
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
if wants cmp; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for c in deepseek_v2_lite_shape kimi_k2_3layer; do
      [ -x "$C/base" ] && E3_BENCH_BIN=$C/base bench "${c}_base_r$round" "$C/configs/$c.json"
      for gather in 0 1; do bench "${c}_gather${gather}_r$round" "$C/configs/$c.json" E3_MOE_GATHER=$gather; done
      bench "${c}_gather1_sides1_r$round" "$C/configs/$c.json" E3_MOE_GATHER=1 E3_L2_SIDES=1
    done
    for q in int4 fp8; do
      for gather in 0 1; do
        bench "kimi_${q}_gather${gather}_r$round" /tmp/kimi_k2_3layer_$q.json E3_MOE_GATHER=$gather -- --expert-dequant gemm
      done
    done
  done
fi
if wants ncu; then
  m='gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct'
  m+=',lts__t_sectors_srcunit_ltcfabric.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
  for launch in ${NCU_LAUNCHES:-2}; do
    for gather in 0 1; do
      E3_MOE_GATHER=$gather run_ncu "kimi_launch${launch}_gather$gather" "$C/configs/kimi_k2_3layer.json" "$launch" --metrics "$m"
      grep -E "(gpu__time|dram__bytes|hit_rate|ltcfabric|hmma)" "$OUT/logs/ncu_kimi_launch${launch}_gather$gather.log" | tee -a "$LOG"
    done
  done
  # The copy itself: its time and bytes (the first of the bench step's gather launches).
  E3_MOE_GATHER=1 timeout 240 ncu --clock-control none --kernel-name regex:gather_rows --launch-skip 1 --launch-count 1 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$C/new" bench --config "$C/configs/kimi_k2_3layer.json" --batch 8 --seq 2048 --iters 1 --warmup 1 > "$OUT/logs/ncu_gather.log" 2>&1
  say "ncu gather rc $?:"
  grep -E "(gpu__time|dram__bytes)" "$OUT/logs/ncu_gather.log" | tee -a "$LOG"
fi
if wants golden; then
  export E3_MOE_GATHER=1
  golden_cases
  unset E3_MOE_GATHER
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
