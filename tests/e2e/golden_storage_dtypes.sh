# bf16 and fp16 storage, the default capture ids, and --final none, against HF.
source "$(dirname "$0")/lib.sh"
dir=$(golden_dir dev_llama3)
work=$(fresh_dir golden_storage)
# Storage rounding alone: bf16 keeps 8 bits of mantissa (relative error ~2^-9 per value).
for spec in "bf16 4e-3" "fp16 1e-3"; do
  set -- $spec
  LOG="$work/$1.log"
  run 2 --model "$dir" --data "$dir/input.jsonl" --out "$work/$1" --layers 0,1,2,3,4 --dtype "$1" --log-level warn
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
  "$E3_GOLDEN_CHECK" "$work/$1" "$dir" --layers 0,1,2,3,4 --final post-norm --tol "$2"
  "$E3_BIN" verify "$work/$1" > /dev/null
  h5dump -H "$work/$1/shard-000000.h5" | grep -q "DATASPACE  SIMPLE { ( 77, 5, 256 ) / ( 77, 5, 256 ) }" ||
    fail "h5dump does not show hidden_states as (T, K, H)"
done
# The default ids of a 5-layer model are [2, L/2, L-3] = [2, 2, 2].
LOG="$work/default.log"
run 1 --model "$dir" --data "$dir/input.jsonl" --out "$work/default" --final none --dtype fp32 --log-level warn
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
"$E3_GOLDEN_CHECK" "$work/default" "$dir" --layers 2,2,2 --final none --tol 1e-4
h5dump -a /layer_ids "$work/default/shard-000000.h5" | grep -q "(0): 2, 2, 2" || fail "layer_ids attribute is not 2, 2, 2"
