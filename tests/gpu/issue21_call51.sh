#!/bin/bash
# Sixteenth session (2026-12-07), issue 21 item 4, for the next GPU machine: where kimi_k2_3layer's
# gate/up launch gets 9.6 GB more from device memory than its weights and tokens (32.4 GB against
# 22.8; docs/PERFORMANCE.md, sixteenth session), and whether E3_L2_HINTS or E3_L2_SIDES=1 should be
# the default. One build ($C/new); CALL=NN names the log.
#   unit    the GPU's unit tests (TheWarpSpecialisedGemmGivesTheCpAsyncKernelsBits now with E3_L2_HINTS)
#   cmp     main's build ($C/base, where carried), E3_L2_HINTS 0-3 and E3_L2_SIDES=1 interleaved, ROUNDS rounds, deepseek_v2_lite_shape and
#           kimi_k2_3layer (bf16), then kimi with INT4 and FP8 experts, hints 0 and 3
#   ncu     kimi's gate/up launch (NCU_LAUNCHES, 2; 3 is the down one) under E3_L2_HINTS NCU_HINTS (0 1 3): time, DRAM
#           reads, L2 hit rate, the L2 partition link's sectors, tensor pipes
#   golden  the golden cases (tests/gpu/lib.sh)
# Carry build-gpu/pack (tar of build-gpu/carry: new, base, e3_unit_tests, golden_check, lib, configs).
set -uo pipefail
STAGES=${*:-unit cmp ncu golden}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-51}.log
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
if wants cmp; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for c in deepseek_v2_lite_shape kimi_k2_3layer; do
      [ -x "$C/base" ] && E3_BENCH_BIN=$C/base bench "${c}_base_r$round" "$C/configs/$c.json"
      for h in 0 1 2 3; do bench "${c}_hints${h}_r$round" "$C/configs/$c.json" E3_L2_HINTS=$h; done
      bench "${c}_sides1_r$round" "$C/configs/$c.json" E3_L2_SIDES=1
    done
    for q in int4 fp8; do
      for h in 0 3; do bench "kimi_${q}_hints${h}_r$round" /tmp/kimi_k2_3layer_$q.json E3_L2_HINTS=$h -- --expert-dequant gemm; done
    done
  done
fi
if wants ncu; then
  m='gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_ltcfabric.sum'
  m+=',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
  for launch in ${NCU_LAUNCHES:-2}; do
    for h in ${NCU_HINTS:-0 1 3}; do
      E3_L2_HINTS=$h run_ncu "kimi_launch${launch}_hints$h" "$C/configs/kimi_k2_3layer.json" "$launch" --metrics "$m"
      grep -E "(gpu__time|dram__bytes|hit_rate|ltcfabric|hmma)" "$OUT/logs/ncu_kimi_launch${launch}_hints$h.log" | tee -a "$LOG"
    done
  done
fi
wants golden && golden_cases
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
