#!/bin/bash
# Issue 14 on the GPU machine (device tool), from the repository root, with build-gpu/{bin,lib-gpu},
# build-gpu/tests/golden_check and .gpu/shared/{bench,golden/dev_glm45} carried. Logs under $OUT.
#   golden: the CUDA backend in bf16 against HF's fp32 references: dev_glm45 (MoE bound) at TP 1,
#           2, 4, and the repository's cases of every family at TP 1 (the registry refactor)
#   bench:  the GLM-4.5-Air-shaped 4-layer config beside hf_baseline.py, and llama3_8b /
#           kimi_k2_3layer as a check that the loop and knob changes cost nothing
set -uo pipefail
STAGES=${*:-golden bench}
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/issue14.log
BIN=$PWD/build-gpu/bin/eagle3_extract
export E3_BIN=$BIN E3_GOLDEN_CHECK=$PWD/build-gpu/tests/golden_check
export E3_MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export E3_GOLDEN_DIR=$PWD/tests/golden E3_SHARED_GOLDEN_DIR=$PWD/.gpu/shared/golden E3_WORK=/tmp/e2e_work
export E3_PYTHON=python3
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
if [[ " $STAGES " == *" golden "* ]]; then
  jobs=("dev_glm45 1 moe" "dev_glm45 2 moe" "dev_glm45 4 moe")
  for c in tiny_llama_default llama_linear_bias s_qwen2_yarn s_qwen3_kv1_bias s_mistral_swa; do jobs+=("$c 1 dense"); done
  for c in s_dsv3_group s_dsv2_greedy s_qwen3_moe_a s_kimi_thinking_int4; do jobs+=("$c 1 moe"); done
  printf '%s\n' "${jobs[@]}" | xargs -P 4 -L 1 bash -c \
    'if bash tests/e2e/golden_cuda.sh "$0" "$1" "$2" > /tmp/golden_$0_$1.log 2>&1; then echo "PASS $0 tp$1 $2: $(grep -h "^ok" /tmp/golden_$0_$1.log | tr "\n" " ")"; else echo "FAIL $0 tp$1 $2: $(grep -h "FAIL\|critical" /tmp/golden_$0_$1.log | head -3 | tr "\n" " ")"; fi' \
    | sort | tee -a "$LOG"
fi
if [[ " $STAGES " == *" bench "* ]]; then
  for cfg in tests/data/bench/glm45_air_4layer.json .gpu/shared/bench/configs/llama3_8b.json .gpu/shared/bench/configs/kimi_k2_3layer.json; do
    $BIN bench --config $cfg --batch 8 --seq 2048 --iters 5 --warmup 2 > $OUT/bench_$(basename $cfg .json).log 2>&1
    say "ours $(basename $cfg): $(grep -E 'tok/s' $OUT/bench_$(basename $cfg .json).log | tail -1)"
  done
  python3 .gpu/shared/bench/hf_baseline.py tests/data/bench/glm45_air_4layer.json > $OUT/hf_glm.log 2>&1
  say "HF glm45_air_4layer: $(tail -2 $OUT/hf_glm.log | tr '\n' ' ')"
fi
say "== done $(date -u)"
