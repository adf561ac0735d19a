#!/bin/bash
# Written in the twenty-first session (2026-12-08), not yet run: no GPU machine could be started after call 62,
# nor in the twenty-second (which added the third commit of the mbox and `new4`).
# `new` is main with the three commits of docs/pending/issue21-frag-ring3-store16.mbox (`git am` them), `base` main's
# build. First: the quantized experts' register-operand kernel (variant 9) for INT4 with its wgmmas in groups of one
# 64-row block and half k-step, from a ring of three fragment sets (FP8 keeps main's two). Call 62 had INT4 / FP8
# experts at 0.86 / 0.84 of bf16 over 5 steps and 0.90 / 0.86 over 60, the INT4 run at a higher SM clock than
# bf16 (1530-1815 against 1425-1470 MHz) and still slower: not power, the kernel. With two sets, only group h of a
# warpgroup ran while group h + 1's fragments were built; with three, groups h - 1 and h run during that build.
# Second: the Hopper epilogues (kernels/gemm_epilogue.cuh, unfused: the down GEMM and variant 9's tiles) store 16
# bytes a thread after a shuffle transpose (store_tile: 4 x 4 words over a quad; store_transposed: 8 x 8 bf16 over
# the 8 lanes of one lane % 4), where call 62's ncu found deepseek's down launch waiting to issue its 4-byte stores
# (stall_lg 13%). The new build keeps the 4-byte stores under E3_GEMM_STORES=4 (`new4` below), so that one call
# tells the fragment ring's share from the stores' share. The transposes' lane arithmetic already ran on the CPU
# (tests/test_gemm_epilogue.cu, every element of C against wgmma's layouts); the GPU's bit test is
# CudaKernel.TheEpiloguesSixteenByteStoresGiveTheFourByteStoresBits.
#   unit     every GPU unit test of the new build (variant 9's bit tests against the cp.async kernel among them)
#   cmp      base, new and new4, kimi_k2_3layer with bf16, INT4 and FP8 experts and deepseek_v2_lite_shape,
#            ROUNDS (2) rounds
#   golden   the golden cases with the new build
#   ncu      kimi's INT4 gate/up and down launches, and deepseek's and kimi's bf16 down launches, base and new:
#            time, tensor pipes, issue slots; then the new build's stall samples of deepseek's down launch (stall_lg)
# Carry build-gpu/pack (new, base, e3_unit_tests and golden_check of new, lib, configs; packed by the recipe in
# docs/PERFORMANCE.md's fourteenth-session section). CALL=NN names the log.
# Run: tar -xJf build-gpu/pack/carry.tar.xz -C build-gpu && ROUNDS=2 CALL=63 OUT=$OUT bash tests/gpu/issue21_call63.sh
set -uo pipefail
. "$(dirname "$0")/lib.sh"
begin_call 63 "unit cmp golden ncu" "$@"
wants unit && unit_tests
k=$C/configs/kimi_k2_3layer.json d=$C/configs/deepseek_v2_lite_shape.json
python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
if wants cmp; then
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for b in base new; do E3_BENCH_BIN=$C/$b bench "deepseek_${b}_r$round" "$d"; done
    bench "deepseek_new4_r$round" "$d" E3_GEMM_STORES=4
    for b in base new; do E3_BENCH_BIN=$C/$b bench "kimi_bf16_${b}_r$round" "$k"; done
    bench "kimi_bf16_new4_r$round" "$k" E3_GEMM_STORES=4
    for q in int4 fp8; do
      E3_BENCH_BIN=$C/base bench "kimi_${q}_base_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
      bench "kimi_${q}_new_r$round" /tmp/kimi_k2_3layer_$q.json -- --expert-dequant gemm
      bench "kimi_${q}_new4_r$round" /tmp/kimi_k2_3layer_$q.json E3_GEMM_STORES=4 -- --expert-dequant gemm
    done
  done
fi
wants golden && golden_cases
m='gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
m+=',sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active'
if wants ncu; then
  for b in base new; do
    for l in gateup:2 down:3; do
      E3_BENCH_BIN=$C/$b run_ncu "kimi_int4_${l%:*}_$b" /tmp/kimi_k2_3layer_int4.json "${l#*:}" --metrics "$m"
      grep -E "(gpu__time|hmma|per_second|issue_active)" "$OUT/logs/ncu_kimi_int4_${l%:*}_$b.log" | tee -a "$LOG"
    done
    for c in deepseek kimi; do
      cfg=$d; [ $c = kimi ] && cfg=$k
      E3_BENCH_BIN=$C/$b run_ncu "${c}_down_$b" "$cfg" 3 --metrics "$m"
      grep -E "(gpu__time|hmma|per_second|issue_active)" "$OUT/logs/ncu_${c}_down_$b.log" | tee -a "$LOG"
    done
  done
  ncu_stalls deepseek_down_new "$d" 3
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
