# `eagle3_extract export`: each format from bf16, fp32 and fp8 runs, read back by the trainers'
# own reading (tests/trainers/check_export.py: keys, dtypes, shapes, values bit for bit, every
# sample once); hostile ids stay inside DEST; conventions a trainer cannot use are refused with
# the rerun to make; a non-empty DEST is refused; an interrupted export resumes; a second run
# has nothing to do; a damaged SRC is refused; two ranks share the shards.
source "$(dirname "$0")/lib.sh"
trainers="$(cd "$(dirname "$0")/../trainers" && pwd)"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir export)
check() { "$PYTHON" "$trainers/check_export.py" --format "$1" "$2" "$3" > "$work/check.log" 2>&1 ||
  { cat "$work/check.log"; fail "check_export --format $1 $2 $3"; }; }

# Ids a file name cannot hold as they are; sample 3 has no id and sample 4's id is "00000003".
"$PYTHON" - "$model/input.jsonl" "$work/input.jsonl" <<'PY'
import json, sys
ids = ["../evil", "a/b", "x\u0001y\n", None, "00000003", "a%2Fb", "\u00e9" * 150, ".."]
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as out:
    for line, sample_id in zip(src, ids):
        d = json.loads(line)
        d.pop("id", None)
        if sample_id is not None:
            d["id"] = sample_id
        out.write(json.dumps(d) + "\n")
PY
extract() {  # extract NAME ARGS...
  LOG="$work/$1.log"
  run 1 --model "$model" --data "$work/input.jsonl" --out "$work/$1" --samples-per-shard 3 "${@:2}"
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "extraction $1 exited $RC"; }
}

for dtype in bf16 fp32 fp8; do
  extract "both_$dtype" --dtype "$dtype" --final both
  for format in speculators specforge modelopt; do
    LOG="$work/export_${dtype}_$format.log"
    run 1 export --format "$format" "$work/both_$dtype" "$work/out_${dtype}_$format"
    [ "$RC" -eq 0 ] || { cat "$LOG"; fail "export --format $format of a $dtype run exited $RC"; }
    grep -q "ok: 8 samples in 8 files" "$LOG" || { cat "$LOG"; fail "export did not report 8 samples"; }
    check "$format" "$work/both_$dtype" "$work/out_${dtype}_$format"
    # Only what the trainer reads, plus export.json: no temporaries, no state left behind.
    extra=$(cd "$work/out_${dtype}_$format" && find . -type f ! -name '*.safetensors' ! -name '*.ckpt' ! -name '*.pt' \
      ! -name data.jsonl ! -name export.json | head -3)
    [ -z "$extra" ] || fail "export left $extra in DEST"
  done
done
# Every ModelOpt file is directly inside DEST, and the hostile ids got distinct names.
dest="$work/out_bf16_modelopt"
[ "$(find "$dest" -name '*.pt' | wc -l)" -eq 8 ] || fail "not 8 .pt files in $dest"
[ "$(find "$dest" -mindepth 2 | wc -l)" -eq 0 ] || fail "a file left DEST's top level: $(find "$dest" -mindepth 2)"
[ -f "$dest/00000003.pt" ] && [ -f "$dest/%300000003.pt" ] && [ -f "$dest/%2E.%2Fevil.pt" ] ||
  fail "unexpected ModelOpt names: $(ls "$dest")"
[ ! -e "$work/evil.pt" ] || fail "an id wrote outside DEST"
# speculators: data.jsonl rows are the samples in order, as the trainer's `datasets` loads them.
"$PYTHON" - "$work/out_bf16_speculators/data.jsonl" "$work/input.jsonl" <<'PY' || fail "data.jsonl rows"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
src = [json.loads(l) for l in open(sys.argv[2])]
assert len(rows) == len(src) == 8
for r, s in zip(rows, src):
    assert set(r) == {"input_ids", "loss_mask", "seq_len"}, r.keys()
    assert r["input_ids"] == s["input_ids"] and r["seq_len"] == len(s["input_ids"])
    assert r["loss_mask"] == s.get("loss_mask", [1] * len(s["input_ids"]))
PY

# A second run has nothing to do; a DEST holding anything else is refused.
LOG="$work/again.log"
run 1 export --format specforge "$work/both_bf16" "$work/out_bf16_specforge"
[ "$RC" -eq 0 ] && grep -q "nothing to do" "$LOG" || { cat "$LOG"; fail "a second export did not say nothing to do"; }
LOG="$work/other.log"
run 1 export --format modelopt "$work/both_bf16" "$work/out_bf16_specforge"
expect_failure 5 "already holds an export of other data or in another format" ""
mkdir -p "$work/busy" && touch "$work/busy/notes.txt"
LOG="$work/busy.log"
run 1 export --format modelopt "$work/both_bf16" "$work/busy"
expect_failure 5 "is not empty" ""
LOG="$work/inside.log"
run 1 export --format modelopt "$work/both_bf16" "$work/both_bf16/exported"
expect_failure 2 "is inside SRC" ""

# Conventions: the final norm a trainer needs, three capture ids, a warning for other ids.
extract post --final post-norm
extract pre --final pre-norm
extract four --layers 1,2,4,5 --final both
extract shifted --layers 3,5,6 --final both
LOG="$work/conv1.log"
run 1 export --format speculators "$work/post" "$work/conv1"
expect_failure 2 "rerun the extraction with --final pre-norm (or --final both" ""
[ ! -e "$work/conv1" ] || fail "a refused export created DEST"
LOG="$work/conv2.log"
run 1 export --format specforge "$work/pre" "$work/conv2"
expect_failure 2 "rerun the extraction with --final post-norm (or --final both" ""
LOG="$work/conv3.log"
run 1 export --format modelopt "$work/four" "$work/conv3"
expect_failure 2 "take exactly three: rerun the extraction with --layers 2,4,5" ""
LOG="$work/conv4.log"
run 1 export --format modelopt "$work/shifted" "$work/conv4"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "export of non-default layers exited $RC"; }
grep -q "warning: export: .* captured ids \[3, 5, 6\], not the EAGLE-3 default \[2, 4, 5\]" "$LOG" ||
  { cat "$LOG"; fail "no warning for non-default capture ids"; }

# An export that stops at a damaged shard resumes once the shard is back: the shards done
# before are kept (one thread: shards in order, so shards 0 and 1 are done before shard 2).
cp -r "$work/both_bf16" "$work/damaged"
mv "$work/damaged/shard-000002.h5" "$work/shard2.keep"
printf 'not hdf5' > "$work/damaged/shard-000002.h5"
LOG="$work/stop.log"
run 1 export --format speculators --skip-verify --threads 1 "$work/damaged" "$work/resumed"
[ "$RC" -ne 0 ] || { cat "$LOG"; fail "export of a damaged shard passed"; }
grep -q "shard-000002.h5" "$LOG" || { cat "$LOG"; fail "the error does not name the damaged shard"; }
[ ! -e "$work/resumed/data.jsonl" ] && [ ! -e "$work/resumed/export.json" ] || fail "a failed export looks finished"
mv "$work/shard2.keep" "$work/damaged/shard-000002.h5"
LOG="$work/resume.log"
run 1 export --format speculators --threads 1 "$work/damaged" "$work/resumed"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "the resumed export exited $RC"; }
grep -q "resuming" "$LOG" && grep -q "(2 shards done by an earlier run)" "$LOG" || { cat "$LOG"; fail "no resume"; }
check speculators "$work/damaged" "$work/resumed"

# A SRC that verify rejects is never exported.
cp -r "$work/both_bf16" "$work/tampered"
"$PYTHON" - "$work/tampered/shard-000001.h5" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-64, 2)
    b = f.read(1)
    f.seek(-64, 2)
    f.write(bytes([b[0] ^ 1]))
PY
LOG="$work/tampered.log"
run 1 export --format modelopt "$work/tampered" "$work/tampered_out"
expect_failure 6 "shard-000001.h5: checksum" ""
# Shards that passed may be exported (each right after its check), never the damaged one's
# samples (3, 4, 5), and the export does not look finished.
for name in 00000003 %300000003 a%252Fb; do
  [ ! -e "$work/tampered_out/$name.pt" ] || fail "sample $name of the damaged shard was exported"
done
[ ! -e "$work/tampered_out/export.json" ] || fail "an export of a damaged SRC looks finished"

# Two ranks share the shards; rank 0 finishes.
LOG="$work/np2.log"
run 2 export --format speculators "$work/both_fp8" "$work/np2"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "export under 2 ranks exited $RC"; }
check speculators "$work/both_fp8" "$work/np2"
echo ok
