# A failed start leaves nothing in --out that blocks the fixed rerun (an --out it created is
# gone again), and a rerun with nothing left to do says so without loading the model.
source "$(dirname "$0")/lib.sh"
src="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir outdir)
data="$src/input.jsonl"
m="$work/model"
mkdir -p "$m"
cp "$src/config.json" "$src/model.safetensors" "$m/"
args=(--model "$m" --data "$data" --samples-per-shard 3 --layers 1,4,7 --dtype fp32)

# A config error that shows only when the weights load (a mis-shaped tensor: the config check
# before loading compares the sizes it can, not the attention heads).
sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$m/config.json"
LOG="$work/broken_config.log"
run 2 "${args[@]}" --out "$work/out"
expect_failure 4 "k_proj.weight' in .* has shape \[64, 128\], expected \[128, 128\]" "$work/out"
[ ! -e "$work/out" ] || { ls -la "$work/out"; fail "a failed start left the --out it created behind"; }
# The same into an --out that existed: it is left as it was, empty.
mkdir -p "$work/existing"
run 2 "${args[@]}" --out "$work/existing"
expect_failure 4 "expected \[128, 128\]" "$work/existing"
[ -z "$(ls -A "$work/existing")" ] || { ls -la "$work/existing"; fail "a failed start left files in --out"; }
cp "$src/config.json" "$m/config.json"
for out in out existing; do
  LOG="$work/fixed_$out.log"
  run 2 "${args[@]}" --out "$work/$out"
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "the fixed rerun into $out exited $RC"; }
  "$E3_BIN" verify "$work/$out" > /dev/null || fail "verify after the fixed rerun into $out"
done

# A truncated checkpoint, and a bad --expert-dequant: nothing is created either.
size=$(stat -c %s "$m/model.safetensors")
head -c $((size - 5000)) "$src/model.safetensors" > "$m/model.safetensors"
LOG="$work/truncated.log"
run 2 "${args[@]}" --out "$work/out2"
expect_failure 4 "run past the end of the data" "$work/out2"
[ ! -e "$work/out2" ] || fail "a truncated checkpoint left --out behind"
cp "$src/model.safetensors" "$m/model.safetensors"
LOG="$work/dequant.log"
run 2 "${args[@]}" --out "$work/out2" --expert-dequant sideways
expect_failure 2 "--expert-dequant: must be scratch or gemm, not 'sideways'" "$work/out2"
[ ! -e "$work/out2" ] || fail "a bad --expert-dequant left --out behind"

# Nothing left to do: said before the model would load, with the usual counts.
LOG="$work/again.log"
run 2 "${args[@]}" --out "$work/out"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "the rerun of a finished run exited $RC"; }
grep -q "info: nothing to do: all 3 shards committed in $work/out (complete), the model is not loaded; done: 0 samples computed now, 8 done before, 0 skipped" "$LOG" ||
  { cat "$LOG"; fail "no 'nothing to do' line"; }
grep -q "ready on" "$LOG" && { cat "$LOG"; fail "the model was loaded with nothing to do"; }
# The same when the run that wrote the last shard died before marking the manifest complete:
# the manifest is completed, still without loading the model.
sed -i 's/"complete": *true/"complete": false/' "$work/out/manifest.json"
grep -q '"complete": *false' "$work/out/manifest.json" || fail "could not mark the manifest incomplete"
LOG="$work/incomplete.log"
run 2 "${args[@]}" --out "$work/out"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "the rerun of an unmarked finished run exited $RC"; }
grep -q "nothing to do: all 3 shards committed" "$LOG" || { cat "$LOG"; fail "no 'nothing to do' line"; }
grep -q "ready on" "$LOG" && { cat "$LOG"; fail "the model was loaded with nothing to do"; }
"$E3_BIN" verify "$work/out" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify: the manifest was not completed"; }
grep -q "(run not complete)" "$work/verify.log" && fail "the manifest still says incomplete"
if compgen -G "$work/out/.lock*" > /dev/null; then fail "a lock file was left"; fi
