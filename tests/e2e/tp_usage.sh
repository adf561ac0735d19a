# A --tp that does not divide the ranks is the same usage error on every rank: the job says it
# in exactly one critical line (rank 0's), exits 2, and writes nothing.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir tp_usage)
LOG="$work/run.log"
run 2 --model "$model" --data "$model/input.jsonl" --out "$work/out" --tp 4
expect_failure 2 "usage error: --tp 4 does not divide the 2 MPI ranks of this job" "$work/out"
[ ! -e "$work/out" ] || fail "--out was created for a refused job"
