#!/bin/bash
# For the next GPU machine (written in the twentieth session, not run). Call 61 found the H100 at its ~700 W
# board power under every bench shape, its SM clock lowered to 1395-1485 MHz for kimi_k2_3layer's bf16 experts.
# Quantized experts read a quarter (INT4) or half (FP8) of the weight bytes, so they may draw less power per FLOP
# and keep a higher clock over a long run: item 4's "INT4 / FP8 in the GEMM at >= bf16 speed" was measured
# (0.87 / 0.84, call 53) over 5 steps only.
#   short   kimi_k2_3layer with bf16, INT4 and FP8 experts, 5 timed steps, ROUNDS (2) interleaved rounds
#   long    the same three over LONG_ITERS (60) steps each with nvidia-smi dmon beside them (power, clocks)
#   ncu     call 60's: deepseek_v2_lite_shape's gate/up (launch 2) and down (launch 3) expert GEMMs, ncu's
#           speed-of-light, memory, scheduler and warp-state sections, then per-instruction stall samples
# Main's build as $C/new. Carry build-gpu/pack (new, lib, configs). CALL=NN names the log.
set -uo pipefail
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-62}.log
STAGES=${*:-short long ncu}
. "$(dirname "$0")/lib.sh"
start_call
k=$C/configs/kimi_k2_3layer.json
python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
if wants short; then
  for round in $(seq 1 "${ROUNDS:-2}"); do
    bench "kimi_bf16_r$round" "$k"
    for q in int4 fp8; do bench "kimi_${q}_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm; done
  done
fi
if wants long; then
  export BENCH_ITERS=${LONG_ITERS:-60}
  power_bench kimi_bf16_long "$k"
  for q in int4 fp8; do power_bench "kimi_${q}_long" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm; done
  unset BENCH_ITERS
fi
if wants ncu; then
  d=$C/configs/deepseek_v2_lite_shape.json
  for launch in 2 3; do ncu_stalls "deepseek_launch$launch" "$d" "$launch"; done
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
