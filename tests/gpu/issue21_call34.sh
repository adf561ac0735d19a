#!/bin/bash
# Tenth session (2026-12-06), issue 21 item 4: where a warp of the quantized warp-specialised GEMM
# waits. ncu's stall reasons and its per-instruction stall samples (SASS) for one INT4 gate/up
# launch of kimi_k2_3layer (ncu --clock-control none: the clocks are left alone).
# Carry build-gpu/pack, as for issue21_call33.sh.
set -uo pipefail
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
run_ncu() {
  timeout 240 ncu --clock-control none --kernel-name regex:grouped_gemm_ws --launch-skip 4 --launch-count 1 "$@" \
    "$C/new" bench --config /tmp/kimi_k2_3layer_int4.json --batch 8 --seq 2048 --iters 1 --warmup 1
}
run_ncu --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' > "$OUT/stalls_int4.log" 2>&1
echo "stalls rc $?"; grep -E "stalled" "$OUT/stalls_int4.log" | sort -k3 -g -r | head -14
run_ncu --section SourceCounters --section WarpStateStats --page source --csv --print-source sass > "$OUT/sass_int4.csv" 2>&1
echo "sass rc $? $(wc -l < "$OUT/sass_int4.csv") lines"
gzip -f "$OUT/sass_int4.csv"
