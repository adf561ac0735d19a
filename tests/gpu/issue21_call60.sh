#!/bin/bash
# Nineteenth session (2026-12-07): where deepseek_v2_lite_shape's expert GEMMs (variant 9, bf16 experts) spend
# their warps' time. ncu's per-instruction stall samples (SASS) and its speed-of-light, memory and scheduler
# sections for one gate/up launch (skip 2) and one down launch (skip 3) of one bench step (8 x 2048 tokens).
# Then the clocks and the board's power while long benches run (nvidia-smi dmon, one line a second): whether the
# GPU lowers its clock under the MoE shapes (the matmul ceiling timed after main's runs reads 660-720 TFLOP/s against
# 785 before, call 59) and under the dense one.
# Carry build-gpu/pack (new, lib, configs). CALL=NN names the log.
set -uo pipefail
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-60}.log
. "$(dirname "$0")/lib.sh"
start_call
d=$C/configs/deepseek_v2_lite_shape.json
for launch in 2 3; do ncu_stalls "deepseek_launch$launch" "$d" "$launch"; done
[ -n "${NO_POWER:-}" ] || for c in kimi_k2_3layer deepseek_v2_lite_shape llama3_8b; do power_bench "${c}_long" "$C/configs/$c.json"; done
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
