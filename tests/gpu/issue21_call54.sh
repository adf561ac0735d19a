#!/bin/bash
# Eighteenth session (2026-12-07), issue 21 item 4: more bytes in flight in the expert GEMM. Call 53 found
# kimi_k2_3layer's gate/up launch neither at device memory's rate (2.2 of the 2.9 TB/s it reached at
# 8 x 512) nor at the tensor pipes' (64% active): so more loads in flight per SM. E3_GEMM_BK32 gives the
# counted walk 32-column k-tiles in 9 stages (the same shared memory as 4 of 64 columns, but about 7 stages
# in flight rather than 2-3); the quantized experts' register-operand kernel now fills 226 KiB with stages
# (INT4 9, FP8 7, against 8 and 6).
#   unit    the GPU's unit tests (the 32-column counted walk's bits against the other walks)
#   cmp     main's build ($C/base) against the new one, E3_GEMM_BK32 0-3, interleaved, ROUNDS (3) rounds,
#           deepseek_v2_lite_shape and kimi_k2_3layer, then kimi's INT4 / FP8 experts, base and new
#   ncu     kimi's gate/up and down launches, E3_GEMM_BK32 0 and 3
#   golden  the golden cases with the new build, default and E3_GEMM_BK32=3 (tests/gpu/lib.sh)
# Carry build-gpu/pack (tar of build-gpu/carry: new, base, e3_unit_tests, golden_check, lib, configs). CALL=NN names the log.
set -uo pipefail
STAGES=${*:-unit cmp ncu golden}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-54}.log
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
if wants cmp; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for c in deepseek_v2_lite_shape kimi_k2_3layer; do
      E3_BENCH_BIN=$C/base bench "${c}_base_r$round" "$C/configs/$c.json"
      for bk in 0 1 2 3; do bench "${c}_bk32_${bk}_r$round" "$C/configs/$c.json" E3_GEMM_BK32=$bk; done
    done
    for q in int4 fp8; do
      E3_BENCH_BIN=$C/base bench "kimi_${q}_base_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
      bench "kimi_${q}_new_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
    done
  done
fi
if wants ncu; then
  m='gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct'
  m+=',lts__t_sectors_srcunit_ltcfabric.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
  for launch in 2 3; do
    for bk in 0 3; do
      E3_GEMM_BK32=$bk run_ncu "kimi_launch${launch}_bk32_$bk" "$C/configs/kimi_k2_3layer.json" "$launch" --metrics "$m"
      grep -E "(gpu__time|dram__bytes|hit_rate|ltcfabric|hmma)" "$OUT/logs/ncu_kimi_launch${launch}_bk32_$bk.log" | tee -a "$LOG"
    done
  done
fi
if wants golden; then
  golden_cases
  mv "$OUT/logs/golden.log" "$OUT/logs/golden_default.log"
  export E3_GEMM_BK32=3
  golden_cases
  unset E3_GEMM_BK32
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
