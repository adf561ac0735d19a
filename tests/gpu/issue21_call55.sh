#!/bin/bash
# Eighteenth session (2026-12-07), issue 21 item 4: the m-tiles of one expert and n-slab in lockstep. Call 53
# found that kimi_k2_3layer's gate/up launch reads each weight byte once with one m-tile per expert (8 x 512
# tokens) and 1.42 times with three (8 x 2048): a sibling m-tile asks for a weight tile after it has left L2.
# E3_GEMM_LOCKSTEP=W makes a tile's loader wait while a started neighbouring m-tile of its n-slab is more than
# W k-tiles behind (same bits: only the timing of the loads changes). The build also carries E3_GEMM_BK32
# (call 54: slower) and the register-operand kernel's stages filling 226 KiB (INT4 9, FP8 7).
#   unit    the GPU's unit tests (lockstep's bits against the other walks)
#   cmp     main's build ($C/base) against the new one with E3_GEMM_LOCKSTEP 0, 2, 4, 8, 16, interleaved, ROUNDS
#           (2) rounds, deepseek_v2_lite_shape and kimi_k2_3layer; kimi's INT4 / FP8 experts: base, new, new with 8
#   ncu     kimi's gate/up launch, E3_GEMM_LOCKSTEP 0, 4, 16
#   golden  the golden cases with E3_GEMM_LOCKSTEP=4 (tests/gpu/lib.sh)
# Carry build-gpu/pack (tar of build-gpu/carry: new, base, e3_unit_tests, golden_check, lib, configs). CALL=NN names the log.
set -uo pipefail
STAGES=${*:-unit cmp ncu golden}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-55}.log
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
if wants cmp; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for c in kimi_k2_3layer deepseek_v2_lite_shape; do
      E3_BENCH_BIN=$C/base bench "${c}_base_r$round" "$C/configs/$c.json"
      for w in ${WINDOWS:-0 2 4 8 16}; do bench "${c}_lockstep${w}_r$round" "$C/configs/$c.json" E3_GEMM_LOCKSTEP=$w; done
    done
    for q in int4 fp8; do
      E3_BENCH_BIN=$C/base bench "kimi_${q}_base_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
      bench "kimi_${q}_new_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
      bench "kimi_${q}_lockstep8_r$round" /tmp/kimi_k2_3layer_$q.json E3_GEMM_LOCKSTEP=8 -- --expert-dequant gemm
    done
  done
fi
if wants ncu; then
  m='gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct'
  m+=',lts__t_sectors_srcunit_ltcfabric.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
  for w in ${NCU_WINDOWS:-0 4 16}; do
    E3_GEMM_LOCKSTEP=$w run_ncu "kimi_gate_up_lockstep$w" "$C/configs/kimi_k2_3layer.json" 2 --metrics "$m"
    grep -E "(gpu__time|dram__bytes|hit_rate|ltcfabric|hmma)" "$OUT/logs/ncu_kimi_gate_up_lockstep$w.log" | tee -a "$LOG"
  done
fi
if wants golden; then
  export E3_GEMM_LOCKSTEP=4
  golden_cases
  unset E3_GEMM_LOCKSTEP
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
