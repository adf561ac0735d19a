#!/bin/bash
# Twelfth session (2026-12-06), issue 21 item 4, call 40: where the bf16 expert GEMM (variant 8, the
# bf16 default) loses against the dense ceiling, before changing it. CALL=NN names the log.
#   bench   the three bench configs, bf16, as main is (two rounds)
#   unit, golden  the GPU's unit tests and the golden cases (tests/gpu/lib.sh)
#   golden10 the golden cases with E3_GEMM_VARIANT=10
#   cmp     variants 8 and 10 interleaved, deepseek_v2_lite_shape and kimi_k2_3layer, two rounds
#   ncu     one gate/up and one down launch of deepseek_v2_lite_shape and of kimi_k2_3layer for each
#           of NCU_VARIANTS (default 8): speed of light, memory and compute sections, tensor-pipe activity and
#           the warps' stall reasons (--clock-control none: the clocks are left alone)
#   l2      what fills L2's throughput in kimi_k2_3layer's expert GEMMs (below)
#   sass    per-instruction stall samples (SASS) of one deepseek_v2_lite_shape gate/up launch
# Carry build-gpu/pack, as for issue21_call35.sh. Calls 40 and 41 ran it at commit 29094fe, which has
# E3_GEMM_VARIANT=10 (the stages golden10 and cmp, NCU_VARIANTS="10 8"); the next commit removed variant 10
# (docs/PERFORMANCE.md, twelfth session).
set -uo pipefail
STAGES=${*:-bench ncu sass}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-40}.log
. "$(dirname "$0")/lib.sh"
start_call
wants unit && unit_tests
wants golden && golden_cases
if wants golden10; then
  E3_GEMM_VARIANT=10 golden_cases
  cp "$OUT/logs/golden.log" "$OUT/logs/golden_v10.log"
fi
# cmp: the default (variant 8 for bf16 experts) against variant 10, interleaved, two rounds.
if wants cmp; then
  for round in 1 2; do
    for c in deepseek_v2_lite_shape kimi_k2_3layer; do
      bench "${c}_v8_r$round" "$C/configs/$c.json" E3_GEMM_VARIANT=8
      bench "${c}_v10_r$round" "$C/configs/$c.json" E3_GEMM_VARIANT=10
    done
  done
fi
if wants bench; then
  for round in 1 2; do
    for c in deepseek_v2_lite_shape kimi_k2_3layer llama3_8b; do
      bench "${c}_r$round" "$C/configs/$c.json" ${E3_ENV:-E3_NONE=}
    done
  done
fi
if wants ncu; then
  metrics='gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
  metrics+=',dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct'
  metrics+=',lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_active'
  metrics+=',sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active'
  metrics+=',regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
  metrics+=',launch__grid_size,launch__cluster_dim_x,launch__occupancy_cluster_pct'
  # NCU_VARIANTS: the E3_GEMM_VARIANTs to profile, each in turn (8: the bf16 default before call 40)
  for v in ${NCU_VARIANTS:-8}; do
  for spec in "dsv2_gateup $C/configs/deepseek_v2_lite_shape.json 4" "dsv2_down $C/configs/deepseek_v2_lite_shape.json 5" \
              "kimi_gateup $C/configs/kimi_k2_3layer.json 2" "kimi_down $C/configs/kimi_k2_3layer.json 3"; do
    set -- $spec
    say "-- variant $v $1"
    E3_GEMM_VARIANT=$v run_ncu "$1_v$v" "$2" "$3" --metrics "$metrics"
    grep -E "duration|hmma|dram__|lts__|l1tex__|sm__throughput|issue_active|launch__" "$OUT/logs/ncu_$1_v$v.log" | tee -a "$LOG"
    grep -E "stalled" "$OUT/logs/ncu_$1_v$v.log" | sort -k3 -g -r | head -8 | tee -a "$LOG"
  done
  done
fi
# l2: what fills L2's throughput (call 42): kimi_k2_3layer's gate/up launch for each of NCU_VARIANTS,
# and its down launch with variant 8, each three times: lts__throughput's breakdown, L2 sectors and
# requests by operation and source, the speed-of-light and memory tables.
if wants l2; then
  l2_metrics='lts__t_sectors.sum,lts__t_requests.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum'
  l2_metrics+=',lts__t_sectors_op_atom.sum,lts__t_sectors_srcunit_tex.sum,lts__t_requests_srcunit_tex.sum'
  l2_metrics+=',lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,gpu__time_duration.sum'
  specs=()
  for v in ${NCU_VARIANTS:-8}; do specs+=("kimi_gateup 2 $v"); done
  specs+=("kimi_down 3 8")
  for spec in "${specs[@]}"; do
    set -- $spec
    say "-- l2 variant $3 $1"
    E3_GEMM_VARIANT=$3 run_ncu "l2b_$1_v$3" "$C/configs/kimi_k2_3layer.json" "$2" \
      --metrics breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed
    grep -E "^ +[a-z]" "$OUT/logs/ncu_l2b_$1_v$3.log" | sort -k3 -g -r | head -12 | tee -a "$LOG"
    E3_GEMM_VARIANT=$3 run_ncu "l2m_$1_v$3" "$C/configs/kimi_k2_3layer.json" "$2" --metrics "$l2_metrics"
    grep -E "^ +(lts|gpu)__" "$OUT/logs/ncu_l2m_$1_v$3.log" | tee -a "$LOG"
    E3_GEMM_VARIANT=$3 run_ncu "l2s_$1_v$3" "$C/configs/kimi_k2_3layer.json" "$2" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --print-details all
  done
fi
if wants sass; then
  run_ncu sass_dsv2 "$C/configs/deepseek_v2_lite_shape.json" 4 --section SourceCounters --section WarpStateStats \
    --page source --csv --print-source sass
  mv "$OUT/logs/ncu_sass_dsv2.log" "$OUT/sass_dsv2.csv"
  say "sass $(wc -l < "$OUT/sass_dsv2.csv") lines"
  gzip -f "$OUT/sass_dsv2.csv"
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
