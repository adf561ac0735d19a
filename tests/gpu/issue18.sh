#!/bin/bash
# Issue 18 (the refactoring) on the GPU machine (device tool), from the repository root, with
# build/{bin,lib-gpu} (this tree), build-old/bin (the tree before issue 18, aabf11e),
# build/tests/{e3_unit_tests,golden_check,sample_digest} and .gpu/shared/{bench,golden} carried.
# Logs under $OUT.
#   unit:   the CUDA kernel tests and the storage codecs
#   golden: the CUDA backend in bf16 against HF's references, every repository case at TP 1, the
#           shared dev cases at TP 1 and 2
#   bytes:  a random-weight llama3_8b-shape and a 2-layer Kimi-K2-shape checkpoint, bf16 and fp8:
#           the new binary writes the same stored bits as the old one (sample_digest listings),
#           at two step budgets
#   bench:  compute tok/s of both binaries, side by side with HF transformers
set -uo pipefail
STAGES=${*:-unit golden bytes bench}
export LD_LIBRARY_PATH=$PWD/build/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/issue18.log
BIN=$PWD/build/bin/eagle3_extract
OLD=$PWD/build-old/bin/eagle3_extract
DIGEST=$PWD/build/tests/sample_digest
export E3_BIN=$BIN E3_GOLDEN_CHECK=$PWD/build/tests/golden_check
export E3_MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export E3_GOLDEN_DIR=$PWD/tests/golden E3_SHARED_GOLDEN_DIR=$PWD/.gpu/shared/golden E3_WORK=/tmp/e2e_work
export E3_PYTHON=python3
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader)"

if [[ " $STAGES " == *" unit "* ]]; then
  build/tests/e3_unit_tests --gtest_filter='Cuda*:StorageCodec*' > "$OUT/unit.log" 2>&1
  say "unit: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/unit.log" | tr '\n' ' ')"
fi

if [[ " $STAGES " == *" golden "* ]]; then
  jobs=()
  for c in tiny_llama_default llama_linear_bias s_llama_yarn_params s_qwen2_yarn s_qwen3_kv1_bias s_mistral_swa s_qwen3_fp8_bf16scale; do
    jobs+=("$c 1 dense"); done
  for c in s_dsv3_group s_dsv3_noqlora_yarn s_dsv2_greedy s_dsv2_grouped s_qwen3_moe_a s_qwen3_moe_b s_kimi_thinking_int4 s_glm45_noqk_r25 s_glm45_air_r75; do
    jobs+=("$c 1 moe"); done
  for c in dev_llama3; do [ -d .gpu/shared/golden/$c ] && jobs+=("$c 1 dense" "$c 2 dense"); done
  for c in dev_kimi_k2 dev_kimi_k25_int4 dev_deepseek_v3_fp8 dev_glm45; do [ -d .gpu/shared/golden/$c ] && jobs+=("$c 1 moe" "$c 2 moe"); done
  printf '%s\n' "${jobs[@]}" | xargs -P 4 -L 1 bash -c \
    'if bash tests/e2e/golden_cuda.sh "$0" "$1" "$2" > /tmp/golden_$0_$1.log 2>&1; then echo "PASS $0 tp$1 $2: $(grep -h "^ok" /tmp/golden_$0_$1.log | tr "\n" " ")"; else echo "FAIL $0 tp$1 $2: $(grep -h "FAIL\|critical" /tmp/golden_$0_$1.log | head -3 | tr "\n" " ")"; fi' \
    | sort > "$OUT/golden.log"
  say "golden: $(grep -c ^PASS "$OUT/golden.log") passed, $(grep -c ^FAIL "$OUT/golden.log") failed"
  grep ^FAIL "$OUT/golden.log" | tee -a "$LOG"
fi

# bytes CFG SAMPLES LAYERS: one checkpoint, both binaries, bf16 and fp8, budgets 16384 and 6000.
bytes() {
  local cfg=$1 n=$2 layers=$3 name dest
  name=$(basename "$cfg" .json); dest=/dev/shm/ck_$name
  rm -rf "$dest"
  python3 .gpu/shared/bench/make_checkpoint.py "$cfg" "$dest" "$n" > /dev/null 2>&1 || { say "make_checkpoint $name failed"; return; }
  for dtype in bf16 fp8; do
    for run in "new 16384" "old 16384" "new 6000"; do
      set -- $run
      local bin=$BIN; [ "$1" = old ] && bin=$OLD
      local o=/dev/shm/out_${name}_${dtype}_$1_$2
      rm -rf "$o"
      $bin --model "$dest/ckpt" --data "$dest/data.jsonl" --out "$o" --max-seq-len 4096 --dtype $dtype \
        --max-tokens-per-step $2 --layers "$layers" --samples-per-shard 16 > "$o.log" 2>&1
      say "$name $dtype $1 budget $2: rc $? $(grep -oE 'done: .*' "$o.log" | head -1 | cut -c1-120)"
      $DIGEST "$o" > "/tmp/${name}_${dtype}_$1_$2.digest"
      rm -rf "$o"
    done
    for other in old_16384 new_6000; do
      if [ -s "/tmp/${name}_${dtype}_new_16384.digest" ] && cmp -s "/tmp/${name}_${dtype}_new_16384.digest" "/tmp/${name}_${dtype}_${other}.digest"; then
        say "SAME BYTES $name $dtype: new 16384 = $other ($(wc -l < /tmp/${name}_${dtype}_new_16384.digest) sample datasets)"
      else
        say "DIFFERENT $name $dtype: new 16384 vs $other"
      fi
    done
  done
  rm -rf "$dest"
}
if [[ " $STAGES " == *" bytes "* ]]; then
  bytes .gpu/shared/bench/configs/llama3_8b.json 40 2,16,29
  python3 -c "import json; c=json.load(open('.gpu/shared/bench/configs/kimi_k2_3layer.json')); c['num_hidden_layers']=2; json.dump(c, open('/tmp/kimi_k2_2layer.json','w'))"
  bytes /tmp/kimi_k2_2layer.json 40 0,1
fi

if [[ " $STAGES " == *" bench "* ]]; then
  for cfg in llama3_8b kimi_k2_3layer; do
    for which in new old new old; do
      b=$BIN; [ $which = old ] && b=$OLD
      $b bench --config .gpu/shared/bench/configs/$cfg.json --batch 8 --seq 2048 --iters 5 --warmup 2 > "$OUT/bench_${cfg}_$which.log" 2>&1
      say "bench $cfg $which: $(grep -oE '"tokens_per_s":[0-9.]+' "$OUT/bench_${cfg}_$which.log" | tail -1)"
    done
    python3 .gpu/shared/bench/hf_baseline.py .gpu/shared/bench/configs/$cfg.json > "$OUT/hf_$cfg.log" 2>&1
    say "HF $cfg: $(tail -2 "$OUT/hf_$cfg.log" | tr '\n' ' ')"
  done
fi
say "== done $(date -u)"
