# --shard-size: shards stay within a byte cap; every DP group of the run that first plans a
# directory gets a shard; a resume with another -np keeps that plan; a changed --shard-size
# is refused as another run.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir shard_size)
# 40 samples of 40-79 tokens. States: capture ids 1,4,7 plus the final one, 128 wide, fp32:
# 2 KiB a token, about 120 KiB a sample.
for i in $(seq 0 39); do
  n=$((40 + i * 7 % 40))
  printf '{"id": "z%d", "input_ids": [%s]}\n' "$i" "$(seq -s, $((i % 97 + 3)) $((i % 97 + 2 + n)))"
done > "$work/data.jsonl"
args=(--model "$model" --data "$work/data.jsonl" --layers 1,4,7 --dtype fp32 --max-seq-len 128
      --max-tokens-per-step 256)
cap=$((1024 * 1024))
manifest_field() {  # manifest_field FILE KEY: a field of the manifest's fingerprint
  "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["fingerprint"][sys.argv[2]])' "$1" "$2"
}

# The byte cap, with --samples-per-shard far above it: several shards, none over 1 MiB, and
# shards full up to the cap, not cut short.
LOG="$work/cap.log"
run 1 "${args[@]}" --out "$work/cap" --shard-size 1M
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "run with --shard-size 1M exited $RC"; }
"$E3_BIN" verify "$work/cap" > /dev/null || fail "verify of the 1M shards"
shards=$(ls "$work/cap"/shard-*.h5 | wc -l)
[ "$shards" -ge 4 ] || fail "$shards shards of 1 MiB for about 4.8 MiB of states"
largest=0
for f in "$work/cap"/shard-*.h5; do
  size=$(stat -c %s "$f")
  [ "$size" -le "$cap" ] || fail "$(basename "$f") has $size bytes, over --shard-size 1M"
  [ "$size" -gt "$largest" ] && largest=$size
done
[ "$largest" -gt $((cap * 3 / 4)) ] || fail "the largest shard has $largest bytes: shards are cut far below the cap"
[ "$(manifest_field "$work/cap/manifest.json" shard_size)" = "$cap" ] || fail "the manifest does not record 1 MiB"
# Suffixes are powers of 1024: 1024K is the same run, so it resumes with nothing to do.
LOG="$work/cap.again.log"
run 1 "${args[@]}" --out "$work/cap" --shard-size 1024K
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "rerun with --shard-size 1024K exited $RC"; }
grep -q "nothing to do: all $shards shards committed" "$LOG" || { cat "$LOG"; fail "1024K is not 1M"; }

# A changed --shard-size is another run: refused, naming the field, touching nothing.
LOG="$work/changed.log"
run 1 "${args[@]}" --out "$work/cap" --shard-size 2M
expect_failure 5 "shard-size: 1048576 (in the directory) vs 2097152 (this run)" "$work/none"
# Nonsense sizes are usage errors.
for bad in 0 -1 1.5G 4GB; do
  LOG="$work/bad.log"
  run 1 "${args[@]}" --out "$work/bad" --shard-size "$bad"
  expect_failure 2 "--shard-size '$bad'" "$work/bad"
  [ ! -e "$work/bad" ] || fail "--shard-size $bad created --out"
done

# Fewer shards than DP groups leaves groups idle: 3 samples at -np 2 --tp 1 are 2 shards, one
# for each group, with the default --shard-size and --samples-per-shard.
head -3 "$work/data.jsonl" > "$work/three.jsonl"
LOG="$work/groups.log"
run 2 --model "$model" --data "$work/three.jsonl" --out "$work/groups" --layers 1,4,7 --dtype fp32 --tp 1 \
  --log-level debug
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "-np 2 --tp 1 on 3 samples exited $RC"; }
grep -q "plan: 2 shards .*(plan groups 2) over 2 DP groups" "$LOG" || { cat "$LOG"; fail "not 2 shards for 2 groups"; }
for g in 0 1; do
  grep -q "dp$g\] debug: committed shard-00000$g.h5" "$LOG" || { cat "$LOG"; fail "DP group $g wrote no shard"; }
done
[ "$(manifest_field "$work/groups/manifest.json" plan_groups)" = 2 ] || fail "the manifest does not record 2 groups"
"$E3_BIN" verify "$work/groups" > /dev/null || fail "verify of the 2-group output"

# The plan of the first run is kept whatever -np a resume has: 4 groups cut 40 samples into
# at least 4 shards; a resume with one group keeps those boundaries and computes only what
# is missing; the result is the same as an uninterrupted run's, shard for shard.
LOG="$work/four.log"
run 4 "${args[@]}" --tp 1 --out "$work/four"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "-np 4 run exited $RC"; }
cp -r "$work/four" "$work/reference"
rm "$work/four/shard-000001.h5" "$work/four/shard-000002.h5"
LOG="$work/four.resume.log"
run 1 "${args[@]}" --out "$work/four"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "resume with -np 1 exited $RC"; }
grep -q "keeping the shard plan of the first run: 4 groups" "$LOG" || { cat "$LOG"; fail "the first run's plan not kept"; }
grep -q "done: 20 samples computed now, 20 done before" "$LOG" || { cat "$LOG"; fail "the resume did not redo exactly 2 shards"; }
[ "$(ls "$work/four"/shard-*.h5 | wc -l)" -eq "$(ls "$work/reference"/shard-*.h5 | wc -l)" ] ||
  fail "the resume changed the number of shards"
"$E3_BIN" verify "$work/four" > /dev/null || fail "verify after the resume with another -np"
same_samples "$work/reference" "$work/four" "a resume with -np 1 of a -np 4 run"

# Another part keeps the plan of the part that came first, whatever its own -np: part 0/2 at
# 2 DP groups plans for 4 groups, part 1/2 at 1 group keeps those, and the parts fit together.
LOG="$work/part0.log"
run 2 "${args[@]}" --tp 1 --out "$work/parts" --part 0/2
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "part 0/2 exited $RC"; }
LOG="$work/part1.log"
run 1 "${args[@]}" --out "$work/parts" --part 1/2
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "part 1/2 exited $RC"; }
grep -q "keeping the shard plan of the first run: 4 groups (this run has 1 DP group x 2 parts)" "$LOG" ||
  { cat "$LOG"; fail "part 1 did not keep part 0's plan"; }
"$E3_BIN" verify "$work/parts" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify of the two parts"; }
grep -q "40 of 40 input samples accounted for, 2 of 2 parts present$" "$work/verify.log" ||
  { cat "$work/verify.log"; fail "the parts do not cover the input once"; }
same_samples "$work/reference" "$work/parts" "two parts against one -np 4 job"
