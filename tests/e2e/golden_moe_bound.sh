# golden_check --moe-bf16 (the per-token bound for MoE models in bf16, ../shared/golden/README.md)
# against outputs altered on purpose: a few wrong tokens (a flipped expert) pass it and fail the
# dense bound; a wrong token in more than 10% of the tokens, or a small error on every token, fails.
source "$(dirname "$0")/lib.sh"
case_name=s_dsv3_group
dir=$(golden_dir "$case_name")
work=$(fresh_dir golden_moe_bound)
ids=$(all_layer_ids "$dir")
LOG="$work/run.log"
run 1 --model "$dir" --data "$dir/input.jsonl" --out "$work/out" --layers "$ids" --final post-norm --dtype fp32
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
"$E3_GOLDEN_CHECK" "$work/out" "$dir" --layers "$ids" --final post-norm --moe-bf16 || fail "exact output fails --moe-bf16"

# perturb SRC DST FRACTION SCALE: tokens (a FRACTION of each sample's, at least one) of layer
# slot 1 get relative noise SCALE; the rest stays as computed.
perturb() {
  rm -rf "$2"
  cp -r "$1" "$2"
  "$PYTHON" - "$2" "$3" "$4" <<'PY'
import glob, sys
import h5py, numpy as np
out, fraction, scale = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rng = np.random.default_rng(0)
for path in glob.glob(out + "/*.h5"):
    with h5py.File(path, "r+") as f:
        for name in f["samples"]:
            ds = f["samples"][name]["hidden_states"]
            hs = ds[...]
            T = hs.shape[0]
            rows = range(T) if fraction >= 1 else rng.choice(T, max(1, int(T * fraction)), replace=False)
            for t in rows:
                row = hs[t, 1]
                hs[t, 1] = row + scale * np.linalg.norm(row) / np.sqrt(row.size) * rng.standard_normal(row.size)
            ds[...] = hs
PY
}
check() {  # check DIR EXPECT(pass|fail) WHAT [golden_check options]
  local d=$1 expect=$2 what=$3
  shift 3
  set +e
  "$E3_GOLDEN_CHECK" "$d" "$dir" --layers "$ids" --final post-norm "$@" > "$work/check.log" 2>&1
  local rc=$?
  set -e
  if [ "$expect" = pass ]; then [ "$rc" -eq 0 ] || { cat "$work/check.log"; fail "$what: should pass"; }
  else [ "$rc" -ne 0 ] || { cat "$work/check.log"; fail "$what: should fail"; }; fi
}
# One token in 20 flipped (off by 50%): the MoE bound holds, the dense one does not.
"$PYTHON" -c 'import h5py' || fail "python3-h5py is needed (see the README's install line)"
perturb "$work/out" "$work/few" 0.05 0.5
check "$work/few" pass "5% of tokens off by 0.5, MoE bound" --moe-bf16
check "$work/few" fail "5% of tokens off by 0.5, dense bound" --tol 2e-2
# A fifth of the tokens off: more than 10%.
perturb "$work/out" "$work/many" 0.2 0.5
check "$work/many" fail "20% of tokens off by 0.5, MoE bound" --moe-bf16
grep -q "of tokens off by more than 0.1 (bound 10%)" "$work/check.log" || { cat "$work/check.log"; fail "message"; }
# Every token off by 3%: the median is over 2e-2.
perturb "$work/out" "$work/all" 1 0.03
check "$work/all" fail "every token off by 3%, MoE bound" --moe-bf16
grep -q "median per-token rel err" "$work/check.log" || { cat "$work/check.log"; fail "message"; }
echo "golden_moe_bound: ok"
