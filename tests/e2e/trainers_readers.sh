# The trainers' readers and check_export.py (tests/trainers) against real output: a reference
# export (the test oracle) of each format passes for bf16, fp32 and fp8 sources, and every kind
# of broken export (wrong key, a layer off by one, the wrong final norm, a missing or an extra
# sample, a wrong dtype, swapped slots, truncation instead of rounding, a token-id mismatch, a
# bad file name; a draft vocabulary with ties broken the other way, out of order, of the wrong
# dtype or size, or missing) makes the checker fail, naming the problem.
source "$(dirname "$0")/lib.sh"
trainers="$(cd "$(dirname "$0")/../trainers" && pwd)"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir trainers_readers)

# The demo input with ids a file name cannot hold as they are, two samples without an id, and one
# sample (the 120-token s3) over --max-seq-len, skipped: export rows then differ from indices.
"$PYTHON" - "$model/input.jsonl" "$work/input.jsonl" <<'PY'
import json, sys
ids = ["s0", None, "a/b", "../up", "sp ace\u00a0*", None, "ok.id-6", ".."]
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as out:
    for line, sample_id in zip(src, ids):
        d = json.loads(line)
        d.pop("id")
        if sample_id is not None:
            d["id"] = sample_id
        out.write(json.dumps(d) + "\n")
PY

extract() {  # extract NAME ARGS...
  LOG="$work/$1.log"
  run 1 --model "$model" --data "$work/input.jsonl" --out "$work/$1" --samples-per-shard 3 \
    --max-seq-len 100 --on-long skip "${@:2}"
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "extraction $1 exited $RC"; }
}
for dtype in bf16 fp32 fp8; do
  extract "pre_$dtype" --dtype "$dtype" --layers 2,4,5 --final pre-norm
  extract "post_$dtype" --dtype "$dtype" --layers 2,4,5 --final post-norm
done
extract shifted_pre --layers 3,5,6 --final pre-norm
extract shifted_post --layers 3,5,6 --final post-norm
extract four_layers --layers 2,4,5,6 --final post-norm

# Our round to nearest even is torch's float32 -> bfloat16 conversion, ties and extremes included.
(cd "$trainers" && "$PYTHON" - <<'PY') || fail "f32_to_bf16_bits is not torch's rounding"
import numpy as np, torch
import h5source
rng = np.random.default_rng(1)
x = np.concatenate([rng.standard_normal(100000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 100000),
                    np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x00008000, 0x80018000, 0x7F800000, 0xFF800000],
                             np.uint32).view(np.float32)])
x = x.astype(np.float32)
want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
assert np.array_equal(h5source.f32_to_bf16_bits(x), want)
PY

# Every invocation below runs in one Python process (tests/trainers/run_cases.py): a case is
# EXIT-CODE, a string the output must hold ('-': any), the script and its arguments.
cases="$work/cases.tsv"
: > "$cases"
case_() { local IFS=$'\t'; echo "$*" >> "$cases"; }
both() { echo "$work/both_$1"; }
for dtype in bf16 fp32 fp8; do
  case_ 0 - synth_final_both.py "$work/pre_$dtype" "$work/post_$dtype" "$(both "$dtype")"
done
case_ 0 - synth_final_both.py "$work/shifted_pre" "$work/shifted_post" "$work/shifted_both"

# A good export of every format, from every storage dtype: the checker and each reader pass.
for dtype in bf16 fp32 fp8; do
  for fmt in speculators specforge modelopt; do
    x="$work/x_${fmt}_$dtype"
    case_ 0 - oracle_export.py --format "$fmt" "$(both "$dtype")" "$x"
    case_ 0 "ok: $fmt: 7 samples, each exactly once" check_export.py --format "$fmt" "$(both "$dtype")" "$x"
    case_ 0 "$fmt: 7 " "read_$fmt.py" "$x"
  done
done
case_ 0 "speculators: 7 rows, 7 samples loaded, 0 dropped" read_speculators.py "$work/x_speculators_bf16"
case_ 0 "modelopt: 7 samples" read_modelopt.py "$work/x_modelopt_bf16" --answer-only-loss
# A source with only the norm a format needs serves it; the other one is refused, naming the rerun.
case_ 0 - oracle_export.py --format speculators "$work/pre_bf16" "$work/x_spec_pre"
case_ 0 "ok: speculators" check_export.py --format speculators "$work/pre_bf16" "$work/x_spec_pre"
case_ 0 - oracle_export.py --format specforge "$work/post_bf16" "$work/x_sf_post"
case_ 0 "ok: specforge" check_export.py --format specforge "$work/post_bf16" "$work/x_sf_post"
case_ 1 "stores no pre-norm final state (rerun with --final pre-norm or --final both)" \
  check_export.py --format speculators "$work/post_bf16" "$work/x_spec_pre"
case_ 1 "stores no post-norm final state (rerun with --final post-norm or --final both)" \
  check_export.py --format specforge "$work/pre_bf16" "$work/x_sf_post"
case_ 1 "4 capture ids [2, 4, 5, 6]; the trainers need exactly 3" \
  check_export.py --format modelopt "$work/four_layers" "$work/x_modelopt_bf16"
# ModelOpt's loss_mask is optional: an export without it passes, but not --answer-only-loss.
case_ 0 - oracle_export.py --format modelopt --break no-loss-mask "$(both bf16)" "$work/x_mo_nomask"
case_ 0 "ok: modelopt" check_export.py --format modelopt "$(both bf16)" "$work/x_mo_nomask"
case_ 1 "requires a 'loss_mask' entry" read_modelopt.py "$work/x_mo_nomask" --answer-only-loss

# Broken exports: each is refused with the reason.
broken() {  # broken FORMAT KIND PATTERN
  case_ 0 - oracle_export.py --format "$1" --break "$2" "$(both bf16)" "$work/b_$1_$2"
  case_ 1 "$3" check_export.py --format "$1" "$(both bf16)" "$work/b_$1_$2"
}
broken speculators wrong-key "missing key(s) ['hidden_states']"
broken speculators wrong-norm "hidden_states[:, 3] (pre-norm final) differs from SRC sample 0 (it holds the post-norm final state)"
broken speculators missing-sample "data.jsonl: 6 rows, SRC has 7 samples"
broken speculators extra-sample "hs_7.safetensors: not the file of any row 0..6"
broken speculators wrong-dtype "token_ids is I32 in the header, expected I64"
broken speculators swap-slots "hidden_states[:, 0] differs from SRC sample 0 (it holds capture slot 2)"
broken speculators token-mismatch "token_ids differs from SRC"
case_ 1 "the trainer drops it" check_export.py --format speculators "$(both bf16)" "$work/b_speculators_token-mismatch"
case_ 1 "row 0 dropped" read_speculators.py "$work/b_speculators_token-mismatch"
broken speculators cut-file "tensors end at byte"
broken specforge cut-file "rows_0-2000/data_0.ckpt (SRC sample 0): cannot be loaded"
broken modelopt cut-file "torch.load(weights_only=True) fails"
broken specforge wrong-key "missing required offline feature keys ['aux_hidden_state']"
broken specforge wrong-norm "hidden_state (post-norm final) differs from SRC sample 0 (it holds the pre-norm final state)"
broken specforge missing-sample "no data_6.ckpt"
broken specforge extra-sample "data_0.ckpt.copy.ckpt: the trainer reads every .ckpt under DEST"
broken specforge wrong-dtype "aux_hidden_state has dtype torch.float32, expected torch.bfloat16"
broken specforge swap-slots "aux_hidden_state[0, :, 0H:1H] differs from SRC sample 0 (it holds capture slot 2)"
broken modelopt wrong-key "missing key(s) ['hidden_states']"
broken modelopt wrong-norm "hidden_states (post-norm final) differs from SRC sample 0 (it holds the pre-norm final state)"
broken modelopt missing-sample "no .pt with conversation_id"
broken modelopt extra-sample "conversation_id 'not-a-sample' is no SRC sample"
broken modelopt wrong-dtype "input_ids has dtype torch.int32, expected torch.int64"
broken modelopt swap-slots "aux_hidden_states[:, 0H:1H] differs from SRC sample 0 (it holds capture slot 2)"
broken modelopt bad-name "named '1.pt', expected '00000001.pt'"
# Rounding toward zero instead of to nearest even: visible from an fp32 source.
case_ 0 - oracle_export.py --format specforge --break truncate "$(both fp32)" "$work/b_truncate"
case_ 1 "aux_hidden_state[0, :, 0H:1H] differs from SRC sample 0: first at" \
  check_export.py --format specforge "$(both fp32)" "$work/b_truncate"
# A layer off by one: the export of a run with --layers 3,5,6 checked against --layers 2,4,5.
for fmt in speculators specforge modelopt; do
  case_ 0 - oracle_export.py --format "$fmt" "$work/shifted_both" "$work/b_${fmt}_shifted"
done
case_ 1 "hidden_states[:, 0] differs from SRC sample 0: first at" \
  check_export.py --format speculators "$(both bf16)" "$work/b_speculators_shifted"
case_ 1 "aux_hidden_state[0, :, 0H:1H] differs from SRC sample 0: first at" \
  check_export.py --format specforge "$(both bf16)" "$work/b_specforge_shifted"
case_ 1 "aux_hidden_states[:, 0H:1H] differs from SRC sample 0: first at" \
  check_export.py --format modelopt "$(both bf16)" "$work/b_modelopt_shifted"

# Draft vocabularies: a good one of each format passes, with ties at the cut (20 of the 7 samples'
# masked ids, 30 of which are masked twice or more) and with too few masked ids (300: filled);
# a broken one, or none, is refused with the reason.
for fmt in speculators specforge modelopt; do
  for n in 20 300; do
    case_ 0 - oracle_export.py --format "$fmt" --draft-vocab-size "$n" "$(both bf16)" "$work/v_${fmt}_$n"
    case_ 0 "draft vocabulary of $n as the trainer builds and loads it" \
      check_export.py --format "$fmt" --draft-vocab-size "$n" "$(both bf16)" "$work/v_${fmt}_$n"
  done
done
case_ 1 "d2t.npy: 300 entries, but --draft-vocab-size 20" \
  check_export.py --format speculators --draft-vocab-size 20 "$(both bf16)" "$work/v_speculators_300"
case_ 1 "no d2t.npy and t2d.npy" check_export.py --format speculators --draft-vocab-size 20 "$(both bf16)" \
  "$work/x_speculators_bf16"
case_ 1 "vocab_mapping.pt: torch.load fails" check_export.py --format specforge --draft-vocab-size 20 "$(both bf16)" \
  "$work/x_specforge_bf16"
case_ 1 "Draft vocab cache is required when draft_vocab_size (20) < vocab_size (512)" \
  check_export.py --format modelopt --draft-vocab-size 20 "$(both bf16)" "$work/x_modelopt_bf16"
broken_vocab() {  # broken_vocab FORMAT KIND PATTERN
  case_ 0 - oracle_export.py --format "$1" --draft-vocab-size 20 --break "$2" "$(both bf16)" "$work/bv_$1_$2"
  case_ 1 "$3" check_export.py --format "$1" --draft-vocab-size 20 "$(both bf16)" "$work/bv_$1_$2"
}
broken_vocab speculators vocab-ties "d2t.npy: d2t differs from what speculators' build_vocab_mappings_from_distribution"
broken_vocab speculators vocab-order "arange(N) + d2t does not list the ids t2d marks in ascending order"
broken_vocab speculators vocab-dtype "d2t.npy: dtype int32, speculators writes int64"
broken_vocab speculators vocab-size "t2d.shape[0] (511) must match verifier_vocab_size (512)"
broken_vocab specforge vocab-ties "d2t differs from what SpecForge's process_token_dict_to_mappings"
broken_vocab specforge vocab-order "arange(N) + d2t does not list the ids t2d marks in ascending order"
broken_vocab specforge vocab-dtype "d2t has dtype torch.int32, expected torch.int64"
broken_vocab specforge vocab-size "has invalid t2d shape; expected (512,)"
broken_vocab specforge vocab-rare "SpecForge's own derivation from DEST's files"
broken_vocab modelopt vocab-ties "d2t differs from what ModelOpt's calibrate_frequent_vocab"
broken_vocab modelopt vocab-order "d2t differs from what ModelOpt's calibrate_frequent_vocab"
broken_vocab modelopt vocab-dtype "dtype=torch.int32, expected shape=(20,) dtype=torch.int64"
broken_vocab modelopt vocab-size "got shape=(19,) dtype=torch.int64, expected shape=(20,)"

(cd "$trainers" && "$PYTHON" run_cases.py < "$cases") > "$work/cases.log" 2>&1 || { cat "$work/cases.log"; fail "a case failed"; }
grep -q "run_cases: $(grep -c . "$cases") cases, 0 failed" "$work/cases.log" || { cat "$work/cases.log"; fail "case count"; }
echo "trainers readers: ok"
