# The sbatch scripts of jobs/slurm under a fake Slurm (tests/e2e/fake_slurm: sbatch, srun and
# scontrol with the SLURM_* variables of a real job, mpirun underneath): one node, several
# nodes, an array over --part, and a time limit that stops the job with the resumable exit
# code, after which the script requeues it and the next start completes the dataset.
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

# One node, with the time limit coming near once a shard is committed.
submit one "$scripts/eagle3_1node.sbatch" "$model" "$work/data.jsonl" "$work/one" "${flags[@]}"
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
  grep -q "\[r$r/2 tp$r dp0\] info: eagle3_extract .* up: host .*, CUDA_VISIBLE_DEVICES=$r" "$work/one.out" ||
    { cat "$work/one.out"; fail "no startup line of rank $r with its GPU under srun"; }
  [ -s "$work/one/logs/rank-0000$r.log" ] || fail "no per-rank log file for rank $r"
done
"$E3_BIN" verify "$work/one" > /dev/null || fail "verify of the one-node job"

# Two nodes of 2 tasks: TP 2 inside a node, one DP group per node.
submit nodes "$scripts/eagle3_nodes.sbatch" "$model" "$work/data.jsonl" "$work/nodes" "${flags[@]}"
job_output > "$work/nodes.out"
grep -q "\[r3/4 tp1 dp1\] info: eagle3_extract .* up: host .*, CUDA_VISIBLE_DEVICES=1" "$work/nodes.out" ||
  { cat "$work/nodes.out"; fail "rank 3 is not TP 1 of DP group 1 on its node's GPU 1"; }
grep -q "over 2 DP groups" "$work/nodes.out" || { cat "$work/nodes.out"; fail "not 2 DP groups"; }
"$E3_BIN" verify "$work/nodes" > /dev/null || fail "verify of the two-node job"

# An array of 3 tasks over --part, sbatch --array overriding the script's.
submit array --array=1-3 "$scripts/eagle3_array.sbatch" "$model" "$work/data.jsonl" "$work/array" "${flags[@]}"
job_output > "$work/array.out"
for p in 0 1 2; do
  [ -e "$work/array/manifest.part-000$p-of-0003.json" ] || { cat "$work/array.out"; fail "no manifest of part $p/3"; }
done
"$E3_BIN" verify "$work/array" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify of the array's output"; }
grep -q "300 of 300 input samples accounted for, 3 of 3 parts present$" "$work/verify.log" ||
  { cat "$work/verify.log"; fail "the array did not cover the dataset"; }

# All three agree with each other, value for value.
same_samples "$work/one" "$work/array" "the array against one node"
