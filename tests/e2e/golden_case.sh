# golden_case.sh CASE TP: every capture id and both final modes against HF, fp32, at one TP.
source "$(dirname "$0")/lib.sh"
case_name=$1
tp=$2
dir=$(golden_dir "$case_name")
work=$(fresh_dir "golden_${case_name}_tp${tp}")
ids=$(all_layer_ids "$dir")
# Steps of 400 tokens (several samples share one), or of the longest sample where it is longer.
budget=$("$PYTHON" -c 'import json, sys; print(max([400] + [len(json.loads(l)["input_ids"]) for l in open(sys.argv[1]) if l.strip()]))' "$dir/input.jsonl")
for final in post-norm pre-norm; do
  out="$work/$final"
  LOG="$work/$final.log"
  run "$tp" --model "$dir" --data "$dir/input.jsonl" --out "$out" --layers "$ids" --final "$final" \
    --dtype fp32 --samples-per-shard 2 --max-tokens-per-step "$budget" --max-seq-len "$budget" --log-level warn
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
  "$E3_GOLDEN_CHECK" "$out" "$dir" --layers "$ids" --final "$final" --tol 1e-4
  "$E3_BIN" verify "$out" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify failed"; }
done
