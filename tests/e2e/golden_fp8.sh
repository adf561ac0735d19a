# --dtype fp8 on the CPU backend against HF: the fp32 states quantized to e4m3fn with a scale
# per token and layer. golden_check --fp8 decodes the bits itself and bounds the per-token
# error (median below 3e-2, every token below 2^-4 + 2e-3: see its header); verify accepts
# the shards; the schema is what DESIGN.md says.
source "$(dirname "$0")/lib.sh"
dir=$(golden_dir dev_llama3)
work=$(fresh_dir golden_fp8)
LOG="$work/fp8.log"
run 2 --model "$dir" --data "$dir/input.jsonl" --out "$work/fp8" --layers 0,1,2,3,4 --dtype fp8 --log-level warn
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
"$E3_GOLDEN_CHECK" "$work/fp8" "$dir" --layers 0,1,2,3,4 --final post-norm --fp8
"$E3_BIN" verify "$work/fp8" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify refuses fp8 shards"; }
shard="$work/fp8/shard-000000.h5"
h5dump -a /dtype "$shard" | grep -q '"fp8"' || fail "file attribute dtype is not fp8"
h5dump -H "$shard" > "$work/header.txt"
# Sample 2 has 77 tokens: its datasets' types and shapes, in the order h5dump lists them.
grep -A2 'DATASET "hidden_states"' "$work/header.txt" | grep -q "H5T_STD_U8LE" || fail "hidden_states is not uint8"
grep -q "DATASPACE  SIMPLE { ( 77, 5, 256 ) / ( 77, 5, 256 ) }" "$work/header.txt" || fail "hidden_states is not (T, K, H)"
grep -A2 'DATASET "hidden_states_scale"' "$work/header.txt" | grep -q "H5T_IEEE_F32LE" ||
  fail "hidden_states_scale is not float32"
grep -q "DATASPACE  SIMPLE { ( 77, 5 ) / ( 77, 5 ) }" "$work/header.txt" || fail "hidden_states_scale is not (T, K)"
grep -A2 'DATASET "last_hidden_state_scale"' "$work/header.txt" | grep -q "H5T_IEEE_F32LE" ||
  fail "last_hidden_state_scale is not float32"
grep -A2 'DATASET "last_hidden_state"' "$work/header.txt" | grep -q "H5T_STD_U8LE" || fail "last_hidden_state is not uint8"
for d in hidden_states last_hidden_state; do
  h5dump -a "/samples/00000000/$d/encoding" "$shard" | grep -q '"float8_e4m3fn"' || fail "$d has no encoding attribute"
done
grep -q '"dtype": "fp8"' "$work/fp8/manifest.json" || fail "the run fingerprint does not say fp8"
