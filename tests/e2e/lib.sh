# Shared helpers of the end-to-end tests. CTest sets E3_BIN, E3_GOLDEN_CHECK, E3_MPIRUN
# (with its flags), E3_GOLDEN_DIR and E3_WORK.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

# Open MPI 4.1 makes its session directory (/tmp/ompi.HOST.UID) by checking, then creating, so a
# launch fails ("A call to mkdir was unable to create the desired directory ... File exists";
# open-mpi/ompi#8510) when another makes it at the same instant, as two tests under `ctest -j`
# can. Each test script's launches, mpirun's and the program's own, get a directory of their own.
if [ -z "${OMPI_MCA_orte_tmpdir_base:-}" ]; then
  export OMPI_MCA_orte_tmpdir_base="${E3_WORK:-${TMPDIR:-/tmp}}/ompi_session/$$"
fi

# Debian's Python, which has the Debian packages the tests read HDF5 with (python3-h5py,
# python3-numpy); a python3 earlier on PATH (pyenv, a venv) may not.
PYTHON=${E3_PYTHON:-/usr/bin/python3}

# A golden case's directory: the project's own (tests/golden), else the shared oracle's.
golden_dir() {
  if [ -d "$E3_GOLDEN_DIR/$1" ]; then echo "$E3_GOLDEN_DIR/$1"; else echo "$E3_SHARED_GOLDEN_DIR/$1"; fi
}

# A fresh work directory named after the calling test.
fresh_dir() {
  local d="$E3_WORK/$1"
  rm -rf "$d"
  mkdir -p "$d"
  echo "$d"
}

# 0,1,...,L-1 for a checkpoint directory.
all_layer_ids() {
  local L
  L=$(grep -o '"num_hidden_layers": *[0-9]*' "$1/config.json" | head -1 | grep -o '[0-9]*$')
  seq -s, 0 $((L - 1))
}

# run NP ARGS...: the binary under mpirun; output to $LOG, exit code in $RC.
run() {
  local np=$1
  shift
  set +e
  # shellcheck disable=SC2086
  $E3_MPIRUN -np "$np" "$E3_BIN" "$@" > "$LOG" 2>&1
  RC=$?
  set -e
}

# expect_failure CODE PATTERN: the last run exited with CODE, printed PATTERN, printed
# exactly one critical line, and left no final-named shard behind.
expect_failure() {
  local code=$1 pattern=$2 out=$3
  [ "$RC" -eq "$code" ] || { cat "$LOG"; fail "exit code $RC, expected $code"; }
  grep -q -- "$pattern" "$LOG" || { cat "$LOG"; fail "output lacks: $pattern"; }
  local n
  n=$(grep -c "critical:" "$LOG" || true)
  [ "$n" -eq 1 ] || { cat "$LOG"; fail "$n critical lines, expected exactly 1"; }
  if compgen -G "$out/*.h5" > /dev/null; then fail "a final-named shard was left in $out"; fi
}

# same_samples REF DIR WHAT: every shard of REF has a twin in DIR holding the same /samples,
# value for value, and the same /token_counts where REF has them (compared as h5dump prints
# them: h5diff calls tables of different lengths "not comparable" and exits 0).
same_samples() {
  local f
  for f in "$1"/shard-*.h5; do
    h5diff "$f" "$2/$(basename "$f")" /samples /samples > /dev/null || fail "$3: $(basename "$f") differs"
    if h5ls "$f/token_counts" > /dev/null 2>&1; then
      cmp -s <(h5dump -d /token_counts "$f" | tail -n +2) <(h5dump -d /token_counts "$2/$(basename "$f")" | tail -n +2) ||
        fail "$3: $(basename "$f"): /token_counts differ"
    fi
  done
}

# rerun_completes NP OUT WHAT ARGS...: a rerun into OUT (log in OUT.rerun.log) exits 0, keeps
# some samples of the interrupted run, passes verify, and matches $work/reference.
rerun_completes() {
  local np=$1 out=$2 what=$3
  shift 3
  LOG="$out.rerun.log"
  run "$np" "$@" --out "$out"
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "rerun after $what exited $RC"; }
  grep -qE "done: [0-9]+ samples computed now, [1-9][0-9]* done before" "$LOG" || { cat "$LOG"; fail "$what: nothing was kept"; }
  "$E3_BIN" verify "$out" > /dev/null || fail "$what: verify after the rerun"
  same_samples "$work/reference" "$out" "$what and its rerun against an uninterrupted run"
}
