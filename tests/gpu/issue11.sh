#!/bin/bash
# On the GPU machine (the device tool), from the repository root, with build-gpu (this tree) and
# build-gpu-old (the tree before cuBLASLt's algorithm was pinned) carried, and the shared golden
# cases and bench files under .gpu/shared. Writes logs under $OUT.
#   1. CUDA kernel tests; 2. golden_cuda at TP 1 and 2 (dense bound, MoE per-token bound);
#   3. bench before/after the pinning; 4. real-shape checkpoints: the same bytes per sample for
#   two --max-tokens-per-step values (sample_digest listings compared).
set -uo pipefail
STAGE=${1:-all}
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
BIN=$PWD/build-gpu/bin/eagle3_extract
OLD=$PWD/build-gpu-old/bin/eagle3_extract
DIGEST=$PWD/build-gpu/tests/sample_digest
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export E3_BIN=$BIN E3_GOLDEN_CHECK=$PWD/build-gpu/tests/golden_check E3_MPIRUN="$MPIRUN"
export E3_GOLDEN_DIR=$PWD/tests/golden E3_SHARED_GOLDEN_DIR=$PWD/.gpu/shared/golden E3_WORK=/tmp/e2e_work
export E3_PYTHON=python3
date -u
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv

if [[ $STAGE == all || $STAGE == unit ]]; then
  build-gpu/tests/e3_unit_tests --gtest_filter='Cuda*' 2>&1 | tail -4 | tee "$OUT/unit.log"
fi

if [[ $STAGE == all || $STAGE == golden ]]; then
  dense="tiny_llama_default llama_linear_bias s_llama_yarn_params s_qwen2_yarn s_qwen3_kv1_bias s_mistral_swa s_qwen3_fp8_bf16scale"
  moe="s_dsv3_group s_dsv3_noqlora_yarn s_dsv2_greedy s_dsv2_grouped s_qwen3_moe_a s_qwen3_moe_b s_kimi_thinking_int4"
  for c in dev_llama3; do [ -d .gpu/shared/golden/$c ] && dense="$dense $c"; done
  for c in dev_kimi_k2 dev_kimi_k25_int4 dev_deepseek_v3_fp8; do [ -d .gpu/shared/golden/$c ] && moe="$moe $c"; done
  jobs=()
  for c in $dense; do for tp in 1 2; do jobs+=("$c $tp dense"); done; done
  for c in $moe; do for tp in 1 2; do jobs+=("$c $tp moe"); done; done
  printf '%s\n' "${jobs[@]}" | xargs -P 4 -L 1 bash -c \
    'if bash tests/e2e/golden_cuda.sh "$0" "$1" "$2" > /tmp/golden_$0_$1.log 2>&1; then echo "PASS $0 tp$1 $2: $(grep -h "^ok" /tmp/golden_$0_$1.log | tr "\n" " ")"; else echo "FAIL $0 tp$1 $2: $(grep -h "FAIL" /tmp/golden_$0_$1.log | head -2 | tr "\n" " ")"; fi' \
    | sort | tee "$OUT/golden.log"
  echo "golden: $(grep -c ^PASS "$OUT/golden.log") passed, $(grep -c ^FAIL "$OUT/golden.log") failed"
fi

if [[ $STAGE == all || $STAGE == bench ]]; then
  for cfg in llama3_8b kimi_k2_3layer; do
    for round in 1 2; do
      for which in old new; do
        b=$BIN; [ $which = old ] && b=$OLD
        r=$($b bench --config .gpu/shared/bench/configs/$cfg.json --batch 8 --seq 2048 --iters 5 --warmup 2 2>&1 | tee -a "$OUT/bench.log" | grep -oE '[0-9.]+k? tok/s|"tokens_per_s": *[0-9.]+' | tail -1)
        echo "bench $cfg round $round $which: $r" | tee -a "$OUT/bench_summary.log"
      done
    done
  done
fi

# real CFG SAMPLES LAYERS: a random-weight checkpoint of CFG's shape, two step budgets, digests compared.
real() {
  local cfg=$1 n=$2 layers=$3 dest=/dev/shm/ck_$1
  rm -rf "$dest"
  python3 .gpu/shared/bench/make_checkpoint.py "$cfg" "$dest" "$n" 2>&1 | tail -1
  for b in 16384 6000; do
    for which in new old; do
      [ $which = old ] && [ "${WITH_OLD:-0}" = 0 ] && continue
      bin=$BIN; [ $which = old ] && bin=$OLD
      local o=/tmp/real_$(basename "$cfg" .json)_${which}_$b
      rm -rf "$o"
      /usr/bin/time -f "%e s wall" $bin --model "$dest/ckpt" --data "$dest/data.jsonl" --out "$o" --max-seq-len 4096 \
        --max-tokens-per-step $b --layers "$layers" --samples-per-shard 16 2>&1 | grep -E "ready on|done:|wall|critical" | tee -a "$OUT/real.log"
      $DIGEST "$o" > "$o.digest"
      echo "$(basename "$cfg") $which budget $b: $(wc -l < "$o.digest") sample datasets" | tee -a "$OUT/real.log"
    done
  done
  local name; name=$(basename "$cfg" .json)
  for which in new old; do
    [ -f /tmp/real_${name}_${which}_16384.digest ] || continue
    if cmp -s /tmp/real_${name}_${which}_16384.digest /tmp/real_${name}_${which}_6000.digest; then
      echo "SAME BYTES $name ($which binary): budgets 16384 and 6000" | tee -a "$OUT/real.log"
    else
      echo "DIFFERENT $name ($which binary): $(diff /tmp/real_${name}_${which}_16384.digest /tmp/real_${name}_${which}_6000.digest | grep -c '^<') sample datasets differ" | tee -a "$OUT/real.log"
    fi
  done
  rm -rf "$dest" /tmp/real_${name}_*
}
if [[ $STAGE == all || $STAGE == real_llama ]]; then
  WITH_OLD=1 real .gpu/shared/bench/configs/llama3_8b.json 40 2,16,29
fi
if [[ $STAGE == all || $STAGE == real_kimi ]]; then
  # Two layers (one dense, one MoE with all 384 experts): every shape of the 3-layer config, in
  # a checkpoint that fits the machine's memory.
  python3 -c "import json; c=json.load(open('.gpu/shared/bench/configs/kimi_k2_3layer.json')); c['num_hidden_layers']=2; json.dump(c, open('/tmp/kimi_k2_2layer.json','w'))"
  real /tmp/kimi_k2_2layer.json 40 0,1
fi
date -u
