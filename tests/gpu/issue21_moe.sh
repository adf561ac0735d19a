#!/bin/bash
# Issue 21 item 4 on the GPU machine (device tool), from the repository root, with
# build-gpu/new/eagle3_extract, build-gpu/e3_unit_tests, build-gpu/lib-gpu and build-gpu/sharedbench
# (a copy of ../shared/bench) carried: the warp-specialised grouped GEMM (E3_GEMM_VARIANT=5, the
# default on Hopper) against the cp.async one (4), in the same call, with the HF peer. Logs under $OUT.
#   tests:   the CUDA kernel tests (both Hopper kernels against the CPU twin and each other)
#   bench:   compute-only tok/s and MFU of the two MoE shapes, variant 4 then 5, twice each
#   quant:   kimi_k2_3layer with INT4 and FP8 experts: --expert-dequant scratch and gemm, 4 and 5
#   profile: E3_PROFILE=1 for both MoE shapes and both variants (GPU time per op)
#   hf:      hf_baseline.py on the same two shapes
#   ncu:     Nsight Compute's throughput and stall sections for one launch of each expert GEMM
#            (deepseek_v2_lite_shape), where ncu is installed
set -uo pipefail
STAGES=${*:-tests bench quant profile hf}
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/issue21_moe.log
BIN=${BIN:-build-gpu/new/eagle3_extract}
CFG=build-gpu/sharedbench/configs
SHAPES=${SHAPES:-deepseek_v2_lite_shape kimi_k2_3layer}
VARIANTS=${VARIANTS:-4 5}
say() { echo "$*" | tee -a "$LOG"; }
fields() { grep -oE '"(tokens_per_s|mfu|matmul_ceiling_tflops|matmul_ceiling_after_tflops|step_ms|gpu_mem_gb)":[0-9.]+' "$1" | tr '\n' ' '; }
say "== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
if [[ " $STAGES " == *" tests "* ]]; then
  timeout 300 build-gpu/e3_unit_tests --gtest_filter='CudaKernel.*:CudaOptions.*' > "$OUT/tests.log" 2>&1
  say "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)|^\[  FAILED' "$OUT/tests.log" | tr '\n' ' ')"
  grep -E "Failure|Expected|Which is|FAILED|error" "$OUT/tests.log" | head -30 | tee -a "$LOG"
fi
bench() {  # NAME CONFIG [env...] -- [args...]
  local name=$1 config=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  env "${envs[@]}" timeout 240 $BIN bench --config "$config" --batch 8 --seq 2048 --iters 5 --warmup 2 "$@" \
    > "$OUT/bench_$name.log" 2>&1
  say "$(date -u +%T) $name rc $?: $(fields "$OUT/bench_$name.log")"
}
if [[ " $STAGES " == *" bench "* ]]; then
  for s in $SHAPES; do
    for round in 1 2; do
      for v in $VARIANTS; do bench "${s}_v${v}_r$round" "$CFG/$s.json" E3_GEMM_VARIANT=$v; done
    done
  done
fi
if [[ " $STAGES " == *" quant "* ]]; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$CFG" /tmp
  for q in int4 fp8; do
    bench "kimi_${q}_scratch_v5" /tmp/kimi_k2_3layer_$q.json E3_GEMM_VARIANT=5 -- --expert-dequant scratch
    for v in $VARIANTS; do bench "kimi_${q}_gemm_v$v" /tmp/kimi_k2_3layer_$q.json E3_GEMM_VARIANT=$v -- --expert-dequant gemm; done
  done
fi
if [[ " $STAGES " == *" profile "* ]]; then
  for s in $SHAPES; do
    for v in $VARIANTS; do
      bench "${s}_v${v}_profile" "$CFG/$s.json" E3_GEMM_VARIANT=$v E3_PROFILE=1
      grep -iE "moe_gemm|grouped|total" "$OUT/bench_${s}_v${v}_profile.log" | head -8 | sed 's/^/   /' | tee -a "$LOG"
    done
  done
fi
if [[ " $STAGES " == *" hf "* ]]; then
  for s in $SHAPES; do
    timeout 300 python3 build-gpu/sharedbench/hf_baseline.py "$CFG/$s.json" > "$OUT/hf_$s.log" 2>&1
    say "$(date -u +%T) HF $s rc $?: $(tail -1 "$OUT/hf_$s.log")"
  done
fi
if [[ " $STAGES " == *" ncu "* ]]; then
  if command -v ncu > /dev/null; then
    timeout 240 ncu --kernel-name regex:grouped_gemm_ws --launch-skip 54 --launch-count 2 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
      $BIN bench --config "$CFG/deepseek_v2_lite_shape.json" --batch 8 --seq 2048 --iters 1 --warmup 1 \
      > "$OUT/ncu.log" 2>&1
    say "ncu rc $?"; grep -E "Throughput|Busy|Stall|Cycles|Active|Issued|L2|DRAM|Eligible|Duration" "$OUT/ncu.log" | head -60 | tee -a "$LOG"
  else
    say "no ncu here"
  fi
fi
# Only 8 files come back from a call: the logs in one archive beside the summary.
tar -czf /tmp/issue21_moe_logs.tgz -C "$OUT" --exclude issue21_moe.log . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name issue21_moe.log -exec rm -rf {} + && mv /tmp/issue21_moe_logs.tgz "$OUT/"
