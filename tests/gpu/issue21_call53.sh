#!/bin/bash
# For the next GPU machine (written in the seventeenth session, not run): where kimi_k2_3layer's gate/up
# launch reads its weights 1.41 times from device memory (docs/PERFORMANCE.md, seventeenth session). ncu on
# that launch at 8 x 512 tokens (about 85 rows per expert: one m-tile each, so every weight byte is asked for
# once) and at 8 x 2048 (three m-tiles), both with the default walk and E3_L2_SIDES=1. Weights: 384 x 4096 x
# 7168 x 2 B = 22.5 GB. First the unit tests and the golden cases, which have not yet run on a GPU since
# the MoE scratch lost its gate|up buffer where the silu is fused (79c2e2d). Main's build as $C/new; CALL=NN
# names the log.
#   unit    the GPU's unit tests (tests/gpu/lib.sh)
#   bench   main's deepseek_v2_lite_shape, kimi_k2_3layer and kimi's INT4 / FP8 experts, ROUNDS (2) rounds,
#           then kimi_k2_3layer under E3_PROFILE=1 (where its step goes on this machine)
#   ncu     the reads, as above
#   golden  the golden cases
# Carry build-gpu/pack (tar of build-gpu/carry: new, e3_unit_tests, golden_check, lib, configs).
set -uo pipefail
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-53}.log
STAGES=${*:-unit bench ncu golden}
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
if wants bench; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for c in deepseek_v2_lite_shape kimi_k2_3layer; do bench "${c}_r$round" "$C/configs/$c.json"; done
    for q in int4 fp8; do bench "kimi_${q}_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm; done
  done
  bench kimi_profile "$C/configs/kimi_k2_3layer.json" E3_PROFILE=1
  grep -vE '^\{' "$OUT/logs/bench_kimi_profile.log" | tail -60 >> "$LOG"
fi
m='gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_ltcfabric.sum'
m+=',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
wants ncu && for seq in 512 2048; do
  for sides in 0 1; do
    name=kimi_seq${seq}_sides$sides
    NCU_SEQ=$seq E3_L2_SIDES=$sides run_ncu "$name" "$C/configs/kimi_k2_3layer.json" 2 --metrics "$m"
    grep -E "(gpu__time|dram__bytes|hit_rate|ltcfabric|hmma)" "$OUT/logs/ncu_$name.log" | tee -a "$LOG"
  done
done
wants golden && golden_cases
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
