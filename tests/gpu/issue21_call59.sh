#!/bin/bash
# Nineteenth session (2026-12-07). Built from branch `wide` as `new` (main 84ebf83 + the capture's fp32 -> bf16
# four values a thread + E3_GEMM_VARIANT=10, the wide-tile expert GEMM), main 84ebf83's build as `base`:
#   unit     every GPU unit test of the new build (the capture's bit test, variant 10's bit tests)
#   cmp      base against new (the capture) and new with E3_GEMM_VARIANT=10, ROUNDS rounds
#   profile  E3_PROFILE=1 on kimi_k2_3layer (base, new, new + variant 10) and deepseek_v2_lite_shape (new, + 10)
#   ncu      kimi_k2_3layer's gate/up launch (8 x 2048), variants 9 and 10: time, device-memory reads, tensor pipes
#   golden   the golden cases, the default and again with E3_GEMM_VARIANT=10
# Carry build-gpu/pack (new, base, e3_unit_tests, golden_check, lib, configs). CALL=NN names the log.
set -uo pipefail
STAGES=${*:-unit cmp profile ncu golden}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-59}.log
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
k=$C/configs/kimi_k2_3layer.json d=$C/configs/deepseek_v2_lite_shape.json l=$C/configs/llama3_8b.json
if wants cmp; then
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for c in kimi_k2_3layer deepseek_v2_lite_shape; do
      E3_BENCH_BIN=$C/base bench "${c}_base_r$round" "$C/configs/$c.json"
      bench "${c}_new_r$round" "$C/configs/$c.json"
      bench "${c}_wide_r$round" "$C/configs/$c.json" E3_GEMM_VARIANT=10
    done
    E3_BENCH_BIN=$C/base bench "llama3_8b_base_r$round" "$l"
    bench "llama3_8b_new_r$round" "$l"
  done
fi
profile_lines() {  # NAME: the expert GEMMs', the capture copy's and the step's lines of a profile
  grep -E "^(copy|moe_gemm|add_rmsnorm) " "$OUT/logs/bench_$1.log" | sed "s/^/$1 /" | tee -a "$LOG"
  say "$1 $(fields "$OUT/logs/bench_$1.log")"
}
if wants profile; then
  E3_BENCH_BIN=$C/base bench kimi_profile_base "$k" E3_PROFILE=1; profile_lines kimi_profile_base
  bench kimi_profile_new "$k" E3_PROFILE=1; profile_lines kimi_profile_new
  bench kimi_profile_wide "$k" E3_PROFILE=1 E3_GEMM_VARIANT=10; profile_lines kimi_profile_wide
  bench deepseek_profile_new "$d" E3_PROFILE=1; profile_lines deepseek_profile_new
  bench deepseek_profile_wide "$d" E3_PROFILE=1 E3_GEMM_VARIANT=10; profile_lines deepseek_profile_wide
fi
m='gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_ltcfabric.sum'
m+=',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
if wants ncu; then
  for v in 9 10; do
    NCU_KERNEL=grouped_gemm_w E3_GEMM_VARIANT=$v run_ncu "kimi_gateup_v$v" "$k" 2 --metrics "$m"
    grep -E "(grouped_gemm_w|gpu__time|dram__bytes|hit_rate|ltcfabric|hmma)" "$OUT/logs/ncu_kimi_gateup_v$v.log" | tee -a "$LOG"
  done
fi
if wants golden; then
  golden_cases; mv "$OUT/logs/golden.log" "$OUT/logs/golden_default.log"
  (export E3_GEMM_VARIANT=10; golden_cases); mv "$OUT/logs/golden.log" "$OUT/logs/golden_wide.log"
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
