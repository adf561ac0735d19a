#!/bin/bash
# Fourteenth session (2026-12-06), issue 21 item 4: an expert's last m-tile of 112 rows or fewer as the
# transposed product (kernels/grouped_gemm_sm90_ws.cu, narrow_tile), against the build before it
# (carried as $C/base). CALL=NN names the log.
#   unit, golden  the GPU's unit tests (the new AnExpertsLastMTileOfAnyHeightGivesTheSameBits among them)
#           and the golden cases (tests/gpu/lib.sh)
#   cmp     base and new interleaved, deepseek_v2_lite_shape and kimi_k2_3layer (bf16), two rounds; then
#           kimi_k2_3layer, new, with E3_L2_SIDES=1
#   quant   kimi_k2_3layer with INT4 and FP8 experts (--expert-dequant gemm, variant 9: its narrow tiles too)
#   ncu     kimi_k2_3layer's gate/up and down launches, base and new: time, tensor pipes, DRAM and L2
# Carry build-gpu/pack (tar of build-gpu/carry: new, base, e3_unit_tests, golden_check, lib, configs).
set -uo pipefail
STAGES=${*:-unit cmp quant ncu golden}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-46}.log
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
if wants cmp; then
  for round in 1 2; do
    for c in deepseek_v2_lite_shape kimi_k2_3layer; do
      E3_BENCH_BIN=$C/base bench "${c}_base_r$round" "$C/configs/$c.json"
      bench "${c}_new_r$round" "$C/configs/$c.json"
    done
  done
  bench kimi_k2_3layer_new_sides1 "$C/configs/kimi_k2_3layer.json" E3_L2_SIDES=1
fi
if wants quant; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
  for q in int4 fp8; do
    E3_BENCH_BIN=$C/base bench "kimi_${q}_base" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
    bench "kimi_${q}_new" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
  done
fi
wants golden && golden_cases
if wants ncu; then
  m='gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_ltcfabric.sum'
  m+=',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum'
  for launch in 2 3; do
    for b in base new; do
      E3_BENCH_BIN=$C/$b run_ncu "kimi_launch${launch}_$b" "$C/configs/kimi_k2_3layer.json" "$launch" --metrics "$m"
      grep -E "(gpu__time|dram__bytes|hit_rate|ltcfabric|hmma)" "$OUT/logs/ncu_kimi_launch${launch}_$b.log" | tee -a "$LOG"
    done
  done
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
