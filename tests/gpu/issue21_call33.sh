#!/bin/bash
# Tenth session (2026-12-05), issue 21 item 4, after making the counted n-tile-major walk
# (E3_GEMM_VARIANT=8) the default on Hopper:
#   unit    the CUDA kernel tests (every variant's bits against the cp.async kernel's)
#   golden  the CUDA backend in bf16 against HF's references, every repository case at TP 1,
#           with the new default
#   bench   compute-only tok/s and MFU: the three shapes at the default, kimi_k2_3layer and
#           deepseek_v2_lite_shape at 5 as well, two rounds
#   quant   kimi_k2_3layer with INT4 and FP8 experts: --expert-dequant gemm against scratch
#   qncu    why quantized experts run below bf16 ones: ncu's speed-of-light, warp-state and
#           shared-memory figures for one INT4 and one FP8 gate/up launch of kimi_k2_3layer, and
#           one bf16 one (ncu --clock-control none: the clocks are left alone)
#   hf      hf_baseline.py on the three shapes
# Carry build-gpu/pack (carry.tar.xz of carry/{new,e3_unit_tests,golden_check,lib,configs,hf_baseline.py}).
set -uo pipefail
STAGES=${*:-unit golden bench quant qncu hf}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call33.log
. "$(dirname "$0")/lib.sh"
start_call
# kimi_k2_3layer with INT4 (compressed-tensors, groups of 32) and FP8 (128 x 128 blocks) experts
python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
wants unit && unit_tests
wants golden && golden_cases
if wants bench; then
  for round in 1 2; do
    bench "llama3_8b_r$round" "$C/configs/llama3_8b.json"
    for s in kimi_k2_3layer deepseek_v2_lite_shape; do
      bench "${s}_default_r$round" "$C/configs/$s.json"
      bench "${s}_v5_r$round" "$C/configs/$s.json" E3_GEMM_VARIANT=5
    done
  done
fi
if wants quant; then
  for q in int4 fp8; do
    for m in gemm scratch; do bench "kimi_${q}_$m" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant $m; done
  done
fi
if wants qncu; then
  if command -v ncu > /dev/null; then
    for q in bf16 int4 fp8; do
      cfg=/tmp/kimi_k2_3layer_$q.json; [ $q = bf16 ] && cfg=$C/configs/kimi_k2_3layer.json
      # skip the first step's four expert GEMMs (2 MoE layers x gate/up, down), then one gate/up
      timeout 240 ncu --clock-control none --kernel-name regex:grouped_gemm_ws --launch-skip 4 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum \
        "$C/new" bench --config "$cfg" --batch 8 --seq 2048 --iters 1 --warmup 1 > "$OUT/logs/qncu_$q.log" 2>&1
      say "qncu $q rc $?:"
      grep -E "Duration|Throughput|Stall|stall|Pipe|Busy|bank|wavefronts|inst_executed|Warp Cycles|Issued" "$OUT/logs/qncu_$q.log" \
        | sed 's/^ */   /' | cut -c1-160 | head -60 | tee -a "$LOG"
    done
  else
    say "no ncu here"
  fi
fi
if wants hf; then
  for s in ${HF_SHAPES:-llama3_8b deepseek_v2_lite_shape kimi_k2_3layer}; do
    timeout 300 python3 "$C/hf_baseline.py" "$C/configs/$s.json" > "$OUT/logs/hf_$s.log" 2>&1
    say "$(date -u +%T) HF $s rc $?: $(tail -1 "$OUT/logs/hf_$s.log" | cut -c1-400)"
  done
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
