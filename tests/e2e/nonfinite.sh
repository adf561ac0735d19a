# NaN/Inf in captured states, found per sample and layer. A real model is made to produce them:
# the embedding row of token 500 is set to +inf, so exactly the samples holding token 500
# (samples 3 and 8) turn non-finite. --on-nonfinite error (the default) stops the job naming
# the first; skip leaves both out, lists them in their shards and the manifest, counts them,
# and a resume keeps the count. 2 of 12 left out is more than --max-skipped-fraction allows
# (0.01 by default): such a run, and its rerun, end with exit 9 instead of "complete"; a rerun
# with a larger fraction accepts them.
# --dtype fp8 finds them the same way, before quantizing.
source "$(dirname "$0")/lib.sh"
work=$(fresh_dir nonfinite)
model="$work/model"
mkdir -p "$model"
cp "$E3_GOLDEN_DIR/tiny_llama_default/config.json" "$E3_GOLDEN_DIR/tiny_llama_default/model.safetensors" "$model/"
"$E3_ST_POISON" "$model/model.safetensors" model.embed_tokens.weight 500
for i in $(seq 0 11); do
  ids=$(seq -s, $((i * 7 + 1)) $((i * 7 + 20)))
  case $i in 3 | 8) ids="$ids,500,$((i + 30))" ;; esac
  printf '{"id": "n%d", "input_ids": [%s]}\n' "$i" "$ids"
done > "$work/data.jsonl"
args=(--model "$model" --data "$work/data.jsonl" --tp 2 --samples-per-shard 4 --max-tokens-per-step 64
      --max-seq-len 64 --layers 0,3,6)

LOG="$work/error.log"
run 2 "${args[@]}" --out "$work/error"
expect_failure 9 "critical: rank 0: non-finite hidden states: sample 3 ($work/data.jsonl:4, id \"n3\"): infinity in capture id 0 at token 20 of 22, column 0; nothing of it was written (--on-nonfinite skip would leave it out" "$work/error/none"
# Shards complete before sample 3 stay committed; none holds a non-finite value.
"$E3_BIN" verify --allow-incomplete "$work/error" > /dev/null || fail "verify after the non-finite stop"

LOG="$work/skip.log"
run 2 "${args[@]}" --out "$work/skip" --on-nonfinite skip
expect_failure 9 "critical: rank 0: non-finite hidden states: 2 of the 12 samples (16.7%) were left out (--on-nonfinite skip), more than --max-skipped-fraction 0.01 allows" "$work/none"
grep -q "rerun the same command with a larger --max-skipped-fraction" "$LOG" || { cat "$LOG"; fail "no advice"; }
grep -q "warning: sample 3 ($work/data.jsonl:4, id \"n3\"): infinity in capture id 0 at token 20 of 22, column 0: left out" "$LOG" ||
  { cat "$LOG"; fail "no warning for sample 3"; }
grep -q "warning: sample 8 " "$LOG" || { cat "$LOG"; fail "no warning for sample 8"; }
grep -q "done: 10 samples computed now, 0 done before, 2 skipped (0 over --max-seq-len, 2 with non-finite states)" "$LOG" ||
  { cat "$LOG"; fail "summary does not count the skipped samples"; }
"$E3_BIN" verify "$work/skip" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify"; }
grep -q "10 samples, .* 2 skipped, 12 of 12 input samples accounted for" "$work/verify.log" ||
  { cat "$work/verify.log"; fail "verify does not account for the skipped samples"; }
h5dump -g /skipped "$work/skip/shard-000000.h5" | grep -q 'GROUP "00000003"' || fail "shard 0 does not list sample 3"
h5dump -a /skipped/00000008/reason "$work/skip/shard-000002.h5" | grep -q "infinity in capture id 0" ||
  fail "shard 2 does not give the reason for sample 8"
grep -A3 '"skipped"' "$work/skip/manifest.json" | grep -q '"index": 3' || fail "the manifest does not list sample 3"

LOG="$work/range.log"
run 2 "${args[@]}" --out "$work/range" --on-nonfinite skip --max-skipped-fraction 1.5
expect_failure 2 "usage error: --max-skipped-fraction: Value 1.5 not in range" "$work/range"

LOG="$work/resume.log"
run 2 "${args[@]}" --out "$work/skip" --on-nonfinite skip
expect_failure 9 "2 of the 12 samples (16.7%) were left out (--on-nonfinite skip)" "$work/none"
LOG="$work/accept.log"
run 2 "${args[@]}" --out "$work/skip" --on-nonfinite skip --max-skipped-fraction 0.2
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "rerun with --max-skipped-fraction 0.2 exited $RC"; }
grep -q "done: 0 samples computed now, 10 done before, 2 skipped (0 over --max-seq-len, 2 with non-finite states)" "$LOG" ||
  { cat "$LOG"; fail "the resumed summary lost the skipped samples"; }

# fp8: the scan sees the captured values before they are quantized (encode_e4m3_row marks the
# row), with the same value, token and column as above; skip leaves the same samples out.
LOG="$work/fp8_error.log"
run 2 "${args[@]}" --out "$work/fp8_error" --dtype fp8
expect_failure 9 "critical: rank 0: non-finite hidden states: sample 3 ($work/data.jsonl:4, id \"n3\"): infinity in capture id 0 at token 20 of 22, column 0; nothing of it was written" "$work/fp8_error/none"
LOG="$work/fp8_skip.log"
run 2 "${args[@]}" --out "$work/fp8_skip" --dtype fp8 --on-nonfinite skip --max-skipped-fraction 0.5
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "fp8 --on-nonfinite skip exited $RC"; }
grep -q "warning: sample 3 ($work/data.jsonl:4, id \"n3\"): infinity in capture id 0 at token 20 of 22, column 0: left out" "$LOG" ||
  { cat "$LOG"; fail "fp8: no warning for sample 3"; }
grep -q "done: 10 samples computed now, 0 done before, 2 skipped (0 over --max-seq-len, 2 with non-finite states)" "$LOG" ||
  { cat "$LOG"; fail "fp8: summary does not count the skipped samples"; }
"$E3_BIN" verify "$work/fp8_skip" > "$work/fp8_verify.log" 2>&1 || { cat "$work/fp8_verify.log"; fail "fp8 verify"; }
