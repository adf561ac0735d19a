# A rerun must not mix two runs' data (issue 20, items 1, 2 and 5): another checkpoint of the
# same architecture (one weight changed, every shape kept), --data changed with every sample's
# length kept, and a damaged shard that no manifest lists are each refused or redone; an
# export into a DEST holding another SRC's export is refused.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir mixing)
out="$work/out"
args=(--data "$model/input.jsonl" --samples-per-shard 3 --final both --log-level info)

# The same checkpoint with one bf16 weight of one layer changed in its last mantissa bit.
finetune="$work/finetune"
mkdir -p "$finetune"
cp "$model/config.json" "$finetune/"
"$PYTHON" - "$model/model.safetensors" "$finetune/model.safetensors" <<'PY'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
name = next(k for k in sorted(header) if k.endswith("mlp.down_proj.weight"))
begin = 8 + n + header[name]["data_offsets"][0]
data[begin + 2 * 17] ^= 1
open(sys.argv[2], "wb").write(data)
PY
cmp -s "$model/model.safetensors" "$finetune/model.safetensors" && fail "the fine-tune is the same file"

LOG="$work/first.log"
run 2 --model "$model" "${args[@]}" --out "$out"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "first run exited $RC"; }
grep -q '"weights_fingerprint"' "$out/manifest.json" || fail "the manifest has no weights fingerprint"
grep -q '"data_content_fingerprint"' "$out/manifest.json" || fail "the manifest has no data content fingerprint"
cp -r "$out" "$work/reference"

# 1. Another checkpoint of the same shape resuming a partial --out: refused before any write.
rm "$out/shard-000001.h5"
cp "$out/manifest.json" "$work/manifest.before"
LOG="$work/finetune.log"
run 2 --model "$finetune" "${args[@]}" --out "$out"
[ "$RC" -eq 5 ] || { cat "$LOG"; fail "a rerun with another checkpoint exited $RC, expected 5"; }
grep -q "was written from other weights (weights fingerprint [0-9a-f]* (in the directory) vs [0-9a-f]* (this run))" "$LOG" ||
  { cat "$LOG"; fail "the refusal does not name the weights"; }
[ ! -e "$out/shard-000001.h5" ] || fail "a shard was written from the other checkpoint"
cmp "$out/manifest.json" "$work/manifest.before" || fail "the manifest was rewritten by the refused run"
# The same weights with another --tp (other slices read by each rank) resume.
LOG="$work/tp2.log"
run 2 --model "$model" "${args[@]}" --out "$out" --tp 2
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "a resume of the same weights with --tp 2 exited $RC"; }
grep -q "done: 3 samples computed now, 5 done before" "$LOG" || { cat "$LOG"; fail "the --tp 2 resume did not redo the lost shard"; }
"$E3_BIN" verify "$out" > /dev/null || fail "verify after the --tp 2 resume"

# 2. --data with every sample's length kept but one token id, or one id, changed: refused.
rm "$out/shard-000001.h5"
"$PYTHON" - "$model/input.jsonl" "$work/tokens.jsonl" "$work/ids.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tokens = [dict(l) for l in lines]
tokens[4]["input_ids"] = list(tokens[4]["input_ids"])
tokens[4]["input_ids"][1] = (tokens[4]["input_ids"][1] + 1) % 100
ids = [dict(l) for l in lines]
ids[0]["id"] = "renamed"
for path, rows in ((sys.argv[2], tokens), (sys.argv[3], ids)):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
PY
for changed in tokens ids; do
  LOG="$work/data_$changed.log"
  run 2 --model "$model" --data "$work/$changed.jsonl" --samples-per-shard 3 --final both --out "$out"
  [ "$RC" -eq 5 ] || { cat "$LOG"; fail "a rerun with changed $changed exited $RC, expected 5"; }
  grep -q "has the same sample lengths but other content (ids, input_ids or loss_mask)" "$LOG" ||
    { cat "$LOG"; fail "the refusal of changed $changed does not say what differs"; }
  [ ! -e "$out/shard-000001.h5" ] || fail "a shard was written from changed $changed"
done
LOG="$work/same_data.log"
run 2 --model "$model" "${args[@]}" --out "$out"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "a rerun with the same data exited $RC"; }

# 5. An unlisted shard whose states were damaged (a crash between its rename and the manifest
# write, then a disk error): verify's full check before it is kept, else it is redone.
for flags in "" "--resume-checksums"; do
  rm "$out/manifest.json"
  shard="$out/shard-000001.h5"
  offset=$(h5dump -p -d /samples/00000003/hidden_states "$shard" | grep -o 'OFFSET [0-9]*' | grep -o '[0-9]*')
  [ -n "$offset" ] || fail "no offset of hidden_states in $shard"
  printf '\xff\xff\xff\xff' | dd of="$shard" bs=1 seek="$offset" conv=notrunc status=none
  LOG="$work/unlisted${flags}.log"
  # shellcheck disable=SC2086
  run 2 --model "$model" "${args[@]}" --out "$out" $flags
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "rerun over a damaged unlisted shard ($flags) exited $RC"; }
  grep -q "shard-000001.h5 sample 00000003: hidden_states has a non-finite value.*moved to .*shard-000001.h5.invalid" "$LOG" ||
    { cat "$LOG"; fail "the damaged unlisted shard was not moved aside ($flags)"; }
  grep -q "done: 3 samples computed now, 5 done before" "$LOG" || { cat "$LOG"; fail "the damaged shard was not redone ($flags)"; }
  "$E3_BIN" verify "$out" > /dev/null || fail "verify after redoing the damaged shard ($flags)"
  rm "$out/shard-000001.h5.invalid"
done

# Export: a DEST holding the export of another SRC (here: the same data from the fine-tune)
# is refused, not taken for "nothing to do".
LOG="$work/finetune_out.log"
run 2 --model "$finetune" "${args[@]}" --out "$work/out_finetune"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "the fine-tune's run exited $RC"; }
LOG="$work/export.log"
run 1 export --format speculators "$out" "$work/dest"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "export exited $RC"; }
LOG="$work/export_again.log"
run 1 export --format speculators "$out" "$work/dest"
[ "$RC" -eq 0 ] && grep -q "nothing to do" "$LOG" || { cat "$LOG"; fail "the same export again is not 'nothing to do'"; }
LOG="$work/export_other.log"
run 1 export --format speculators "$work/out_finetune" "$work/dest"
[ "$RC" -eq 5 ] || { cat "$LOG"; fail "export of another SRC into a used DEST exited $RC, expected 5"; }
grep -q "already holds an export of other data" "$LOG" || { cat "$LOG"; fail "the refusal does not say why"; }
# The weights fingerprint of block-scaled FP8 and INT4 checkpoints does not depend on --tp
# either (two ranks' slices share the block scales at their edge).
for case in dev_deepseek_v3_fp8 dev_kimi_k25_int4; do
  dir=$(golden_dir "$case")
  [ -d "$dir" ] || continue
  for tp in 1 2; do
    LOG="$work/${case}_tp$tp.log"
    run "$tp" --model "$dir" --data "$dir/input.jsonl" --out "$work/${case}_tp$tp" --tp "$tp"
    [ "$RC" -eq 0 ] || { cat "$LOG"; fail "$case at --tp $tp exited $RC"; }
  done
  a=$(grep -o '"weights_fingerprint": "[0-9a-f]*"' "$work/${case}_tp1/manifest.json")
  b=$(grep -o '"weights_fingerprint": "[0-9a-f]*"' "$work/${case}_tp2/manifest.json")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$case: weights fingerprint $a at --tp 1, $b at --tp 2"
done
echo "mixing: ok"
