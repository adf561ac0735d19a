# verify exits 6 naming the problem when an output directory is damaged.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir verify_detects)
LOG="$work/run.log"
run 2 --model "$model" --data "$model/input.jsonl" --out "$work/good" --samples-per-shard 3
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
damaged() {  # damaged NAME PATTERN: copy, let the caller damage it, expect verify to fail
  rm -rf "$work/$1"
  cp -r "$work/good" "$work/$1"
}
expect_verify_fails() {
  set +e
  "$E3_BIN" verify "$work/$1" > "$work/$1.log" 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 6 ] || { cat "$work/$1.log"; fail "verify exit $rc on $1, expected 6"; }
  grep -q -- "$2" "$work/$1.log" || { cat "$work/$1.log"; fail "verify message lacks: $2"; }
}
damaged truncated; head -c 5000 "$work/good/shard-000001.h5" > "$work/truncated/shard-000001.h5"
expect_verify_fails truncated "shard-000001.h5: 5000 bytes, the manifest says"
# One byte changed in place (same size): only the checksum can tell.
damaged flipped
size=$(stat -c %s "$work/flipped/shard-000001.h5")
printf '\x5a' | dd of="$work/flipped/shard-000001.h5" bs=1 seek=$((size - 100)) conv=notrunc status=none
expect_verify_fails flipped "shard-000001.h5: checksum [0-9a-f]* differs from the manifest's"
damaged missing; rm "$work/missing/shard-000002.h5"
expect_verify_fails missing "shard-000002.h5: listed in the manifest but missing"
damaged stray; cp "$work/good/shard-000000.h5" "$work/stray/shard-000009.h5"
expect_verify_fails stray "shard-000009.h5: a shard file that no manifest lists"
damaged nomanifest; rm "$work/nomanifest/manifest.json"
expect_verify_fails nomanifest "no manifest.json"

# A FIFO under a shard's name is refused, not opened (opening it would wait forever).
damaged fifo; rm "$work/fifo/shard-000001.h5"; mkfifo "$work/fifo/shard-000001.h5"
set +e
timeout 120 "$E3_BIN" verify "$work/fifo" > "$work/fifo.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 6 ] || { cat "$work/fifo.log"; fail "verify exit $rc on a FIFO shard, expected 6"; }
grep -q "shard-000001.h5: is a FIFO, not a regular file" "$work/fifo.log" || { cat "$work/fifo.log"; fail "FIFO not named"; }

# Under mpirun each rank reads its share (shard index % ranks); rank 0 prints every problem,
# one line each, and all ranks exit 6 together: no MPI_Abort.
damaged two
for f in shard-000000.h5 shard-000001.h5; do
  size=$(stat -c %s "$work/two/$f")
  printf '\x5a' | dd of="$work/two/$f" bs=1 seek=$((size - 100)) conv=notrunc status=none
done
set +e
$E3_MPIRUN -np 2 "$E3_BIN" verify --threads 1 "$work/two" > "$work/two.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 6 ] || { cat "$work/two.log"; fail "verify under 2 ranks: exit $rc, expected 6"; }
[ "$(grep -c "critical:" "$work/two.log")" -eq 2 ] || { cat "$work/two.log"; fail "expected 2 critical lines"; }
grep -q "critical: rank 0: verify failed: .*shard-000000.h5: checksum" "$work/two.log" &&
  grep -q "critical: rank 1: verify failed: .*shard-000001.h5: checksum" "$work/two.log" ||
  { cat "$work/two.log"; fail "each rank's problem is not reported by rank 0"; }
grep -q "MPI_ABORT was invoked" "$work/two.log" && { cat "$work/two.log"; fail "verify under 2 ranks aborted"; }
set +e
$E3_MPIRUN -np 2 "$E3_BIN" verify "$work/good" > "$work/good2.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 0 ] || { cat "$work/good2.log"; fail "verify of a good output under 2 ranks: exit $rc"; }
[ "$(grep -c ": ok: 3 shards, 8 samples" "$work/good2.log")" -eq 1 ] || { cat "$work/good2.log"; fail "not one ok line"; }
tail -n 1 "$work/good2.log" | grep -q "read [0-9.]* GB of 3 shard files in .* s: [0-9]* MB/s (2 ranks x [0-9]* threads)" ||
  { cat "$work/good2.log"; fail "the last line does not give the speed"; }
set +e
"$E3_BIN" verify --threads 0 "$work/good" > "$work/threads0.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "verify --threads must be positive" "$work/threads0.log" ||
  { cat "$work/threads0.log"; fail "verify --threads 0: exit $rc"; }

# A partial run is not a pass: `verify && train` must not train on part of the data.
damaged partial
python3 - "$work/partial/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["complete"] = False
m["shards"] = [s for s in m["shards"] if s["shard_index"] != 2]
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
rm "$work/partial/shard-000002.h5"
expect_verify_fails partial "the run is not complete: 6 of 8 input samples accounted for (6 stored, 0 skipped); rerun the same command"
"$E3_BIN" verify --allow-incomplete "$work/partial" > "$work/partial.allowed.log" 2>&1 ||
  { cat "$work/partial.allowed.log"; fail "verify --allow-incomplete failed on a partial run"; }
grep -q "6 of 8 input samples accounted for (run not complete)" "$work/partial.allowed.log" ||
  { cat "$work/partial.allowed.log"; fail "verify --allow-incomplete does not say the run is partial"; }

# A directory that is no output directory at all is called that, not a broken run.
mkdir -p "$work/elsewhere"
echo notes > "$work/elsewhere/notes.txt"
set +e
(cd "$work/elsewhere" && "$E3_BIN" verify .) > "$work/elsewhere.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 6 ] || { cat "$work/elsewhere.log"; fail "verify . on a non-output directory: exit $rc, expected 6"; }
grep -q "critical: rank 0: verify failed: \. is not an eagle3_extract output directory: no manifest.json and no shard-\*.h5 files" \
  "$work/elsewhere.log" || { cat "$work/elsewhere.log"; fail "verify . does not say it is no output directory"; }

# A hand-edited manifest that verify rejects must not let a rerun call the run complete: the
# rerun refuses (exit 5), naming the problem, before any compute.
rerun_refused() {  # rerun_refused NAME PATTERN PYTHON-EDIT
  damaged "$1"
  python3 - "$work/$1/manifest.json" "$3" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
  expect_verify_fails "$1" .
  LOG="$work/$1.rerun.log"
  run 2 --model "$model" --data "$model/input.jsonl" --out "$work/$1" --samples-per-shard 3
  expect_failure 5 "$2" "$work/none"
  grep -q "critical: .*eagle3_extract verify.*move the directory aside" "$LOG" || { cat "$LOG"; fail "$1: no advice"; }
  grep -q "ready on" "$LOG" && { cat "$LOG"; fail "$1: the model was loaded before the refusal"; }
  return 0
}
rerun_refused twice "output error: .*manifest.json: sample 00000002 appears twice: in shard-000000.h5 and shard-000001.h5" \
  'm["shards"][1]["samples"].insert(0, 2)'
rerun_refused swapped "output error: .*manifest.json: shard-000000.h5 has shard_index 1, which is the index of shard-000001.h5" \
  'a, b = m["shards"][0], m["shards"][1]; a["shard_index"], b["shard_index"] = b["shard_index"], a["shard_index"]'
