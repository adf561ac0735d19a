# Bad JSONL: one clear FILE:LINE line, exit code 3, nothing written.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir bad_input)
good='{"id": "a", "input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}'
check() {  # check NAME EXPECTED_PATTERN JSONL_LINES...
  local name=$1 pattern=$2
  shift 2
  printf '%s\n' "$@" > "$work/$name.jsonl"
  LOG="$work/$name.log"
  run 2 --model "$model" --data "$work/$name.jsonl" --out "$work/out_$name"
  expect_failure 3 "$pattern" "$work/out_$name"
}
# Line 4 is bad; line 2 is blank, so the physical line number differs from the sample index.
check broken_json "$work/broken_json.jsonl:4: invalid JSON" "$good" "" '{"id": "b", "input_ids": [4]}' '{"id": "c", "input_ids": [1, 2'
check out_of_vocab "out_of_vocab.jsonl:2: token id 512 at input_ids\[1\] is outside the vocabulary \[0, 512)" "$good" '{"input_ids": [5, 512]}'
check negative_id "negative_id.jsonl:1: token id -1" '{"input_ids": [-1]}'
check mask_length "mask_length.jsonl:2: loss_mask has 2 entries but input_ids has 3" "$good" '{"input_ids": [1, 2, 3], "loss_mask": [1, 1]}'
check empty_sample "empty_sample.jsonl:1: empty sample" '{"id": "e", "input_ids": []}'
check duplicate_id "duplicate_id.jsonl:3: duplicate id \"a\" (first seen at line 1)" "$good" '{"id": "b", "input_ids": [7]}' "$good"
check not_object "not_object.jsonl:1: a sample must be a JSON object" '[1, 2, 3]'
# Only id, input_ids and loss_mask: a typo must not silently train on the prompt.
check unknown_key 'unknown_key.jsonl:2: unknown key "lossmask": did you mean "loss_mask"?' "$good" '{"input_ids": [1, 2, 3], "lossmask": [0, 0, 1]}'
# Conversations and text lines are tested by chat.sh (a model without a tokenizer: exit 4, naming the line).
long_id=$(head -c 65536 /dev/zero | tr '\0' a)
check long_id 'long_id.jsonl:2: "id" is 65536 bytes long, more than 4096 allowed' "$good" "{\"id\": \"$long_id\", \"input_ids\": [1]}"
[ "$(wc -c < "$LOG")" -lt 4096 ] || fail "the message quotes the whole 64 KiB id"
check duplicate_key 'duplicate_key.jsonl:1: duplicate key "input_ids"' '{"input_ids": [1], "input_ids": [2]}'
# Ids equal up to a NUL collided in the shards and the export; an id with a newline and an escape
# sequence printed a fake critical line. Refused, every one named, printed escaped.
check nul_id 'nul_id.jsonl:3: "id" "a\\u0000c" holds the control character \\u0000 at byte 2' \
  "$good" '{"id": "a\u0000b", "input_ids": [1]}' '{"id": "a\u0000c", "input_ids": [1]}'
grep -q 'nul_id.jsonl:2: "id" "a\\u0000b"' "$LOG" || { cat "$LOG"; fail "the first NUL id is not named"; }
fake='{"id": "x\n2024-01-01 00:00:00.000 [r0/1] critical: \u001b[32mall shards lost", "input_ids": [1]}'
check control_id 'control_id.jsonl:2: "id" "x\\n2024-01-01 00:00:00.000 \[r0/1\] critical: \\u001b\[32mall' \
  "$good" "$fake" '{"id": "del\u007f", "messages": [{"role": "user", "content": "hi"}]}'
grep -q $'\x1b' "$LOG" && { cat -v "$LOG"; fail "an escape character reached the log"; }
grep -q 'control_id.jsonl:3: "id" "del\\u007f" holds the control character \\u007f' "$LOG" ||
  { cat "$LOG"; fail "a messages line's control id is not refused"; }
# A raw NUL byte ended the line for the JSON parser; the rest of it was dropped silently.
printf '%s\n{"input_ids": [1]}\0{"loss_mask": [0]}\n' "$good" > "$work/nul_byte.jsonl"
LOG="$work/nul_byte.log"
run 2 --model "$model" --data "$work/nul_byte.jsonl" --out "$work/out_nul_byte"
expect_failure 3 "nul_byte.jsonl:2: a raw NUL byte at column 19" "$work/out_nul_byte"
# A user-facing error ends with what is wrong, not where the code noticed; --log-level debug adds that.
if grep -q '\.\(cpp\|h\):[0-9]*)$' "$LOG"; then cat "$LOG"; fail "an input error names a source file"; fi
LOG="$work/nul_byte_debug.log"
run 1 --model "$model" --data "$work/nul_byte.jsonl" --out "$work/out_nul_byte" --log-level debug
expect_failure 3 "nul_byte.jsonl:2: a raw NUL byte" "$work/out_nul_byte"
grep -q 'critical: .*\.cpp:[0-9]*)$' "$LOG" || { cat "$LOG"; fail "--log-level debug does not name the source place"; }
check deep 'deep.jsonl:1: JSON nested more than 64 levels deep' "$(head -c 100000 /dev/zero | tr '\0' '[')"
check deep_value 'deep_value.jsonl:1: JSON nested more than 64 levels deep' "{\"input_ids\": [1, $(head -c 100000 /dev/zero | tr '\0' '[')2$(head -c 100000 /dev/zero | tr '\0' ']')]}"
check overflow 'overflow.jsonl:2: invalid JSON value: .*number overflow' "$good" '{"input_ids": [1], "loss_mask": [1e400]}'
check blank_file 'blank_file.jsonl: no samples: the file is empty or holds only blank lines' "" "  "
: > "$work/empty_file.jsonl"
LOG="$work/empty_file.log"
run 2 --model "$model" --data "$work/empty_file.jsonl" --out "$work/out_empty_file"
expect_failure 3 'empty_file.jsonl: no samples' "$work/out_empty_file"
# Every bad line of the file, up to 20, in one error.
many=()
for i in $(seq 1 25); do many+=("{\"input_ids\": [$((600 + i))]}"); done
check many 'many.jsonl:1: token id 601 at input_ids\[0\] is outside the vocabulary' "${many[@]}"
grep -q "many.jsonl:20: token id 620 " "$LOG" || { cat "$LOG"; fail "the 20th bad line is not named"; }
grep -q "^and 5 more bad lines (25 in all)" "$LOG" || { cat "$LOG"; fail "the count of the others is missing"; }
if grep -q "many.jsonl:21:" "$LOG"; then fail "more than 20 bad lines named"; fi
# --data must be a regular file: a directory is named as such, a FIFO is refused without waiting for a writer.
LOG="$work/data_dir.log"
run 2 --model "$model" --data "$work" --out "$work/out_data_dir"
expect_failure 3 "--data $work is a directory" "$work/out_data_dir"
mkfifo "$work/fifo.jsonl"
LOG="$work/fifo.log"
E3_MPIRUN="timeout 120 $E3_MPIRUN" run 2 --model "$model" --data "$work/fifo.jsonl" --out "$work/out_fifo"
expect_failure 3 "--data $work/fifo.jsonl is not a regular file (a FIFO)" "$work/out_fifo"
# --on-long error
printf '%s\n' "$good" '{"input_ids": [1, 2, 3, 4, 5, 6]}' > "$work/long.jsonl"
LOG="$work/long.log"
run 2 --model "$model" --data "$work/long.jsonl" --out "$work/out_long" --max-seq-len 4 --on-long error
expect_failure 3 "long.jsonl:2: sample has 6 tokens, more than --max-seq-len 4" "$work/out_long"
# --on-long skip: counted, logged, listed in the manifest, not silently dropped.
LOG="$work/skip.log"
run 2 --model "$model" --data "$work/long.jsonl" --out "$work/out_skip" --max-seq-len 4 --on-long skip
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "skip run exited $RC"; }
grep -q "skipping sample 1 (.*long.jsonl:2): 6 tokens > --max-seq-len 4" "$LOG" || { cat "$LOG"; fail "skip not logged"; }
grep -q '"reason": "6 tokens > --max-seq-len 4"' "$work/out_skip/manifest.json" || fail "skip not in the manifest"
"$E3_BIN" verify "$work/out_skip" > /dev/null
# --on-long truncate: stored with 4 tokens.
LOG="$work/truncate.log"
run 1 --model "$model" --data "$work/long.jsonl" --out "$work/out_trunc" --max-seq-len 4 --on-long truncate
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "truncate run exited $RC"; }
h5dump -H -d /samples/00000001/input_ids "$work/out_trunc/shard-000000.h5" | grep -q "( 4 ) / ( 4 )" || fail "not truncated"
# Bad flags: usage errors, exit 2.
LOG="$work/usage.log"
# usage_error MESSAGE FLAGS...: a run given FLAGS exits 2, saying MESSAGE in one critical line.
usage_error() {
  run 2 --model "$model" --data "$work/long.jsonl" --out "$work/out_usage" "${@:2}"
  expect_failure 2 "$1" "$work/out_usage"
}
usage_error "--dtype: must be bf16, fp16, fp32 or fp8, not 'int8'" --dtype int8
usage_error "capture id 8 is not below the 8 layers" --layers 2,8
usage_error "--max-tokens-per-step 50 is below --max-seq-len 100" --max-seq-len 100 --max-tokens-per-step 50
usage_error "--expert-dequant: must be scratch or gemm, not 'fast'" --expert-dequant fast
# The other named options: each is checked against its name table, which the error lists.
usage_error "--backend: must be auto, cuda or cpu, not 'gpu'" --backend gpu
usage_error "--comm: must be auto, nccl or mpi, not 'nvlink'" --comm nvlink
usage_error "--log-level: must be trace, debug, info, warn or error, not 'verbose'" --log-level verbose
# A near miss also names the value it misspells.
usage_error "--comm: must be auto, nccl or mpi, not 'nccll' (did you mean 'nccl'?)" --comm nccll
usage_error "--final: must be post-norm, pre-norm, both or none, not 'post_norm' (did you mean 'post-norm'?)" --final post_norm
usage_error "--on-nonfinite: must be error or skip, not 'ignore'" --on-nonfinite ignore
# Values that CLI11 alone would take: empty capture ids, zero or negative sizes.
usage_error "--layers is empty" --layers ""
usage_error "--layers 1,,2: item 2 is empty" --layers 1,,2
usage_error "--tp must be positive, not 0" --tp 0
usage_error "--tp must be positive, not -2" --tp -2
usage_error "--threads must be positive, not 0" --threads 0
usage_error "--threads must be positive, not -1" --threads -1
# A mistyped option or command: its likely meaning, the arguments in their own order, no source place.
usage_error "unknown option '--layer': did you mean --layers? (see --help)" --layer 1,2,3
if grep -q '\.cpp:[0-9]*)' "$LOG"; then cat "$LOG"; fail "a usage error names a source file"; fi
usage_error "unknown option '--on-lnog': did you mean --on-long?" --on-lnog=skip
usage_error "unexpected argument 'extra.jsonl': a run takes only options; the commands are verify, info" extra.jsonl
run 1 verfiy "$work/out_usage"
expect_failure 2 "unknown command 'verfiy': did you mean verify? (see --help)" "$work/out_usage"
run 1 verify "$work/out_usage" --allow-incomplet
expect_failure 2 "unknown option '--allow-incomplet' for verify: did you mean --allow-incomplete?" "$work/out_usage"
# More threads than cores: a warning, and the run goes on. --layers given twice adds up.
LOG="$work/threads.log"
cores=$(getconf _NPROCESSORS_ONLN)
run 1 --model "$model" --data "$work/long.jsonl" --out "$work/out_threads" --backend cpu --threads $((cores + 1)) \
  --layers 2 --layers "4, 5"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "a run with more threads than cores exited $RC"; }
grep -q "capture ids \[2, 4, 5\]" "$LOG" || { cat "$LOG"; fail "--layers 2 --layers \"4, 5\" is not [2, 4, 5]"; }
grep -q "warning: --threads $((cores + 1)) on each of the 1 rank of this node is $((cores + 1)) threads for $cores cores" "$LOG" ||
  { cat "$LOG"; fail "no warning for more threads than cores"; }
# A launcher that bound the process to one of the job's CPUs (Open MPI's mpirun does so for one
# or two ranks): a warning naming the binding and the way out; started directly, none.
if [ "$(nproc)" -ge 2 ] && command -v taskset > /dev/null; then
  first_cpu=$(taskset -pc $$ | sed 's/.*: //' | cut -d, -f1 | cut -d- -f1)
  taskset -c "$first_cpu" "$E3_BIN" verify "$work/out_threads" > "$work/bound.log" 2>&1 ||
    { cat "$work/bound.log"; fail "verify on one CPU failed"; }
  grep -q "warning: this rank may run on 1 of the [0-9]* CPUs this job has on the node, where its share (1 rank on the node) is [0-9]*: .*--bind-to none" \
    "$work/bound.log" || { cat "$work/bound.log"; fail "no warning for a process bound to one CPU"; }
  "$E3_BIN" verify "$work/out_threads" > "$work/unbound.log" 2>&1 || { cat "$work/unbound.log"; fail "verify failed"; }
  # Where this script itself runs on fewer CPUs than are online (under taskset), the warning may be right.
  if [ "$(nproc)" -eq "$(getconf _NPROCESSORS_ONLN)" ] && grep -q "may run on" "$work/unbound.log"; then
    cat "$work/unbound.log"; fail "a warning for a process on every CPU"
  fi
fi
