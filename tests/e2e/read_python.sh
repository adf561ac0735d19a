# The README's "Reading the output in Python" code, run as written (Debian's python3-h5py):
# its raw read gives the values h5py's slow HDF5 conversion gives, for bf16, fp16 and fp32.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir read_python)
readme="$(dirname "$0")/../../README.md"
# The first python block of the section.
sed -n '/^### Reading the output in Python/,/^### /p' "$readme" |
  awk '/^```python/{on=1; next} on && /^```/{exit} on' > "$work/snippet.py"
grep -q "def read_states" "$work/snippet.py" || fail "no read_states in the README's Python section"
for dtype in bf16 fp16 fp32; do
  LOG="$work/$dtype.log"
  run 1 --model "$model" --data "$model/input.jsonl" --out "$work/$dtype" --dtype "$dtype" --samples-per-shard 3
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "run --dtype $dtype exited $RC"; }
  # The snippet opens eagle3_out/shard-000000.h5: run it there as written, then compare.
  (cd "$work" && rm -f eagle3_out && ln -s "$dtype" eagle3_out && "$PYTHON" snippet.py) ||
    fail "the README snippet fails on $dtype output"
  "$PYTHON" - "$work/snippet.py" "$work/$dtype" "$dtype" <<'PY' || fail "raw read differs from h5py's conversion ($dtype)"
import glob, sys
import numpy as np
import h5py
src = open(sys.argv[1]).read()
ns = {}
exec(src.split("with h5py.File")[0], ns)  # the definitions, not the example loop
checked = 0
for path in sorted(glob.glob(sys.argv[2] + "/shard-*.h5")):
    with h5py.File(path, "r") as f:
        assert f.attrs["dtype"].decode() == sys.argv[3]
        for key, sample in f["samples"].items():
            for name in ("hidden_states", "last_hidden_state"):
                fast = ns["read_states"](sample, name)
                slow = sample[name][...].astype("f4")  # through HDF5's conversion
                assert fast.dtype == np.float32 and fast.shape == slow.shape, (path, key, name)
                assert np.array_equal(fast, slow), (path, key, name, np.abs(fast - slow).max())
                assert np.abs(fast).max() > 0, (path, key, name)
                checked += 1
assert checked >= 16, checked
print("checked", checked)
PY
done
# The fp8 table against known e4m3fn values.
"$PYTHON" - "$work/snippet.py" <<'PY' || fail "the README's fp8 table is wrong"
import sys
import numpy as np
ns = {}
exec(open(sys.argv[1]).read().split("with h5py.File")[0], ns)
t = ns["E4M3FN"]
assert t.dtype == np.float32 and t.shape == (256,)
assert t[0x38] == 1.0 and t[0x7E] == 448.0 and t[0xFE] == -448.0 and t[0x01] == 2.0**-9 and t[0x08] == 2.0**-6
assert np.isnan(t[0x7F]) and np.isnan(t[0xFF]) and np.isfinite(np.delete(t, [0x7F, 0xFF])).all()
PY
# The fp8 branch on a sample made by hand with the DESIGN.md schema: byte 0x38 is 1.0, so
# each value is its row's scale (hidden_states_scale [T, K], last_hidden_state_scale [T]).
"$PYTHON" - "$work/snippet.py" "$work/fp8.h5" <<'PY' || fail "the README's fp8 decode is wrong"
import sys
import numpy as np
import h5py
ns = {}
exec(open(sys.argv[1]).read().split("with h5py.File")[0], ns)
with h5py.File(sys.argv[2], "w") as f:
    f.attrs["dtype"] = np.bytes_("fp8")
    s = f.create_group("samples/00000000")
    s["hidden_states"] = np.full((2, 3, 4), 0x38, np.uint8)
    s["hidden_states_scale"] = (np.arange(2)[:, None] * 10 + np.arange(3)[None, :]).astype(np.float32)
    s["last_hidden_state"] = np.full((2, 4), 0xB8, np.uint8)  # -1.0
    s["last_hidden_state_scale"] = np.array([0.5, 4.0], np.float32)
with h5py.File(sys.argv[2], "r") as f:
    s = f["samples/00000000"]
    hs = ns["read_states"](s, "hidden_states")
    last = ns["read_states"](s, "last_hidden_state")
assert hs.shape == (2, 3, 4) and hs.dtype == np.float32
assert (hs == (np.arange(2)[:, None, None] * 10 + np.arange(3)[None, :, None])).all(), hs
assert (last == np.array([-0.5, -4.0])[:, None]).all(), last
PY
