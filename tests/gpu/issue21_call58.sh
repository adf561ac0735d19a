#!/bin/bash
# For the next GPU machine (written in the eighteenth session, not run): the capture's fp32 -> bf16 copy four
# values a thread (docs/pending/issue21-capture-x4.mbox, built as `new`; main's build as `base`). The kernel
# tests (ElementwiseOps compares it with the host's rounding), then base against new on the three bench configs,
# kimi_k2_3layer's profile (the `copy` line: 11.7 ms over 5 steps in call 53), and the golden cases.
#   unit  cmp  profile  golden
# Carry build-gpu/pack (new, base, e3_unit_tests, golden_check, lib, configs). CALL=NN names the log.
set -uo pipefail
STAGES=${*:-unit cmp profile golden}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-58}.log
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
if wants cmp; then
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for c in kimi_k2_3layer deepseek_v2_lite_shape llama3_8b; do
      E3_BENCH_BIN=$C/base bench "${c}_base_r$round" "$C/configs/$c.json"
      bench "${c}_new_r$round" "$C/configs/$c.json"
    done
  done
fi
if wants profile; then
  for b in base new; do
    E3_BENCH_BIN=$C/$b bench "kimi_profile_$b" "$C/configs/kimi_k2_3layer.json" E3_PROFILE=1
    grep -E "^(copy|moe_gemm|add_rmsnorm) " "$OUT/logs/bench_kimi_profile_$b.log" | sed "s/^/$b /" | tee -a "$LOG"
  done
fi
wants golden && golden_cases
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
