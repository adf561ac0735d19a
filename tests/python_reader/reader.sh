# The Python reader (io/python/eagle3_extract) on real output of the demo checkpoint: bf16, fp32
# and fp8 storage, --final post-norm / pre-norm / none, a run in two parts, against reads of the
# same files made without the package (check_reader.py); then directories it must refuse.
source "$(dirname "$0")/../e2e/lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
export PYTHONPATH="$here/../../io/python"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir python_reader)
# Sample 3 has 120 tokens: --max-seq-len 100 skips it, so every run has a skipped sample.
common=(--model "$model" --data "$model/input.jsonl" --samples-per-shard 3 --max-seq-len 100)

extract() {  # extract NAME ARGS...: a run into $work/NAME that must succeed
  local name=$1
  shift
  LOG="$work/$name.log"
  run 1 "${common[@]}" --out "$work/$name" "$@"
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "run $name ($*) exited $RC"; }
}

extract bf16 --dtype bf16
extract fp32_prenorm --dtype fp32 --final pre-norm
extract fp8 --dtype fp8
extract fp16_none --dtype fp16 --final none
for name in bf16 fp32_prenorm fp8 fp16_none; do
  "$PYTHON" "$here/check_reader.py" "$work/$name" || fail "reader on $name"
done

# Other capture ids than the EAGLE-3 default: torch_dataset warns, naming them and the default.
extract layers123 --dtype bf16 --layers 1,2,3
"$PYTHON" "$here/check_reader.py" "$work/layers123" || fail "reader on --layers 1,2,3"
"$PYTHON" - "$work/layers123" "$work/bf16" <<'PY' || fail "torch_dataset and non-default layers"
import sys, warnings
import eagle3_extract as e3
for directory, want in ((sys.argv[1], 1), (sys.argv[2], 0)):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        e3.torch_dataset(directory, keys="specforge")
    texts = [str(w.message) for w in caught]
    assert len(texts) == want, texts
    assert not want or "captured output_hidden_states [1, 2, 3], not the EAGLE-3 default [2, 4, 5]" in texts[0], texts
PY

# --final both, as extraction writes it (with the layer attributes hidden_states_hf_index,
# last_hidden_state_norm, slots); and the hand-made layout of make_final_both.py, which checks
# the reader against the schema independently of the writer.
for name in bf16 fp8; do
  extract "both_$name" --dtype "$name" --final both
  "$PYTHON" "$here/check_reader.py" "$work/both_$name" || fail "reader on --final both ($name)"
  rm -rf "$work/made_both_$name"
  cp -r "$work/$name" "$work/made_both_$name"
  "$PYTHON" "$here/make_final_both.py" "$work/made_both_$name" || fail "make_final_both.py on $name"
  "$PYTHON" "$here/check_reader.py" "$work/made_both_$name" || fail "reader on hand-made --final both ($name)"
done

# Shards written before eagle3_extract counted tokens (no /token_counts): token_counts() counts
# their samples instead, to the same result.
rm -rf "$work/no_counts"
cp -r "$work/bf16" "$work/no_counts"
"$PYTHON" - "$work/bf16" "$work/no_counts" <<'PY' || fail "token_counts() of shards without /token_counts"
import glob, json, os, sys
import h5py
import eagle3_extract as e3
want = e3.open_dataset(sys.argv[1]).token_counts()
manifest = os.path.join(sys.argv[2], "manifest.json")
doc = json.load(open(manifest))
for shard in doc["shards"]:
    path = os.path.join(sys.argv[2], shard["file"])
    with h5py.File(path, "r+") as f:
        del f["token_counts"]
    shard["bytes"] = os.path.getsize(path)
json.dump(doc, open(manifest, "w"))
assert e3.open_dataset(sys.argv[2]).token_counts() == want
PY

# Two parts into one directory: read as one dataset once both are there.
extract parts --dtype bf16 --part 0/2
cp -r "$work/parts" "$work/one_part"
"$PYTHON" - "$work/one_part" <<'PY' || fail "one part of two: refused, or readable with allow_incomplete"
import sys
import eagle3_extract as e3
try:
    e3.open_dataset(sys.argv[1])
    sys.exit("a directory with one part of two was read as complete")
except e3.DatasetError as e:
    assert "the run is not complete" in str(e) and "1 of 2 parts present" in str(e) and "allow_incomplete" in str(e), e
ds = e3.open_dataset(sys.argv[1], allow_incomplete=True)
assert not ds.meta.complete and ds.meta.parts_present == 1 and ds.meta.part_count == 2
assert 0 < len(ds) < 7 and [s["index"] for s in ds] == ds.indices, ds.indices
PY
extract parts --dtype bf16 --part 1/2
"$PYTHON" "$here/check_reader.py" "$work/parts" --parts 2 || fail "reader on a run in two parts"
mkdir -p "$work/refusals"
"$PYTHON" "$here/check_refusals.py" "$work/bf16" "$work/parts" "$work/refusals" || fail "manifests verify refuses"

# Refused: each case names the file and the problem.
refused() {  # refused DIR PATTERN: open_dataset(DIR) raises DatasetError containing PATTERN
  "$PYTHON" - "$1" "$2" <<'PY' || fail "$1 was not refused with: $2"
import sys
import eagle3_extract as e3
try:
    e3.open_dataset(sys.argv[1])
except e3.DatasetError as e:
    if sys.argv[2] not in str(e):
        sys.exit(f"refused, but the message lacks {sys.argv[2]!r}: {e}")
    print("refused:", e)
    sys.exit(0)
sys.exit("not refused")
PY
}
copy() { rm -rf "$work/$2"; cp -r "$work/$1" "$work/$2"; echo "$work/$2"; }

mkdir -p "$work/empty"
refused "$work/empty" "is not an eagle3_extract output directory"
d=$(copy bf16 no_manifest); rm "$d/manifest.json"
refused "$d" "$d: no manifest.json beside its shard files"
d=$(copy bf16 bad_manifest); echo '{"format": "eagle3-hidden-states-manifest", "shards": [' > "$d/manifest.json"
refused "$d" "$d/manifest.json: not a readable JSON manifest"
d=$(copy bf16 missing_shard); rm "$d/shard-000001.h5"
refused "$d" "$d/shard-000001.h5: listed in the manifest but missing"
d=$(copy bf16 escaping_name)
"$PYTHON" - "$d/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["shards"][0]["file"] = "../bf16/shard-000000.h5"; json.dump(m, open(sys.argv[1], "w"))
PY
refused "$d" "which is not a file name in the output directory"
d=$(copy bf16 incomplete)
"$PYTHON" - "$d/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["complete"] = False; m["shards"].pop(); json.dump(m, open(sys.argv[1], "w"))
PY
refused "$d" "the run is not complete"
d=$(copy bf16 twice)
"$PYTHON" - "$d/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["shards"][1]["samples"].append(m["shards"][0]["samples"][0]); json.dump(m, open(sys.argv[1], "w"))
PY
refused "$d" "appears twice"

# Tampered shards. Editing a file changes its size, which alone is refused; the manifest's size
# is then set to the new one so that the sample checks behind it are reached.
tamper() {  # tamper DIR PYTHON-CODE [all] (f: the h5py File of shard-000001.h5, or of each shard; s: its /samples)
  "$PYTHON" - "$1" "$2" "${3:-one}" <<'PY'
import glob, json, os, sys
import h5py, numpy as np
d, code, which = sys.argv[1:4]
paths = sorted(glob.glob(os.path.join(d, "shard-*.h5"))) if which == "all" else [os.path.join(d, "shard-000001.h5")]
for path in paths:
    with h5py.File(path, "r+") as f:
        s = f["samples"]
        exec(code)
m = json.load(open(os.path.join(d, "manifest.json")))
for sh in m["shards"]:
    sh["bytes"] = os.path.getsize(os.path.join(d, sh["file"]))
json.dump(m, open(os.path.join(d, "manifest.json"), "w"))
PY
}
d=$(copy bf16 resized); printf 'x' >> "$d/shard-000000.h5"
refused "$d" "$d/shard-000000.h5: $(( $(stat -c %s "$work/bf16/shard-000000.h5") + 1 )) bytes, the manifest says"
d=$(copy bf16 wrong_shape)
tamper "$d" 'k = sorted(s)[0]; del s[k]["hidden_states"]; s[k]["hidden_states"] = np.zeros((2, 3, 4), np.float32)'
refused "$d" "$d/shard-000001.h5 sample 00000004: hidden_states has shape [2, 3, 4]"
# check="lazy" opens it, and refuses the sample when it is read.
"$PYTHON" - "$d" <<'PY' || fail "check='lazy' on a tampered sample"
import sys
import eagle3_extract as e3
ds = e3.open_dataset(sys.argv[1], check="lazy")
assert ds.by_index(0)["index"] == 0
try:
    ds.by_index(4)
    sys.exit("the tampered sample 4 was read")
except e3.DatasetError as e:
    assert "sample 00000004: hidden_states has shape [2, 3, 4]" in str(e), e
try:
    list(ds)
    sys.exit("iteration read the tampered sample 4")
except e3.DatasetError as e:
    assert "sample 00000004" in str(e), e
PY
d=$(copy fp32_prenorm wrong_type)
tamper "$d" 'k = sorted(s)[0]; h = s[k]["hidden_states"][()]; del s[k]["hidden_states"]; s[k]["hidden_states"] = h.astype(np.float64)'
refused "$d" "sample 00000004: hidden_states is not stored as fp32"
d=$(copy fp8 no_scale)
tamper "$d" 'del s[sorted(s)[0]]["hidden_states_scale"]'
refused "$d" "dataset 'hidden_states_scale' is missing"
d=$(copy bf16 removed_sample)
tamper "$d" 'del s[sorted(s)[0]]'
refused "$d" "$d/shard-000001.h5 sample 00000004: missing"
d=$(copy bf16 extra_sample)
tamper "$d" 's.copy(s[sorted(s)[0]], "00000099")'
refused "$d" "sample 00000099 is in the file but not in the manifest"
d=$(copy bf16 other_layers)
tamper "$d" 'f.attrs["layer_ids"] = np.array([1, 2, 3], np.int32)'
refused "$d" "$d/shard-000001.h5: layer_ids [1, 2, 3] differ from the manifest's"
d=$(copy bf16 other_run)
tamper "$d" 'f.attrs["run_fingerprint"] = np.bytes_("0123456789abcdef")'
refused "$d" "(a shard of another run)"
d=$(copy bf16 tokens)
tamper "$d" 'g = s[sorted(s)[0]]; g.attrs["num_tokens"] = np.int64(1)'
refused "$d" "num_tokens attribute is not"
d=$(copy bf16 model_type_as_number)
tamper "$d" 'f.attrs["model_type"] = np.int64(3)' all
refused "$d" "$d/shard-000000.h5: TypeError"
# The layer attributes of issue 13 must agree with layer_ids and --final.
d=$(copy both_bf16 norm_disagrees)
tamper "$d" 'f.attrs["last_hidden_state_norm"] = np.bytes_("pre-norm")' all
refused "$d" "last_hidden_state_norm is 'pre-norm', but --final both stores post-norm in last_hidden_state"
d=$(copy both_bf16 hf_index_disagrees)
tamper "$d" 'f.attrs["hidden_states_hf_index"] = np.array([3, 4, 5], np.int32)' all
refused "$d" "hidden_states_hf_index [3, 4, 5] differs from layer_ids [2, 4, 5]"
d=$(copy both_bf16 slots_differ)
tamper "$d" 'f.attrs["slots"] = np.array(["x"], dtype=h5py.string_dtype())'
refused "$d" "$d/shard-000001.h5: attribute slots differs from"
echo "python reader: ok"
