# Resume: a rerun keeps committed shards and computes only what is missing; a changed
# fingerprint is refused with the difference shown; leftovers of a killed run are removed.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir resume)
out="$work/out"
args=(--model "$model" --data "$model/input.jsonl" --out "$out" --samples-per-shard 3 --log-level info)

LOG="$work/first.log"
run 2 "${args[@]}"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "first run exited $RC"; }
[ "$(ls "$out"/*.h5 | wc -l)" -eq 3 ] || fail "expected 3 shards of 3, 3 and 2 samples"
cp -r "$out" "$work/reference"
"$E3_BIN" verify "$out" > /dev/null

LOG="$work/again.log"
run 2 "${args[@]}"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "rerun exited $RC"; }
grep -q "done: 0 samples computed now, 8 done before" "$LOG" || { cat "$LOG"; fail "rerun recomputed"; }
cmp "$out/shard-000001.h5" "$work/reference/shard-000001.h5" || fail "a committed shard was rewritten"

# A shard lost, plus what a killed run leaves: a partial temp file. Only 3 samples are redone.
rm "$out/shard-000001.h5"
echo partial > "$out/shard-000002.h5.tmp.12345"
LOG="$work/repair.log"
run 2 "${args[@]}"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "repair run exited $RC"; }
grep -q "done: 3 samples computed now, 5 done before" "$LOG" || { cat "$LOG"; fail "repair did not compute exactly the lost shard"; }
[ ! -e "$out/shard-000002.h5.tmp.12345" ] || fail "temp file of a killed run left in place"
"$E3_BIN" verify "$out" > /dev/null
# The redone shard holds the same values as before (same program, same TP).
h5diff "$out/shard-000001.h5" "$work/reference/shard-000001.h5" /samples /samples || fail "redone shard differs"

# Shards renamed into place after the last manifest write (a crash in between) are kept:
# with no manifest at all, the shards written under this fingerprint are found and trusted.
rm "$out/manifest.json"
LOG="$work/scan.log"
run 2 "${args[@]}"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "scan run exited $RC"; }
grep -q "done: 0 samples computed now, 8 done before" "$LOG" || { cat "$LOG"; fail "unlisted shards were not kept"; }
"$E3_BIN" verify "$out" > /dev/null

# A committed shard altered in place, same size (a disk error): a plain rerun compares sizes
# and keeps it; --resume-checksums reads it back, moves it aside and writes it again.
size=$(stat -c %s "$out/shard-000001.h5")
printf '\x5a' | dd of="$out/shard-000001.h5" bs=1 seek=$((size - 100)) conv=notrunc status=none
LOG="$work/altered.log"
run 2 "${args[@]}"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "rerun over an altered shard exited $RC"; }
grep -q "done: 0 samples computed now, 8 done before" "$LOG" || { cat "$LOG"; fail "a plain rerun read shards back"; }
LOG="$work/checksums.log"
run 2 "${args[@]}" --resume-checksums
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "--resume-checksums run exited $RC"; }
grep -q "shard-000001.h5: checksum [0-9a-f]* differs from the manifest's [0-9a-f]*; moved to .*shard-000001.h5.invalid and will be written again" "$LOG" ||
  { cat "$LOG"; fail "--resume-checksums did not find the altered shard"; }
grep -q "done: 3 samples computed now, 5 done before" "$LOG" || { cat "$LOG"; fail "the altered shard was not redone"; }
"$E3_BIN" verify "$out" > /dev/null || fail "verify after --resume-checksums"
h5diff "$out/shard-000001.h5" "$work/reference/shard-000001.h5" /samples /samples || fail "redone shard differs"

# Different settings into the same directory are refused, and the difference is shown.
LOG="$work/changed.log"
run 2 "${args[@]}" --dtype fp32
expect_failure 5 "dtype: bf16 (in the directory) vs fp32 (this run)" "$work/none"
run 2 "${args[@]}" --layers 1,2
expect_failure 5 "layers: \[2,4,5\] (in the directory) vs \[1,2\] (this run)" "$work/none"
