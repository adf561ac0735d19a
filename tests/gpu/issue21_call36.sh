#!/bin/bash
# Eleventh session (2026-12-06), issue 21 item 4, calls 36 and 37: variant 9 with the scales loaded
# two k-steps ahead (36), then also kept one load per register until used and found by shifts
# rather than divisions (37), and where its warps wait. CALL=37 names the log.
#   unit    the CUDA kernel tests (variant 9's bits against the other kernels' and the dequantize path's)
#   golden  every repository case at TP 1 (the INT4 and FP8 ones through variant 9, the default)
#   quant   kimi_k2_3layer with INT4 and FP8 experts: --expert-dequant gemm with 9 and with 8, two
#           rounds, and scratch
#   sass    ncu stall reasons and per-instruction stall samples (SASS) of one INT4 gate/up launch
#           of variant 9 (--clock-control none: the clocks are left alone)
# Carry build-gpu/pack, as for issue21_call35.sh.
set -uo pipefail
STAGES=${*:-unit golden quant sass}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-36}.log
. "$(dirname "$0")/lib.sh"
start_call
python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
wants unit && unit_tests
wants golden && golden_cases
if wants quant; then
  for round in 1 2; do
    for q in int4 fp8; do
      bench "kimi_${q}_gemm9_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
      bench "kimi_${q}_gemm8_r$round" /tmp/kimi_k2_3layer_$q.json E3_GEMM_VARIANT=8 -- --expert-dequant gemm
    done
  done
  for q in int4 fp8; do bench "kimi_${q}_scratch" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant scratch; done
  bench kimi_bf16 "$C/configs/kimi_k2_3layer.json"
fi
if wants sass; then
  run_ncu() {
    timeout 240 ncu --clock-control none --kernel-name regex:grouped_gemm_ws --launch-skip 4 --launch-count 1 "$@" \
      "$C/new" bench --config /tmp/kimi_k2_3layer_int4.json --batch 8 --seq 2048 --iters 1 --warmup 1
  }
  run_ncu --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' > "$OUT/logs/stalls_int4.log" 2>&1
  say "stalls rc $?:"; grep -E "stalled" "$OUT/logs/stalls_int4.log" | sort -k3 -g -r | head -12 | tee -a "$LOG"
  run_ncu --section SourceCounters --section WarpStateStats --page source --csv --print-source sass > "$OUT/sass_int4.csv" 2>&1
  say "sass rc $? $(wc -l < "$OUT/sass_int4.csv") lines"
  gzip -f "$OUT/sass_int4.csv"
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
