#!/bin/bash
# Eleventh session (2026-12-06), issue 21 item 4: quantized experts as wgmma's register operand
# (E3_GEMM_VARIANT=9, the new default on Hopper; bf16 experts run as with 8).
#   unit    the CUDA kernel tests (variant 9's bits against the cp.async kernel's and against the
#           dequantize kernel's path)
#   golden  the CUDA backend in bf16 against HF's references, every repository case at TP 1
#   bench   compute-only tok/s and MFU of the three shapes at the default, two rounds
#   quant   kimi_k2_3layer with INT4 and FP8 experts: --expert-dequant gemm with 9 and with 8,
#           and scratch, two rounds
#   profile E3_PROFILE=1 on kimi_k2_3layer with bf16 and INT4 experts: where a step's time goes
#   qncu    ncu on one INT4 and one FP8 gate/up launch of variant 9 (--clock-control none)
#   hf      hf_baseline.py (HF_SHAPES, default llama3_8b and deepseek_v2_lite_shape: HF's
#           kimi_k2_3layer does not fit 80 GB)
# Carry build-gpu/pack (carry.tar.xz of carry/{new,e3_unit_tests,golden_check,lib,configs,hf_baseline.py}).
set -uo pipefail
STAGES=${*:-unit golden bench quant profile qncu hf}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call35.log
. "$(dirname "$0")/lib.sh"
start_call
python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
wants unit && unit_tests
if wants golden; then
  golden_cases
  grep "s_kimi_thinking_int4" "$OUT/logs/golden.log" | cut -c1-300 | tee -a "$LOG"
fi
if wants bench; then
  for round in 1 2; do
    for s in llama3_8b deepseek_v2_lite_shape kimi_k2_3layer; do bench "${s}_r$round" "$C/configs/$s.json"; done
  done
fi
if wants quant; then
  for round in 1 2; do
    for q in int4 fp8; do
      bench "kimi_${q}_gemm9_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
      bench "kimi_${q}_gemm8_r$round" /tmp/kimi_k2_3layer_$q.json E3_GEMM_VARIANT=8 -- --expert-dequant gemm
      bench "kimi_${q}_scratch_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant scratch
    done
  done
fi
if wants profile; then
  for q in bf16 int4; do
    cfg=/tmp/kimi_k2_3layer_$q.json; [ $q = bf16 ] && cfg=$C/configs/kimi_k2_3layer.json
    bench "profile_kimi_$q" "$cfg" E3_PROFILE=1
    sed -n '/^GPU time by op/,/^{/p' "$OUT/logs/bench_profile_kimi_$q.log" | head -40 | cut -c1-200 | tee -a "$LOG"
  done
fi
if wants qncu; then
  if command -v ncu > /dev/null; then
    for q in int4 fp8; do
      timeout 240 ncu --clock-control none --kernel-name regex:grouped_gemm_ws --launch-skip 4 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
        --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__inst_executed.sum \
        "$C/new" bench --config /tmp/kimi_k2_3layer_$q.json --batch 8 --seq 2048 --iters 1 --warmup 1 > "$OUT/logs/qncu_$q.log" 2>&1
      say "qncu $q rc $?:"
      grep -E "Duration|Throughput|Stall|Pipe|Busy|bank|inst_executed|Warp Cycles|Issued" "$OUT/logs/qncu_$q.log" \
        | sed 's/^ */   /' | cut -c1-160 | head -30 | tee -a "$LOG"
    done
  else
    say "no ncu here"
  fi
fi
if wants hf; then
  for s in ${HF_SHAPES:-llama3_8b deepseek_v2_lite_shape}; do
    timeout 300 python3 "$C/hf_baseline.py" "$C/configs/$s.json" > "$OUT/logs/hf_$s.log" 2>&1
    say "$(date -u +%T) HF $s rc $?: $(tail -1 "$OUT/logs/hf_$s.log" | cut -c1-400)"
  done
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
