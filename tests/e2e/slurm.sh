# The sbatch scripts of jobs/slurm under a fake Slurm (tests/e2e/fake_slurm: sbatch, srun and
# scontrol with the SLURM_* variables of a real job, mpirun underneath): one node, several
# nodes, an array over --part, and a time limit that stops the job with the resumable exit
# code, after which the script requeues it and the next start completes the dataset; a failed
# array task rerun alone as its own part; and GPU binding left to Slurm and the program.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
scripts="$(cd "$(dirname "$0")/../../jobs/slurm" && pwd)"
work=$(fresh_dir slurm)
export PATH="$(cd "$(dirname "$0")/fake_slurm" && pwd):$PATH"
export FAKE_TASKS_PER_NODE=2 E3_TP=2 E3_BIN
for i in $(seq 0 299); do
  printf '{"id": "s%d", "input_ids": [%s]}\n' "$i" "$(seq -s, $((i % 90 + 1)) $((i % 90 + 20 + i % 30)))"
done > "$work/data.jsonl"
flags=(--samples-per-shard 20 --max-tokens-per-step 128 --max-seq-len 128 --dtype fp32)

submit() {  # submit NAME SBATCH_ARGS...: a fresh fake Slurm for each submission
  export FAKE_SLURM_DIR="$work/$1.slurm"
  mkdir -p "$FAKE_SLURM_DIR"
  shift
  (cd "$work" && sbatch "$@") > "$FAKE_SLURM_DIR/submit.log"
}
job_output() { cat "$FAKE_SLURM_DIR"/job-*.out; }

# The program picks its GPU (local rank % visible GPUs); a script that set CUDA_VISIBLE_DEVICES
# from SLURM_LOCALID would hide every GPU from all but the first task where Slurm binds one per task.
if grep -n CUDA_VISIBLE_DEVICES "$scripts"/*.sbatch; then fail "an sbatch script sets CUDA_VISIBLE_DEVICES"; fi

# A binary that is not there: one line saying so, before anything is launched.
E3_BIN=$work/no_such_bin submit nobin "$scripts/eagle3_1node.sbatch" "$model" "$work/data.jsonl" "$work/nobin"
[ "$(cat "$FAKE_SLURM_DIR/job-1001.rc")" -eq 2 ] && job_output | grep -q "no_such_bin not found; put the bin/" &&
  [ ! -e "$FAKE_SLURM_DIR/srun.log" ] || { job_output; fail "a missing E3_BIN is not reported by the script"; }

# One node, with the time limit coming near once a shard is committed, on a site that binds
# one GPU to each task (each task sees only device 0).
FAKE_GPU_BIND=per-task submit one "$scripts/eagle3_1node.sbatch" "$model" "$work/data.jsonl" "$work/one" "${flags[@]}"
grep -q "srun --mpi=pmix" "$FAKE_SLURM_DIR/srun.log" || fail "the script does not launch with srun --mpi=pmix"
job_output > "$work/one.out"
grep -q "stopped by signal 10 after the current step" "$work/one.out" || { cat "$work/one.out"; fail "no graceful stop on SIGUSR1"; }
grep -q "requeueing job 1001 to resume" "$work/one.out" || { cat "$work/one.out"; fail "the script did not requeue on exit code 75"; }
grep -q "scontrol requeue 1001" "$FAKE_SLURM_DIR/scontrol.log" || fail "scontrol requeue was not called"
grep -q "job 1001 start 1 on" "$work/one.out" || { cat "$work/one.out"; fail "the job did not start again"; }
grep -qE "done: [0-9]+ samples computed now, [1-9][0-9]* done before, 0 skipped .*\(complete\)" "$work/one.out" ||
  { cat "$work/one.out"; fail "the requeued job did not resume and complete"; }
[ "$(cat "$FAKE_SLURM_DIR/job-1001.rc")" -eq 0 ] || fail "the requeued job's script exited $(cat "$FAKE_SLURM_DIR/job-1001.rc")"
for r in 0 1; do
  grep -q "\[r$r/2 tp$r dp0\] info: eagle3_extract .* up: host .*, local rank $r/2, .*, CUDA_VISIBLE_DEVICES=0$" \
    "$work/one.out" || { cat "$work/one.out"; fail "rank $r does not keep the one GPU that Slurm bound to it"; }
  [ -s "$work/one/logs/rank-0000$r.log" ] || fail "no per-rank log file for rank $r"
done
"$E3_BIN" verify "$work/one" > /dev/null || fail "verify of the one-node job"

# Two nodes of 2 tasks: TP 2 inside a node, one DP group per node.
submit nodes "$scripts/eagle3_nodes.sbatch" "$model" "$work/data.jsonl" "$work/nodes" "${flags[@]}"
job_output > "$work/nodes.out"
# No binding: the tasks see the GPUs this test sees (the fake nodes share one host, so the
# program's local rank, by host, is the world rank here).
seen=$(grep "\[r3/4 tp1 dp1\] info: eagle3_extract .* up: host " "$work/nodes.out") ||
  { cat "$work/nodes.out"; fail "rank 3 is not TP 1 of DP group 1"; }
if [ -z "${CUDA_VISIBLE_DEVICES+set}" ]; then
  [[ $seen != *", CUDA_VISIBLE_DEVICES="* ]] || fail "the script set CUDA_VISIBLE_DEVICES: $seen"
else
  [[ $seen == *", CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES" ]] || fail "the script changed CUDA_VISIBLE_DEVICES: $seen"
fi
grep -q "over 2 DP groups" "$work/nodes.out" || { cat "$work/nodes.out"; fail "not 2 DP groups"; }
"$E3_BIN" verify "$work/nodes" > /dev/null || fail "verify of the two-node job"

# An array of 3 tasks over --part, sbatch --array overriding the script's; task 2 (part 1/3)
# fails before it starts, as on a broken node.
printf '%s\n' '#!/bin/bash' '[ "$SLURM_ARRAY_TASK_ID" = 2 ] && { echo "flaky node: task 2 fails"; exit 1; }' \
  'exec "$REAL_BIN" "$@"' > "$work/flaky_bin"
chmod +x "$work/flaky_bin"
REAL_BIN=$E3_BIN E3_BIN=$work/flaky_bin submit array --array=1-3 "$scripts/eagle3_array.sbatch" "$model" \
  "$work/data.jsonl" "$work/array" "${flags[@]}"
job_output > "$work/array.out"
for p in 0 2; do
  [ -e "$work/array/manifest.part-000$p-of-0003.json" ] || { cat "$work/array.out"; fail "no manifest of part $p/3"; }
done
[ ! -e "$work/array/manifest.part-0001-of-0003.json" ] || fail "the failed task left a manifest"
set +e
"$E3_BIN" verify "$work/array" > "$work/verify.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 6 ] || { cat "$work/verify.log"; fail "verify of 2 of 3 parts exited $rc, expected 6"; }
grep -q "2 of 3 parts present; rerun the command of every part" "$work/verify.log" ||
  { cat "$work/verify.log"; fail "verify of 2 of 3 parts"; }

# Task 2 resubmitted alone is an array of one: --part slurm makes it part 0/1, which the
# directory of 3 parts refuses.
submit plain --array=2 "$scripts/eagle3_array.sbatch" "$model" "$work/data.jsonl" "$work/array" "${flags[@]}"
[ "$(cat "$FAKE_SLURM_DIR/job-1001.rc")" -eq 5 ] && job_output | grep -q "cut in 3 parts, this job is part 0/1" ||
  { job_output; fail "part 0/1 into a directory of 3 parts was not refused"; }
# E3_PART gives it the part it had.
E3_PART=1/3 submit rerun --array=2 "$scripts/eagle3_array.sbatch" "$model" "$work/data.jsonl" "$work/array" "${flags[@]}"
job_output > "$work/rerun.out"
[ "$(cat "$FAKE_SLURM_DIR/job-1001.rc")" -eq 0 ] || { cat "$work/rerun.out"; fail "the rerun of task 2 with E3_PART=1/3 failed"; }
grep -q "part-0001-of-0003" "$work/rerun.out" || { cat "$work/rerun.out"; fail "the rerun did not compute part 1/3"; }
# So does a --part after the script's arguments, over the script's own --part slurm (all done by now).
submit rerun_arg --array=2 "$scripts/eagle3_array.sbatch" "$model" "$work/data.jsonl" "$work/array" "${flags[@]}" --part 1/3
[ "$(cat "$FAKE_SLURM_DIR/job-1001.rc")" -eq 0 ] || { job_output; fail "the rerun of task 2 with --part 1/3 failed"; }
job_output | grep -q "0 samples computed now, 100 done before" || { job_output; fail "--part 1/3 did not find part 1 done"; }
"$E3_BIN" verify "$work/array" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify of the array's output"; }
grep -q "300 of 300 input samples accounted for, 3 of 3 parts present$" "$work/verify.log" ||
  { cat "$work/verify.log"; fail "the array did not cover the dataset"; }

# All three agree with each other, value for value.
same_samples "$work/one" "$work/array" "the array against one node"

# --tp and --log-dir after the script's arguments replace the script's own (E3_TP, OUT_DIR/logs)
# instead of repeating them, which the option parser refuses.
head -20 "$work/data.jsonl" > "$work/small.jsonl"
submit tp "$scripts/eagle3_1node.sbatch" "$model" "$work/small.jsonl" "$work/tp1" "${flags[@]}" --tp 1 \
  --log-dir "$work/tp1_logs"
[ "$(cat "$FAKE_SLURM_DIR/job-1001.rc")" -eq 0 ] || { job_output; fail "--tp 1 --log-dir DIR through the script failed"; }
job_output | grep -q "over 2 DP groups" || { job_output; fail "--tp 1 through the script did not make 2 DP groups"; }
[ -s "$work/tp1_logs/rank-00000.log" ] && [ ! -e "$work/tp1/logs" ] || fail "--log-dir DIR did not replace OUT_DIR/logs"
# A start that fails before writing anything (here an id past the model's layers) leaves no
# logs/ in OUT_DIR, nor an OUT_DIR that the script's run created.
for s in 1node nodes; do
  submit "bad_$s" "$scripts/eagle3_$s.sbatch" "$model" "$work/small.jsonl" "$work/bad_$s" "${flags[@]}" --layers 1,99
  rc=$(cat "$FAKE_SLURM_DIR/job-1001.rc")
  [ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] || { job_output; fail "--layers 1,99 through eagle3_$s.sbatch exited $rc"; }
  [ ! -e "$work/bad_$s" ] || fail "a failed start of eagle3_$s.sbatch left $(find "$work/bad_$s")"
done
# srun without the MPI plugin this Open MPI speaks starts each task as an MPI world of its own;
# srun's own count of tasks stops every one of them before it runs the whole job alone.
# (exec keeps the subshell's pid, which srun would give as SLURM_TASK_PID.)
rc=0
(export SLURM_SRUN_COMM_PORT=4242 SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 SLURM_TASK_PID=$BASHPID
  exec "$E3_BIN" --model "$model" --data "$work/small.jsonl" --out "$work/no_plugin" "${flags[@]}") \
  > "$work/no_plugin.log" 2>&1 || rc=$?
[ "$rc" -eq 8 ] && grep -q "the launcher started 2 processes, but MPI made this one a world of its own.*srun --mpi=pmix" \
  "$work/no_plugin.log" && [ ! -e "$work/no_plugin" ] ||
  { cat "$work/no_plugin.log"; fail "a task srun started without an MPI plugin ran alone (exit $rc)"; }
# The same variables in a program run from a shell that srun started (`srun -n 2 --pty bash`):
# not one of srun's tasks, so it runs.
SLURM_SRUN_COMM_PORT=4242 SLURM_STEP_NUM_TASKS=2 SLURM_TASK_PID=1 "$E3_BIN" verify "$work/one" > "$work/from_shell.log" 2>&1 ||
  { cat "$work/from_shell.log"; fail "verify from a shell that srun started was refused"; }

echo ok
