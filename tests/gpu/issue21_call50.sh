#!/bin/bash
# Sixteenth session (2026-12-07), issue 21 item 4: whether E3_L2_SIDES=1 (the counted walk from both
# ends of the counter, one end per half of L2) should be the default now that a bf16 expert's last
# m-tile runs narrow. Calls 48 and 49 each timed one kimi_k2_3layer run 0.7-1.1% above the default;
# this interleaves the two, ROUNDS rounds, on both MoE shapes and the quantized experts. CALL=NN names the log.
# Carry build-gpu/pack (tar of build-gpu/carry: new, lib, configs).
set -uo pipefail
STAGES=${*:-cmp}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-50}.log
. "$(dirname "$0")/lib.sh"
start_call
if wants cmp; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for c in deepseek_v2_lite_shape kimi_k2_3layer; do
      for sides in 0 1; do bench "${c}_sides${sides}_r$round" "$C/configs/$c.json" E3_L2_SIDES=$sides; done
    done
    for q in int4 fp8; do
      for sides in 0 1; do
        bench "kimi_${q}_sides${sides}_r$round" /tmp/kimi_k2_3layer_$q.json E3_L2_SIDES=$sides -- --expert-dequant gemm
      done
    done
  done
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
