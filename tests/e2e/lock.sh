# One job per output directory (or per --part of it): a second job into the same place exits
# 5 naming the holder's host and pid, and touches nothing there; the first one completes and
# verifies. The lock file goes away however the job ends, and after kill -9 the file left
# behind is simply locked again by the rerun.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir lock)
for i in $(seq 0 199); do
  n=$((30 + i % 30))
  printf '{"id": "l%d", "input_ids": [%s]}\n' "$i" "$(seq -s, $((i % 97 + 3)) $((i % 97 + 2 + n)))"
done > "$work/data.jsonl"
args=(--model "$model" --data "$work/data.jsonl" --tp 2 --samples-per-shard 20 --max-tokens-per-step 64
      --max-seq-len 64 --layers 1,4,7 --dtype fp32)

launcher=""
# A failing check must not leave paused ranks behind: those of a launcher still running.
trap '[ -n "$launcher" ] && kill -0 "$launcher" 2> /dev/null && pkill -KILL -P "$launcher"; true' EXIT
no_lock_left() {  # no_lock_left DIR WHAT
  if compgen -G "$1/.lock*" > /dev/null; then ls -la "$1"; fail "$2: a lock file was left in $1"; fi
}
# start NAME OUT ARGS...: a job in the background (log $work/NAME.log, launcher pid $launcher),
# returned once its leader has logged the plan, that is, once it holds the lock.
start() {
  local name=$1 out=$2
  shift 2
  # Each job its own session directory of Open MPI's (lib.sh says why).
  OMPI_MCA_orte_tmpdir_base=$OMPI_MCA_orte_tmpdir_base/$name \
    $E3_MPIRUN -np 2 "$E3_BIN" "${args[@]}" "$@" --out "$out" > "$work/$name.log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 1200); do
    grep -q "info: plan:" "$work/$name.log" && break
    kill -0 "$launcher" 2> /dev/null || { cat "$work/$name.log"; fail "$name ended before its plan"; }
    sleep 0.05
  done
  grep -q "info: plan:" "$work/$name.log" || { cat "$work/$name.log"; fail "$name logged no plan"; }
  ranks=$(pgrep -P "$launcher" -f "^$E3_BIN " || true)  # this launcher's ranks, no one else's
  [ -n "$ranks" ] || fail "no rank of $name found"
  holder=$(grep "\[r0/2 " "$work/$name.log" | grep -o "up: host [^ ]* pid [0-9]*" | head -1)
  holder_host=$(echo "$holder" | cut -d' ' -f3)
  holder_pid=$(echo "$holder" | cut -d' ' -f5)
  [ -n "$holder_pid" ] || { cat "$work/$name.log"; fail "no startup line of rank 0 in $name"; }
}
finish() {  # finish NAME: the paused job resumes and must succeed
  # shellcheck disable=SC2086
  kill -CONT $ranks
  set +e
  wait "$launcher"
  local rc=$?
  set -e
  [ "$rc" -eq 0 ] || { cat "$work/$1.log"; fail "$1 exited $rc after it was resumed"; }
}
expect_refused() {  # expect_refused: the last run was refused, naming the paused holder
  [ "$RC" -eq 5 ] || { cat "$LOG"; fail "a second job into a busy directory exited $RC, expected 5"; }
  grep -q "critical: .*is in use by another job (host $holder_host, pid $holder_pid" "$LOG" ||
    { cat "$LOG"; fail "the refusal does not name host $holder_host and pid $holder_pid"; }
  [ "$(grep -c critical: "$LOG")" -eq 1 ] || { cat "$LOG"; fail "more than one critical line"; }
  grep -q "ready on" "$LOG" && { cat "$LOG"; fail "the refused job loaded the model"; }
  return 0
}

# Two jobs with the same settings into one --out: the first is paused while it holds the
# directory, the second is refused and leaves the first's temporary files alone.
out="$work/one"
start first "$out"
# shellcheck disable=SC2086
kill -STOP $ranks
echo partial > "$out/shard-000009.h5.tmp.999999"
LOG="$work/second.log"
run 2 "${args[@]}" --out "$out"
expect_refused
grep -q "if no such job is running any more, remove $out/.lock" "$LOG" || { cat "$LOG"; fail "no word on a stale lock"; }
[ -e "$out/shard-000009.h5.tmp.999999" ] || fail "the refused job removed a temporary file of the running one"
rm "$out/shard-000009.h5.tmp.999999"
finish first
"$E3_BIN" verify "$out" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify after the first job"; }
no_lock_left "$out" "a job that ended normally"

# Parts lock one by one: part 1/2 runs beside a paused part 0/2, a second part 0/2 is refused.
out="$work/parts"
start part0 "$out" --part 0/2
# shellcheck disable=SC2086
kill -STOP $ranks
[ -e "$out/.lock.part-0000-of-0002" ] || fail "part 0/2 holds no lock file of its own"
LOG="$work/part1.log"
run 2 "${args[@]}" --out "$out" --part 1/2
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "part 1/2 beside a running part 0/2 exited $RC"; }
LOG="$work/part0.again.log"
run 2 "${args[@]}" --out "$out" --part 0/2
expect_refused
finish part0
"$E3_BIN" verify "$out" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify of the parts"; }
grep -q "2 of 2 parts present$" "$work/verify.log" || { cat "$work/verify.log"; fail "the parts are not complete"; }
no_lock_left "$out" "parts"

# A signal (exit 75) and an error exit remove the lock file too.
out="$work/signal"
start signal "$out"
# shellcheck disable=SC2086
kill -TERM $ranks
set +e
wait "$launcher"
rc=$?
set -e
[ "$rc" -eq 75 ] || { cat "$work/signal.log"; fail "SIGTERM: exit code $rc, expected 75"; }
no_lock_left "$out" "a job stopped by a signal"
out="$work/error"
export E3_FAIL_AT_SAMPLE=30
LOG="$work/error.log"
run 2 "${args[@]}" --out "$out"
unset E3_FAIL_AT_SAMPLE
[ "$RC" -eq 1 ] || { cat "$LOG"; fail "injected failure: exit code $RC, expected 1"; }
[ -e "$out/manifest.json" ] || { cat "$LOG"; fail "the failed job never got to write"; }
no_lock_left "$out" "a job that failed"

# kill -9: the kernel drops the lock; the file left behind is locked again by the rerun.
out="$work/kill9"
start kill9 "$out"
# shellcheck disable=SC2086
kill -STOP $ranks
kill -KILL "$holder_pid"
# shellcheck disable=SC2086
kill -CONT $ranks 2> /dev/null || true
set +e
wait "$launcher"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "the job survived kill -9 of its leader"
[ -e "$out/.lock" ] || fail "kill -9 should leave the lock file (this test checks that it is taken over)"
LOG="$work/kill9.rerun.log"
run 2 "${args[@]}" --out "$out"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "rerun after kill -9 exited $RC"; }
"$E3_BIN" verify "$out" > /dev/null || fail "verify after the rerun"
no_lock_left "$out" "the rerun after kill -9"
