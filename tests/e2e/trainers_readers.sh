# The trainers' readers and check_export.py (tests/trainers) against real output: a reference
# export (the test oracle) of each format passes for bf16, fp32 and fp8 sources, and every kind
# of broken export (wrong key, a layer off by one, the wrong final norm, a missing or an extra
# sample, a wrong dtype, swapped slots, truncation instead of rounding, a token-id mismatch, a
# bad file name) makes the checker fail, naming the problem.
source "$(dirname "$0")/lib.sh"
trainers="$(cd "$(dirname "$0")/../trainers" && pwd)"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir trainers_readers)
py() { "$PYTHON" "$trainers/$1" "${@:2}"; }

# The demo input with ids a file name cannot hold as they are, two samples without an id, and one
# sample (the 120-token s3) over --max-seq-len, skipped: export rows then differ from indices.
"$PYTHON" - "$model/input.jsonl" "$work/input.jsonl" <<'PY'
import json, sys
ids = ["s0", None, "a/b", "../up", "\u0001ctl", None, "ok.id-6", ".."]
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
  py synth_final_both.py "$work/pre_$dtype" "$work/post_$dtype" "$work/both_$dtype"
done
extract shifted_pre --layers 3,5,6 --final pre-norm
extract shifted_post --layers 3,5,6 --final post-norm
extract four_layers --layers 2,4,5,6 --final post-norm
py synth_final_both.py "$work/shifted_pre" "$work/shifted_post" "$work/shifted_both"

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

# A good export of every format, from every storage dtype: the checker and each reader pass.
for dtype in bf16 fp32 fp8; do
  for fmt in speculators specforge modelopt; do
    py oracle_export.py --format "$fmt" "$work/both_$dtype" "$work/x_${fmt}_$dtype"
    py check_export.py --format "$fmt" "$work/both_$dtype" "$work/x_${fmt}_$dtype" > "$work/check.log" 2>&1 ||
      { cat "$work/check.log"; fail "check_export refuses the reference $fmt export of $dtype"; }
    grep -q "ok: $fmt: 7 samples, each exactly once" "$work/check.log" || { cat "$work/check.log"; fail "$fmt $dtype: report"; }
    py "read_$fmt.py" "$work/x_${fmt}_$dtype" > "$work/read.log" 2>&1 || { cat "$work/read.log"; fail "read_$fmt.py fails on $dtype"; }
  done
done
py read_speculators.py "$work/x_speculators_bf16" | grep -q "speculators: 7 rows, 7 samples loaded, 0 dropped" ||
  fail "read_speculators report"
py read_modelopt.py "$work/x_modelopt_bf16" --answer-only-loss | grep -q "modelopt: 7 samples" || fail "read_modelopt report"
# A source with only the norm a format needs serves it; the other one is refused, naming the rerun.
py oracle_export.py --format speculators "$work/pre_bf16" "$work/x_spec_pre"
py check_export.py --format speculators "$work/pre_bf16" "$work/x_spec_pre" > /dev/null || fail "pre-norm source, speculators"
py oracle_export.py --format specforge "$work/post_bf16" "$work/x_sf_post"
py check_export.py --format specforge "$work/post_bf16" "$work/x_sf_post" > /dev/null || fail "post-norm source, specforge"
expect_check() {  # expect_check FORMAT SRC DEST PATTERN: check_export exits 1 and prints PATTERN
  set +e
  py check_export.py --format "$1" "$2" "$3" > "$work/check.log" 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 1 ] || { cat "$work/check.log"; fail "check_export --format $1 $3 exited $rc, expected 1"; }
  grep -qF -- "$4" "$work/check.log" || { cat "$work/check.log"; fail "check_export --format $1 $3 lacks: $4"; }
}
expect_check speculators "$work/post_bf16" "$work/x_spec_pre" "stores no pre-norm final state (rerun with --final pre-norm or --final both)"
expect_check specforge "$work/pre_bf16" "$work/x_sf_post" "stores no post-norm final state (rerun with --final post-norm or --final both)"
expect_check modelopt "$work/four_layers" "$work/x_modelopt_bf16" "4 capture ids [2, 4, 5, 6]; the trainers need exactly 3"
# ModelOpt's loss_mask is optional: an export without it passes.
py oracle_export.py --format modelopt --break no-loss-mask "$work/both_bf16" "$work/x_mo_nomask"
py check_export.py --format modelopt "$work/both_bf16" "$work/x_mo_nomask" > /dev/null || fail "modelopt without loss_mask"

# Broken exports: each is refused with the reason.
broken() {  # broken FORMAT KIND PATTERN
  py oracle_export.py --format "$1" --break "$2" "$work/both_bf16" "$work/b_$1_$2"
  expect_check "$1" "$work/both_bf16" "$work/b_$1_$2" "$3"
}
broken speculators wrong-key "missing key(s) ['hidden_states']"
broken speculators wrong-norm "hidden_states[:, 3] (pre-norm final) differs from SRC sample 0 (it holds the post-norm final state)"
broken speculators missing-sample "data.jsonl: 6 rows, SRC has 7 samples"
broken speculators extra-sample "hs_7.safetensors: not the file of any row 0..6"
broken speculators wrong-dtype "token_ids is I32 in the header, expected I64"
broken speculators swap-slots "hidden_states[:, 0] differs from SRC sample 0 (it holds capture slot 2)"
broken speculators token-mismatch "token_ids differs from SRC"
broken speculators token-mismatch "the trainer drops it"
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
py oracle_export.py --format specforge --break truncate "$work/both_fp32" "$work/b_truncate"
expect_check specforge "$work/both_fp32" "$work/b_truncate" "aux_hidden_state[0, :, 0H:1H] differs from SRC sample 0: first at"
# A layer off by one: the export of a run with --layers 3,5,6 checked against --layers 2,4,5.
shifted() {  # shifted FORMAT PATTERN
  py oracle_export.py --format "$1" "$work/shifted_both" "$work/b_$1_shifted"
  expect_check "$1" "$work/both_bf16" "$work/b_$1_shifted" "$2"
  if grep -q "final) differs" "$work/check.log"; then cat "$work/check.log"; fail "$1: the final state differs too"; fi
}
shifted speculators "hidden_states[:, 0] differs from SRC sample 0: first at"
shifted specforge "aux_hidden_state[0, :, 0H:1H] differs from SRC sample 0: first at"
shifted modelopt "aux_hidden_states[:, 0H:1H] differs from SRC sample 0: first at"
echo "trainers readers: ok"
