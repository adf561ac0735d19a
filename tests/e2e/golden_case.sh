# golden_case.sh CASE TP: every capture id and both final modes against HF, fp32, at one TP.
source "$(dirname "$0")/lib.sh"
case_name=$1
tp=$2
dir=$(golden_dir "$case_name")
work=$(fresh_dir "golden_${case_name}_tp${tp}")
ids=$(all_layer_ids "$dir")
for final in post-norm pre-norm; do
  out="$work/$final"
  LOG="$work/$final.log"
  run "$tp" --model "$dir" --data "$dir/input.jsonl" --out "$out" --layers "$ids" --final "$final" \
    --dtype fp32 --samples-per-shard 2 --max-tokens-per-step 400 --max-seq-len 400 --log-level warn
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
  "$E3_GOLDEN_CHECK" "$out" "$dir" --layers "$ids" --final "$final" --tol 1e-4
  "$E3_BIN" verify "$out" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify failed"; }
done
