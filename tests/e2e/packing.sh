# The same sample gives the same bytes whatever shares its step: the token budget, the TP and
# DP layout and the OpenBLAS kernel the CPU would pick change nothing (README: "Output"). A
# dense and an MoE model (its experts see a different number of rows in every packing), fp32
# storage so that no rounding to 16 bits hides a difference in the last bits.
source "$(dirname "$0")/lib.sh"
work=$(fresh_dir packing)
for i in $(seq 0 39); do
  printf '{"id": "s%d", "input_ids": [%s]}\n' "$i" "$(seq -s, $((i % 37 + 1)) $((i % 37 + 3 + (i * 7) % 29)))"
done > "$work/data.jsonl"
# TP changes the arithmetic itself (split GEMMs, then a sum over ranks), so each TP size has a
# reference of its own: one DP group with a small step budget.
for case in tiny_llama_default s_dsv3_group; do
  model=$(golden_dir "$case")
  # 5 samples a shard divide the slices of 1, 2 and 4 DP groups (40, 20, 10 samples): every
  # layout cuts the same shards, so that their files compare by name.
  args=(--model "$model" --data "$work/data.jsonl" --samples-per-shard 5 --max-seq-len 40 --dtype fp32
        --layers "$(all_layer_ids "$model")")
  for tp in 1 2 4; do
    ref="$work/$case.tp$tp.reference"
    LOG="$ref.log"
    run "$tp" "${args[@]}" --out "$ref" --tp "$tp" --max-tokens-per-step 40
    [ "$RC" -eq 0 ] || { cat "$LOG"; fail "$case: reference run at --tp $tp exited $RC"; }
    for coretype in Haswell Prescott SkylakeX; do
      for layout in "$tp 97" "$((tp * 2)) 300" "$((tp * 4)) 64"; do
        read -r np budget <<< "$layout"
        [ "$np" -le 4 ] || continue
        out="$work/$case.$coretype.np$np.tp$tp.$budget"
        LOG="$out.log"
        OPENBLAS_CORETYPE=$coretype run "$np" "${args[@]}" --out "$out" --tp "$tp" --max-tokens-per-step "$budget"
        [ "$RC" -eq 0 ] || { cat "$LOG"; fail "$case $coretype np $np tp $tp budget $budget exited $RC"; }
        same_samples "$ref" "$out" \
          "$case with OPENBLAS_CORETYPE=$coretype, $np ranks, --tp $tp, --max-tokens-per-step $budget"
        rm -rf "$out"
      done
    done
  done
done
echo "packing: the same bytes for every sample in every layout"
