#!/bin/bash
# Nineteenth session (2026-12-07): E3_GEMM_SLAB_GROUP, built from branch `slab-group` as `new`, main 84ebf83's build
# as `base`. Call 59 found that tiles sharing one weight slab per expert (variant 10) still read 32.75 GB from
# device memory for kimi_k2_3layer's gate/up launch, the tokens' rows read again by the 32 slabs that share them;
# main's walk keeps the m-tiles of a slab together but spreads the 16 slabs that share an m-tile's tokens over all
# 48 of the expert's tiles. Groups of G slabs, m-tile major inside, keep both close.
#   unit     every GPU unit test of the new build (the groups' bit tests among them)
#   cmp      base, and new with G = 0 (main's walk), 2, 4, 8 on kimi_k2_3layer and deepseek_v2_lite_shape
#   ncu      kimi's gate/up launch at G = 0 and 4: time, device-memory reads, tensor pipes
#   power    long benches with nvidia-smi dmon (clocks and power) beside them
#   golden   the golden cases, the default kernels and again with E3_GEMM_SLAB_GROUP=4
# Carry build-gpu/pack (new, base, e3_unit_tests, golden_check, lib, configs). CALL=NN names the log.
set -uo pipefail
STAGES=${*:-unit cmp ncu power golden}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-61}.log
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
k=$C/configs/kimi_k2_3layer.json d=$C/configs/deepseek_v2_lite_shape.json
if wants cmp; then
  for round in $(seq 1 "${ROUNDS:-2}"); do
    E3_BENCH_BIN=$C/base bench "kimi_base_r$round" "$k"
    for g in 0 2 4 8; do bench "kimi_group${g}_r$round" "$k" E3_GEMM_SLAB_GROUP=$g; done
    E3_BENCH_BIN=$C/base bench "deepseek_base_r$round" "$d"
    for g in 0 2 4; do bench "deepseek_group${g}_r$round" "$d" E3_GEMM_SLAB_GROUP=$g; done
  done
fi
m='gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_ltcfabric.sum'
m+=',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second'
if wants ncu; then
  for g in 0 4; do
    E3_GEMM_SLAB_GROUP=$g run_ncu "kimi_gateup_group$g" "$k" 2 --metrics "$m"
    grep -E "(gpu__time|dram__bytes|hit_rate|ltcfabric|hmma|per_second)" "$OUT/logs/ncu_kimi_gateup_group$g.log" | tee -a "$LOG"
  done
fi
if wants power; then
  for c in kimi_k2_3layer deepseek_v2_lite_shape llama3_8b; do E3_BENCH_BIN=$C/base power_bench "${c}_long" "$C/configs/$c.json"; done
fi
if wants golden; then
  golden_cases; mv "$OUT/logs/golden.log" "$OUT/logs/golden_default.log"
  (export E3_GEMM_SLAB_GROUP=4; golden_cases); mv "$OUT/logs/golden.log" "$OUT/logs/golden_group4.log"
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
