# --final both stores the state after the final norm (last_hidden_state) and the one before it
# (last_hidden_state_prenorm), bit for bit what --final post-norm and --final pre-norm store;
# every shard names each slot's layer (hidden_states_hf_index, last_hidden_state_norm, slots)
# and verify prints them.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir final_both)
for dtype in fp32 fp8; do
  for final in post-norm pre-norm both; do
    LOG="$work/$dtype-$final.log"
    run 1 --model "$model" --data "$model/input.jsonl" --out "$work/$dtype-$final" --dtype "$dtype" --final "$final" \
      --layers 1,2,3 --samples-per-shard 3
    [ "$RC" -eq 0 ] || { cat "$LOG"; fail "--final $final --dtype $dtype exited $RC"; }
  done
  LOG="$work/verify-$dtype.log"
  run 1 verify "$work/$dtype-both"
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "verify of --final both ($dtype) exited $RC"; }
  grep -q "last_hidden_state = output_hidden_states\[8\] (after the final norm)" "$LOG" ||
    { cat "$LOG"; fail "verify does not say what last_hidden_state is"; }
  grep -q "last_hidden_state_prenorm = output of decoder layer 7 before the final norm (vLLM id 8)" "$LOG" ||
    { cat "$LOG"; fail "verify does not say what last_hidden_state_prenorm is"; }
  grep -q "hidden_states\[:, 0\] = output_hidden_states\[1\] (output of decoder layer 0)" "$LOG" ||
    { cat "$LOG"; fail "verify does not say what hidden_states slot 0 is"; }
  "$PYTHON" - "$work" "$dtype" <<'PY' || fail "--final both ($dtype) differs from post-norm + pre-norm"
import glob, sys
import h5py
import numpy as np
work, dtype = sys.argv[1], sys.argv[2]
def samples(run):
    # fp32 and fp8 (uint8 codes, float32 scales) read without any conversion.
    out = {}
    for path in sorted(glob.glob(f"{work}/{dtype}-{run}/shard-*.h5")):
        with h5py.File(path, "r") as f:
            attrs = {k: f.attrs[k] for k in f.attrs}
            for key, g in f["samples"].items():
                out[key] = {name: g[name][...] for name in g}
    return attrs, out
post_attrs, post = samples("post-norm")
pre_attrs, pre = samples("pre-norm")
both_attrs, both = samples("both")
assert post.keys() == pre.keys() == both.keys() and len(both) >= 8, len(both)
for key in both:
    b, po, pr = both[key], post[key], pre[key]
    want = {"input_ids", "loss_mask", "hidden_states", "last_hidden_state", "last_hidden_state_prenorm"}
    if dtype == "fp8":
        want |= {"hidden_states_scale", "last_hidden_state_scale", "last_hidden_state_prenorm_scale"}
    assert set(b) == want, (key, sorted(b))
    assert np.array_equal(b["hidden_states"], po["hidden_states"]), key
    assert np.array_equal(b["last_hidden_state"], po["last_hidden_state"]), key
    assert np.array_equal(b["last_hidden_state_prenorm"], pr["last_hidden_state"]), key
    assert not np.array_equal(b["last_hidden_state"], b["last_hidden_state_prenorm"]), key
    if dtype == "fp8":
        assert np.array_equal(b["last_hidden_state_scale"], po["last_hidden_state_scale"]), key
        assert np.array_equal(b["last_hidden_state_prenorm_scale"], pr["last_hidden_state_scale"]), key
def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)
assert s(both_attrs["final"]) == "both"
assert list(both_attrs["hidden_states_hf_index"]) == [1, 2, 3]
assert s(both_attrs["last_hidden_state_norm"]) == "post-norm"
assert s(pre_attrs["last_hidden_state_norm"]) == "pre-norm"
assert s(post_attrs["last_hidden_state_norm"]) == "post-norm"
slots = [s(v) for v in both_attrs["slots"]]
assert len(slots) == 5 and slots[3].startswith("last_hidden_state = ") and slots[4].startswith("last_hidden_state_prenorm = "), slots
print("ok", dtype, len(both))
PY
done
