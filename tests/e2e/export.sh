# `eagle3_extract export`: each format from bf16, fp32 and fp8 runs, read back by the trainers'
# own reading (tests/trainers/check_export.py: keys, dtypes, shapes, values bit for bit, every
# sample once); hostile ids stay inside DEST; conventions a trainer cannot use are refused with
# the rerun to make; a non-empty DEST is refused; an interrupted export resumes; a second run
# has nothing to do; a damaged SRC is refused; two ranks share the shards. The draft vocabulary:
# each format's files as the trainer builds and loads them (ties at the cut, too few masked ids,
# the default of the whole 512-token vocabulary), the same bytes from every dtype, rank count and
# rerun, recounted for a SRC written before token counts, --draft-vocab-size out of bounds
# refused before anything is written, and a finished DEST asked for another size rewrites only
# the vocabulary. ModelOpt gets its aux layers ascending; each trainer's default length is
# reported against the longest samples.
source "$(dirname "$0")/lib.sh"
trainers="$(cd "$(dirname "$0")/../trainers" && pwd)"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir export)
check() {  # check FORMAT SRC DEST [DRAFT_VOCAB_SIZE]: the default is the whole tiny vocabulary
  "$PYTHON" "$trainers/check_export.py" --format "$1" --draft-vocab-size "${4:-512}" "$2" "$3" > "$work/check.log" 2>&1 ||
    { cat "$work/check.log"; fail "check_export --format $1 --draft-vocab-size ${4:-512} $2 $3"; }
}
# The draft vocabulary's files of a format, DEST-relative.
vocab_files() { case $1 in speculators) echo d2t.npy t2d.npy ;; specforge) echo vocab_mapping/vocab_mapping.pt ;;
                modelopt) echo d2t.pth ;; esac; }
same_vocab() {  # same_vocab FORMAT DEST_A DEST_B WHAT
  local f
  for f in $(vocab_files "$1"); do cmp -s "$2/$f" "$3/$f" || fail "$4: $f differs"; done
}

# Ids a file name cannot hold as they are (control characters are refused at input, issue 20);
# sample 3 has no id and sample 4's id is "00000003".
"$PYTHON" - "$model/input.jsonl" "$work/input.jsonl" <<'PY'
import json, sys
ids = ["../evil", "a/b", "x y\u00a0*?", None, "00000003", "a%2Fb", "\u00e9" * 150, ".."]
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
exported() {  # exported FORMAT SRC DEST: an export that must pass; its output in $LOG, DEST.log
  LOG="$3.log"
  run 1 export --format "$1" "$2" "$3"
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "export --format $1 $2 $3 exited $RC"; }
}

for dtype in bf16 fp32 fp8; do
  extract "both_$dtype" --dtype "$dtype" --final both
  for format in speculators specforge modelopt; do
    LOG="$work/export_${dtype}_$format.log"
    run 1 export --format "$format" "$work/both_$dtype" "$work/out_${dtype}_$format"
    [ "$RC" -eq 0 ] || { cat "$LOG"; fail "export --format $format of a $dtype run exited $RC"; }
    grep -q "ok: 8 samples in 8 files" "$LOG" || { cat "$LOG"; fail "export did not report 8 samples"; }
    check "$format" "$work/both_$dtype" "$work/out_${dtype}_$format"
    grep -q "draft vocabulary: the target's whole vocabulary (512 tokens)" "$LOG" ||
      { cat "$LOG"; fail "export did not describe the default draft vocabulary"; }
    # The counts are of tokens, not states: every storage dtype gives the same files.
    [ "$dtype" = bf16 ] || same_vocab "$format" "$work/out_bf16_$format" "$work/out_${dtype}_$format" "$dtype vs bf16"
    # Only what the trainer reads, plus export.json: no temporaries, no state left behind.
    extra=$(cd "$work/out_${dtype}_$format" && find . -type f ! -name '*.safetensors' ! -name '*.ckpt' ! -name '*.pt' \
      ! -name data.jsonl ! -name export.json ! -name d2t.npy ! -name t2d.npy ! -name d2t.pth | head -3)
    [ -z "$extra" ] || fail "export left $extra in DEST"
  done
done
# Every ModelOpt file is directly inside DEST, and the hostile ids got distinct names; the draft
# vocabulary is no *.pt (the trainer would take it for a sample).
dest="$work/out_bf16_modelopt"
[ "$(find "$dest" -name '*.pt' | wc -l)" -eq 8 ] || fail "not 8 .pt files in $dest"
[ -f "$dest/d2t.pth" ] || fail "no d2t.pth in $dest"
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
# A model of fewer than 4 layers has no EAGLE-3 default to name (2, L/2, L-3 would not be layers).
"$E3_MAKE_EXPORT_SRC" "$work/two_layers" --hidden 64 --layers-total 2 --layers 0,1 --samples 2 --tokens 8 \
  --vocab 100 > /dev/null
LOG="$work/conv_two_layers.log"
run 1 export --format specforge "$work/two_layers" "$work/conv_two_layers"
expect_failure 2 "take exactly three: rerun the extraction with three --layers below 2 (the EAGLE-3 default, \[2, L/2, L-3\], needs 4 layers or more)" ""
LOG="$work/conv4.log"
run 1 export --format modelopt "$work/shifted" "$work/conv4"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "export of non-default layers exited $RC"; }
grep -q "warning: export: .* captured ids \[3, 5, 6\], not the EAGLE-3 default \[2, 4, 5\]" "$LOG" ||
  { cat "$LOG"; fail "no warning for non-default capture ids"; }
grep -q "tell the trainer these layers: eagle.eagle_architecture_config.eagle_aux_hidden_state_layer_ids=\[2,4,5\]" \
  "$LOG" || { cat "$LOG"; fail "the warning does not name ModelOpt's option"; }

# ModelOpt concatenates its aux states in ascending layer order (it sorts its layer ids): an
# unsorted --layers is written in that order, and export.json says so; the other formats keep
# SRC's order. A layer twice cannot be a ModelOpt layer set: refused.
extract unsorted --layers 5,2,4 --final both
exported modelopt "$work/unsorted" "$work/unsorted_mo"
check modelopt "$work/unsorted" "$work/unsorted_mo"
grep -q "aux_hidden_states hold capture ids \[2, 4, 5\] in ascending order, as ModelOpt orders its layers" "$LOG" ||
  { cat "$LOG"; fail "no line for the reordered layers"; }
! grep -q "not the EAGLE-3 default" "$LOG" || { cat "$LOG"; fail "sorted, these are the default: no warning"; }
"$PYTHON" - "$work/unsorted_mo/export.json" <<'PY' || fail "export.json of the reordered export"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["layer_ids"] == [2, 4, 5] and d["source_layer_ids"] == [5, 2, 4], d
PY
exported specforge "$work/unsorted" "$work/unsorted_sf"
check specforge "$work/unsorted" "$work/unsorted_sf"
grep -q "tell the trainer these layers: model.aux_hidden_state_layer_ids: \[4, 1, 3\] in the run config's YAML" "$LOG" ||
  { cat "$LOG"; fail "the warning does not name SpecForge's key"; }
extract twice --layers 2,2,5 --final both
LOG="$work/twice.log"
run 1 export --format modelopt "$work/twice" "$work/twice_mo"
expect_failure 2 "captured ids \[2, 2, 5\], a layer twice; ModelOpt takes each layer once" ""

# Each trainer cuts samples longer than its default length without an error: the export's end
# says how many of them, and the setting that keeps them whole (SpecForge data.max_length and
# ModelOpt training.training_seq_len 2048, speculators --total-seq-len 8192).
"$PYTHON" - "$model/input.jsonl" "$work/long.jsonl" <<'PY'
import json, random, sys
random.seed(5)
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as out:
    out.writelines(src)
    for n in (2048, 2049, 2300):
        ids = [random.randrange(3, 512) for _ in range(n)]
        out.write(json.dumps({"input_ids": ids, "loss_mask": [0] * (n // 2) + [1] * (n - n // 2)}) + "\n")
PY
LOG="$work/long_extract.log"
run 1 --model "$model" --data "$work/long.jsonl" --out "$work/long" --final both
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "extraction of long samples exited $RC"; }
for format in specforge modelopt speculators; do exported "$format" "$work/long" "$work/long_$format"; done
grep -q "warning: export: 2 of 11 samples are longer than SpecForge's default data.max_length = 2048, .*pass \
data.max_length=2300 (the longest sample)" "$work/long_specforge.log" ||
  { cat "$work/long_specforge.log"; fail "no report of SpecForge's cut"; }
grep -q "warning: export: 2 of 11 samples are longer than ModelOpt's default training.training_seq_len = 2048, .*pass \
training.training_seq_len=2300 (the longest sample)" "$work/long_modelopt.log" ||
  { cat "$work/long_modelopt.log"; fail "no report of ModelOpt's cut"; }
grep -q "the longest of the 11 samples has 2300 tokens, within speculators' default --total-seq-len = 8192: none is cut" \
  "$work/long_speculators.log" || { cat "$work/long_speculators.log"; fail "no length line for speculators"; }
"$PYTHON" - "$work/long_modelopt/export.json" <<'PY' || fail "export.json does not record the long samples"
import json, sys
d = json.load(open(sys.argv[1]))["long_samples"]
assert d == {"trainer_key": "training.training_seq_len", "trainer_default": 2048, "longer": 2, "longest": 2300}, d
PY

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

# One export at a time writes a DEST: while another holds DEST's lock (here flock(1), as a
# running export's flock), a second export is refused, naming DEST, and touches nothing there.
mkdir -p "$work/locked"
LOG="$work/locked.log"
set +e
flock "$work/locked/.export.lock" $E3_MPIRUN -np 1 "$E3_BIN" export --format modelopt "$work/both_bf16" "$work/locked" \
  > "$LOG" 2>&1
RC=$?
set -e
expect_failure 5 "export DEST $work/locked is in use by another job .*: one export at a time writes a DEST" ""
[ "$(ls -A "$work/locked")" = .export.lock ] || fail "the refused export wrote into DEST: $(ls -A "$work/locked")"
# Once it is free the export runs, and leaves no lock behind.
LOG="$work/unlocked.log"
run 1 export --format modelopt "$work/both_bf16" "$work/locked"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "export into a DEST no longer locked exited $RC"; }
[ ! -e "$work/locked/.export.lock" ] || fail "the export left its lock file in DEST"

# Files being written are hidden and end in .partial: no trainer's glob (*.pt, *.ckpt, the
# speculators' names) matches them, and a resume removes only them, never a sample's file,
# whatever its id (ModelOpt names files by id: "a.tmp.1" was once taken for a temporary).
"$PYTHON" - "$model/input.jsonl" "$work/tmp_ids.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as out:
    for i, line in enumerate(src):
        d = json.loads(line)
        d["id"] = [f"a.tmp.{i}", f"b.partial{i}", f"c{i}.pt.partial", f"d{i}"][i % 4]
        out.write(json.dumps(d) + "\n")
PY
LOG="$work/tmp_ids_extract.log"
run 1 --model "$model" --data "$work/tmp_ids.jsonl" --out "$work/tmp_ids" --samples-per-shard 3 --final both
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "extraction of tmp_ids exited $RC"; }
mv "$work/tmp_ids/shard-000002.h5" "$work/tmp_ids_shard2.keep"
printf 'not hdf5' > "$work/tmp_ids/shard-000002.h5"
LOG="$work/tmp_ids_stop.log"
run 1 export --format modelopt --skip-verify --threads 1 "$work/tmp_ids" "$work/tmp_ids_out"
[ "$RC" -ne 0 ] || { cat "$LOG"; fail "export of a damaged shard passed"; }
printf 'left by a killed run' > "$work/tmp_ids_out/.d99.pt.partial"
mv "$work/tmp_ids_shard2.keep" "$work/tmp_ids/shard-000002.h5"
LOG="$work/tmp_ids_resume.log"
run 1 export --format modelopt "$work/tmp_ids" "$work/tmp_ids_out"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "the resumed export exited $RC"; }
[ ! -e "$work/tmp_ids_out/.d99.pt.partial" ] || fail "the resume left a temporary file"
check modelopt "$work/tmp_ids" "$work/tmp_ids_out"

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

# Two ranks share the shards; rank 0 finishes, with the same draft vocabulary.
LOG="$work/np2.log"
run 2 export --format speculators "$work/both_fp8" "$work/np2"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "export under 2 ranks exited $RC"; }
check speculators "$work/both_fp8" "$work/np2"
same_vocab speculators "$work/out_fp8_speculators" "$work/np2" "2 ranks vs 1"

# --draft-vocab-size: ties at the cut (the 20 most frequent of ids masked twice or more), too few
# masked ids (300 of about 160: filled); the same bytes on a second export.
for format in speculators specforge modelopt; do
  for n in 20 300; do
    for again in a b; do
      LOG="$work/vocab_${format}_$n$again.log"
      run 1 export --format "$format" --draft-vocab-size "$n" "$work/both_bf16" "$work/vocab_${format}_$n$again"
      [ "$RC" -eq 0 ] || { cat "$LOG"; fail "export --draft-vocab-size $n exited $RC"; }
    done
    check "$format" "$work/both_bf16" "$work/vocab_${format}_${n}a" "$n"
    same_vocab "$format" "$work/vocab_${format}_${n}a" "$work/vocab_${format}_${n}b" "a second export"
    grep -q "export: draft vocabulary: the $n most frequent of the target's 512 tokens" "$LOG" ||
      { cat "$LOG"; fail "no draft vocabulary line"; }
  done
  grep -q "warning: export: only [0-9]* distinct token ids are masked .* fewer than the draft vocabulary's 300" "$LOG" ||
    { cat "$LOG"; fail "no warning for a draft vocabulary larger than the masked ids"; }
done
grep -q "pass model.vocab_mapping_path=$work/vocab_specforge_300b/vocab_mapping/vocab_mapping.pt" \
  "$work/vocab_specforge_300b.log" || { cat "$work/vocab_specforge_300b.log"; fail "no SpecForge key printed"; }
grep -q "pass data.draft_vocab_cache=$work/vocab_modelopt_300b/d2t.pth eagle.eagle_architecture_config.draft_vocab_size=300" \
  "$work/vocab_modelopt_300b.log" || { cat "$work/vocab_modelopt_300b.log"; fail "no ModelOpt keys printed"; }
grep -q "reads them from --data-path $work/vocab_speculators_300b .*pass --draft-vocab-size 300" \
  "$work/vocab_speculators_300b.log" || { cat "$work/vocab_speculators_300b.log"; fail "no speculators flags printed"; }
# Out of bounds: refused before DEST is made.
for n in 513 0; do
  LOG="$work/vocab_bad_$n.log"
  run 1 export --format specforge --draft-vocab-size "$n" "$work/both_bf16" "$work/vocab_bad_$n"
  expect_failure 2 "$([ "$n" = 0 ] && echo "must be positive, not 0" ||
    echo "is larger than the target's vocabulary (512 tokens)")" ""
  [ ! -e "$work/vocab_bad_$n" ] || fail "a refused --draft-vocab-size $n created DEST"
done
# --writers and --threads are counts: 0 is refused before DEST is made.
for opt in --writers --threads; do
  LOG="$work/bad$opt.log"
  run 1 export --format specforge "$opt" 0 "$work/both_bf16" "$work/bad$opt"
  expect_failure 2 "export $opt must be positive, not 0" ""
  [ ! -e "$work/bad$opt" ] || fail "a refused $opt 0 created DEST"
done
# A finished DEST asked for another size: only the vocabulary is rewritten.
LOG="$work/vocab_rewrite.log"
run 1 export --format specforge --draft-vocab-size 20 "$work/both_bf16" "$work/out_bf16_specforge"
[ "$RC" -eq 0 ] && grep -q "only its draft vocabulary was rewritten" "$LOG" || { cat "$LOG"; fail "no rewrite"; }
check specforge "$work/both_bf16" "$work/out_bf16_specforge" 20
same_vocab specforge "$work/vocab_specforge_20a" "$work/out_bf16_specforge" "the rewritten vocabulary"
# A SRC written before token counts: its masked tokens are counted at export, to the same files.
cp -r "$work/both_bf16" "$work/old"
"$PYTHON" - "$work/old" <<'PY'
import glob, sys
import h5py
for path in glob.glob(sys.argv[1] + "/shard-*.h5"):
    with h5py.File(path, "r+") as f:
        del f["token_counts"]
PY
LOG="$work/old.log"
run 1 export --format modelopt --skip-verify --draft-vocab-size 20 "$work/old" "$work/old_out"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "export of a SRC without token counts exited $RC"; }
grep -q "3 of 3 shards have no token counts" "$LOG" || { cat "$LOG"; fail "no recount reported"; }
same_vocab modelopt "$work/vocab_modelopt_20a" "$work/old_out" "recounted"
# ... and whose model is gone: no vocabulary (a warning), or a usage error when one is asked for.
"$PYTHON" - "$work/old" <<'PY'
import glob, sys
import h5py, numpy as np
for path in glob.glob(sys.argv[1] + "/shard-*.h5"):
    with h5py.File(path, "r+") as f:
        f.attrs["model"] = np.bytes_("/nonexistent/model")
PY
LOG="$work/old_gone.log"
run 1 export --format speculators --skip-verify "$work/old" "$work/old_gone"
[ "$RC" -eq 0 ] && grep -q "warning: export: no draft vocabulary written" "$LOG" || { cat "$LOG"; fail "no warning"; }
[ ! -e "$work/old_gone/d2t.npy" ] || fail "a vocabulary was written without the target's vocabulary size"
LOG="$work/old_gone2.log"
run 1 export --format speculators --skip-verify --draft-vocab-size 20 "$work/old" "$work/old_gone2"
expect_failure 2 "leave out --draft-vocab-size to export without one" ""
echo ok
