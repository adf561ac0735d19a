# A full disk and a read-only --out: a clear error naming the path before any compute (a
# free-space check against the estimated output), and, when the disk fills during the run,
# an output error that keeps every committed shard, so that a rerun with room completes.
# Needs a small tmpfs: as root (CI) it mounts one; elsewhere it says why it cannot run.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir disk)
small="$work/small"
mkdir -p "$small"
if ! mount -t tmpfs -o size=8m tmpfs "$small" 2> "$work/mount.err"; then
  echo "SKIP: cannot mount a tmpfs here ($(cat "$work/mount.err")); run the suite as root"
  exit 77
fi
trap 'umount "$small" 2> /dev/null || true' EXIT
# 400 samples of 40 tokens: about 16 MB of bf16 states for 3 ids + final, 20 MB estimated.
for i in $(seq 0 399); do
  printf '{"id": "d%d", "input_ids": [%s]}\n' "$i" "$(seq -s, $((i % 50 + 3)) $((i % 50 + 42)))"
done > "$work/data.jsonl"
args=(--model "$model" --data "$work/data.jsonl" --tp 2 --samples-per-shard 10 --max-tokens-per-step 120
      --max-seq-len 120)

LOG="$work/reference.log"
run 2 "${args[@]}" --out "$work/reference"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "reference run exited $RC"; }

# Too little room: refused before any compute, naming --out and both sizes.
LOG="$work/precheck.log"
run 2 "${args[@]}" --out "$small/out"
expect_failure 5 "output error: --out $small/out has 0.01 GB free, but this run will write about 0.02 GB" "$small/out"
grep -q "ready on" "$LOG" && { cat "$LOG"; fail "the model was loaded before the space check"; }

# Told to go on anyway, the disk fills mid-run: an output error with the reason, every shard
# written before stays whole and verified, and a rerun with room completes the dataset.
LOG="$work/fills.log"
run 2 "${args[@]}" --out "$small/out" --no-space-check
[ "$RC" -eq 5 ] || { cat "$LOG"; fail "disk full mid-run: exit code $RC, expected 5"; }
grep -q "critical: .*the file system is full" "$LOG" || { cat "$LOG"; fail "no disk-full message"; }
[ "$(grep -c critical: "$LOG")" -eq 1 ] || { cat "$LOG"; fail "more than one critical line"; }
kept=$(ls "$small/out"/shard-*.h5 2> /dev/null | wc -l)
[ "$kept" -ge 1 ] || { cat "$LOG"; fail "no shard was committed before the disk filled"; }
"$E3_BIN" verify --allow-incomplete "$small/out" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify after the disk filled"; }
mount -o remount,size=64m "$small"
rerun_completes 2 "$small/out" "the disk filled" "${args[@]}"

# A read-only file system: refused at once, naming the path and the reason.
mkdir -p "$small/ro"
mount -o remount,ro "$small"
LOG="$work/readonly.log"
run 2 "${args[@]}" --out "$small/ro"
expect_failure 5 "output error: --out $small/ro is not writable: Read-only file system" "$small/ro"

# Export into a read-only DEST: an output error (exit code 5) naming DEST, not an internal one.
LOG="$work/export_readonly.log"
run 1 export --format modelopt "$work/reference" "$small/ro"
expect_failure 5 "export DEST $small/ro is not writable: Read-only file system" "$small/ro"
# Export into a DEST with too little room: refused before anything is written into it, naming
# DEST and both sizes; --no-space-check starts it anyway (and the disk then fills: exit code 5).
mount -o remount,rw,size=24m "$small"
rm -rf "$small/ro"
LOG="$work/export_space.log"
run 1 export --format modelopt "$work/reference" "$small/dest"
expect_failure 5 "export: DEST $small/dest has [0-9.]* GB free, but this export will write about [0-9.]* GB" "$small/dest"
[ -z "$(ls -A "$small/dest")" ] || fail "a refused export wrote into DEST: $(ls -A "$small/dest")"
LOG="$work/export_fills.log"
run 1 export --format modelopt --no-space-check "$work/reference" "$small/dest"
[ "$RC" -eq 5 ] || { cat "$LOG"; fail "export into a full DEST with --no-space-check: exit code $RC, expected 5"; }
# The write that failed (on a shard's write-behind thread) is reported as itself, once, and the
# failed shards' temporary files are removed.
grep -q "critical: .*output error: cannot write $small/dest/.*\.partial (writing .*): No space left on device" "$LOG" ||
  { cat "$LOG"; fail "export into a full DEST: no disk-full message naming the file"; }
[ "$(grep -c critical: "$LOG")" -eq 1 ] || { cat "$LOG"; fail "export into a full DEST: more than one critical line"; }
left=$(find "$small/dest" -name '*.partial')
[ -z "$left" ] || fail "export into a full DEST left temporary files: $left"
echo ok
