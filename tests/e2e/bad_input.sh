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
run 2 --model "$model" --data "$work/long.jsonl" --out "$work/out_usage" --dtype fp8
expect_failure 2 "--dtype must be bf16, fp16 or fp32" "$work/out_usage"
run 2 --model "$model" --data "$work/long.jsonl" --out "$work/out_usage" --layers 2,8
expect_failure 2 "capture id 8 is not below the 8 layers" "$work/out_usage"
run 2 --model "$model" --data "$work/long.jsonl" --out "$work/out_usage" --max-seq-len 100 --max-tokens-per-step 50
expect_failure 2 "--max-tokens-per-step 50 is below --max-seq-len 100" "$work/out_usage"
run 2 --model "$model" --data "$work/long.jsonl" --out "$work/out_usage" --expert-dequant fast
expect_failure 2 "--expert-dequant must be scratch or gemm, not 'fast'" "$work/out_usage"
