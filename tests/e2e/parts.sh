# Several jobs sharing one --out: --part I/P (or the position in a Slurm array) takes a
# deterministic slice of the shards; parts run at the same time without touching each
# other's files; verify sees the whole directory; the values equal those of one job.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir parts)
for i in $(seq 0 59); do
  printf '{"id": "p%d", "input_ids": [%s]}\n' "$i" "$(seq -s, $((i % 41 + 1)) $((i % 41 + 10 + i % 13)))"
done > "$work/data.jsonl"
# 6 samples a shard divide both halves of the input: the single job (1 plan group) and the two
# parts (2 plan groups) cut the same shards, so that their files compare by name.
args=(--model "$model" --data "$work/data.jsonl" --tp 2 --samples-per-shard 6 --max-tokens-per-step 64
      --max-seq-len 64 --dtype fp32)

LOG="$work/reference.log"
run 2 "${args[@]}" --out "$work/reference"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "reference run exited $RC"; }

# Two parts at once into one directory.
set +e
# Each launch its own session directory of Open MPI's (lib.sh says why).
OMPI_MCA_orte_tmpdir_base=$OMPI_MCA_orte_tmpdir_base/part0 \
  $E3_MPIRUN -np 2 "$E3_BIN" "${args[@]}" --out "$work/shared" --part 0/2 > "$work/part0.log" 2>&1 &
p0=$!
$E3_MPIRUN -np 2 "$E3_BIN" "${args[@]}" --out "$work/shared" --part 1/2 > "$work/part1.log" 2>&1
rc1=$?
wait $p0
rc0=$?
set -e
[ "$rc0" -eq 0 ] || { cat "$work/part0.log"; fail "part 0/2 exited $rc0"; }
[ "$rc1" -eq 0 ] || { cat "$work/part1.log"; fail "part 1/2 exited $rc1"; }
grep -q "part 0/2: the shards whose index % 2 == 0, manifest manifest.part-0000-of-0002.json" "$work/part0.log" ||
  { cat "$work/part0.log"; fail "part 0 does not say what it computes"; }
grep -q "plan: 5 shards" "$work/part0.log" || { cat "$work/part0.log"; fail "part 0 should plan shards 0,2,4,6,8"; }
grep -q "plan: 5 shards" "$work/part1.log" || { cat "$work/part1.log"; fail "part 1 should plan shards 1,3,5,7,9"; }
[ ! -e "$work/shared/manifest.json" ] || fail "a part wrote the single-job manifest"
"$E3_BIN" verify "$work/shared" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify of the shared directory"; }
grep -q "10 shards, 60 samples, .* 60 of 60 input samples accounted for, 2 of 2 parts present$" "$work/verify.log" ||
  { cat "$work/verify.log"; fail "verify does not see both parts complete"; }
same_samples "$work/reference" "$work/shared" "two parts against one job"

# A rerun of a part resumes it; a job cut another way is refused.
LOG="$work/part0.again.log"
run 2 "${args[@]}" --out "$work/shared" --part 0/2
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "rerun of part 0 exited $RC"; }
grep -q "done: 0 samples computed now, 30 done before" "$LOG" || { cat "$LOG"; fail "rerun of part 0 recomputed"; }
LOG="$work/three.log"
run 2 "${args[@]}" --out "$work/shared" --part 0/3
expect_failure 5 "is part 0/2 of a job cut in 2 parts, this job is part 0/3; all jobs sharing a directory need the same --part count" "$work/none"
run 2 "${args[@]}" --out "$work/shared"
expect_failure 5 "need the same --part count" "$work/none"

# A Slurm array of 3 tasks (--array=1-3): each task's position is its part.
for task in 1 3; do
  LOG="$work/array$task.log"
  SLURM_ARRAY_TASK_ID=$task SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=3 SLURM_ARRAY_TASK_COUNT=3 \
    run 2 "${args[@]}" --out "$work/array" --part slurm
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "array task $task exited $RC"; }
done
grep -q "part 2/3" "$work/array3.log" || { cat "$work/array3.log"; fail "task 3 of 1-3 is not part 2/3"; }
"$E3_BIN" verify --allow-incomplete "$work/array" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify with a part missing"; }
grep -q "2 of 3 parts present (run not complete)" "$work/verify.log" || { cat "$work/verify.log"; fail "a missing part went unnoticed"; }
LOG="$work/array2.log"
SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=3 SLURM_ARRAY_TASK_COUNT=3 \
  run 2 "${args[@]}" --out "$work/array" --part slurm
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "array task 2 exited $RC"; }
"$E3_BIN" verify "$work/array" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify of the array's output"; }
grep -q "60 of 60 input samples accounted for, 3 of 3 parts present$" "$work/verify.log" ||
  { cat "$work/verify.log"; fail "the array's output is not complete"; }

# Without --part, an array task is warned that it computes everything.
LOG="$work/nopart.log"
SLURM_ARRAY_TASK_ID=4 run 2 "${args[@]}" --out "$work/nopart"
grep -q "warning: this is task 4 of a Slurm array but no --part was given" "$LOG" || { cat "$LOG"; fail "no warning"; }
