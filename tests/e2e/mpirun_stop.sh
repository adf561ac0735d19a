# Ctrl-C in mpirun's terminal: mpirun itself is signalled (the ranks are in process groups of
# their own). Open MPI 4.1 then sends every rank SIGCONT at once, SIGTERM after
# odls_base_sigkill_timeout seconds and SIGKILL as long after that. The leader says at once
# that the job is stopping, that committed shards are safe and how to resume; with the
# README's --mca odls_base_sigkill_timeout every rank finishes its step and commits; nothing
# committed is lost, the directory is not left locked, and a rerun completes the dataset with
# the values of an uninterrupted run. Steps are slowed (E3_STEP_DELAY_MS), as a large model's
# are, so that the signal comes mid-step and progress lines come between step boundaries.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir mpirun_stop)
# 24 samples of 41-79 tokens, one per step, four per shard.
for i in $(seq 0 23); do
  n=$((41 + (i * 7) % 39))
  printf '{"id": "m%d", "input_ids": [%s]}\n' "$i" "$(seq -s, $((i + 3)) $((i + 2 + n)))"
done > "$work/data.jsonl"
args=(--model "$model" --data "$work/data.jsonl" --tp 1 --samples-per-shard 4 --max-tokens-per-step 80
      --max-seq-len 80 --layers 1,4,7 --dtype fp32 --progress-interval 1)

LOG="$work/reference.log"
run 2 "${args[@]}" --out "$work/reference"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "reference run exited $RC"; }

out="$work/stopped"
LOG="$work/stopped.log"
# mpirun in a terminal of its own (a pty from script), where Ctrl-C is typed: the terminal
# sends SIGINT to mpirun's process group only, as in a user's shell.
mkfifo "$work/keys"
# shellcheck disable=SC2086
cmd=$(printf '%q ' $E3_MPIRUN --mca odls_base_sigkill_timeout 10 -np 2 "$E3_BIN" "${args[@]}" --out "$out")
set +e
E3_STEP_DELAY_MS=3000 script -qfec "$cmd" /dev/null < "$work/keys" > "$LOG" 2>&1 &
launcher=$!
exec 3> "$work/keys"
for _ in $(seq 1 1200); do compgen -G "$out/shard-*.h5" > /dev/null && break; sleep 0.1; done
compgen -G "$out/shard-*.h5" > /dev/null || { cat "$LOG"; fail "no shard was committed"; }
committed_before=$(cd "$out" && ls shard-*.h5)
# A shard is committed at a step's end: wait for a progress line after it that names a running
# step, so that Ctrl-C comes mid-step. Sent at the boundary, the stop could come before the next
# step started, with nothing computed for an unfinished shard (seen once on a loaded machine).
seen=$(wc -l < "$LOG")
for _ in $(seq 1 600); do
  tail -n +$((seen + 1)) "$LOG" | grep -qE 'info: progress: .*; step [0-9]+/[0-9]+ running for [0-9]+ s' && break
  sleep 0.01
done
sent=$(date +%s%N)
printf '\003' >&3
# mpirun holds back its ranks' output while it waits out its kill timeouts: the leader's line
# comes straight to the terminal, from its watcher thread, not at the end of the step (3 s).
latency_ms=
for _ in $(seq 1 600); do
  if grep -q 'eagle3_extract: stopping (SIGCONT' "$LOG"; then latency_ms=$((($(date +%s%N) - sent) / 1000000)); break; fi
  sleep 0.01
done
wait "$launcher"
RC=$?
exec 3>&-
set -e
[ -n "$latency_ms" ] || { cat "$LOG"; fail "the leader never said on the terminal that the job is stopping"; }
echo "the leader said it was stopping ${latency_ms} ms after Ctrl-C in mpirun's terminal"
[ "$latency_ms" -lt 2500 ] || { cat "$LOG"; fail "the stopping line came ${latency_ms} ms after Ctrl-C, not at once"; }
line=$(grep 'eagle3_extract: stopping (SIGCONT' "$LOG")
case $line in
  *"the shards already committed in $out are safe"*"Rerun the same command to resume"*"mpirun sends SIGTERM in 10 s and SIGKILL in 20 s"*) ;;
  *) fail "the stopping line does not say what is safe and how to resume: $line" ;;
esac
grep -q '\[r0/2 .*warning: stopping (SIGCONT' "$LOG" || { cat "$LOG"; fail "the stopping line is not in the log"; }
# Open MPI's mpirun returns 1 when it is signalled itself, whatever its ranks return.
[ "$RC" -eq 1 ] || { cat "$LOG"; fail "mpirun exited $RC, expected 1 (signalled itself)"; }
# Every rank stopped after its step (none was killed): the leader's last line says so.
last=$(grep '\[r0/2 ' "$LOG" | tail -1)
case $last in
  *"stopped by signal 18 after the current step (SIGCONT)"*"rerun the same command"*) ;;
  *) cat "$LOG"; fail "the leader's last line is not the resumable stop: $last" ;;
esac
grep -q '\[r1/2 .*' "$LOG" || fail "no line of rank 1"
# Progress came between step boundaries, naming the running step.
grep -qE '\[r0/2 .*info: progress: .*; step [0-9]+/[0-9]+ running for [0-9]+ s' "$LOG" ||
  { cat "$LOG"; fail "no progress line while a step ran"; }
# The step running at the signal finished; its shard is not complete: the summary says that
# its samples are computed again.
grep -qE "computed for shards not yet complete (was|were) not kept: the rerun computes (it|them) again" "$LOG" ||
  { cat "$LOG"; fail "the stop summary does not say that unfinished shards' samples are computed again"; }
for f in $committed_before; do [ -f "$out/$f" ] || fail "$f, committed before the signal, is gone"; done
if compgen -G "$out/*.tmp.*" > /dev/null; then ls -a "$out"; fail "the stop left temporary files"; fi
if compgen -G "$out/.lock*" > /dev/null; then ls -a "$out"; fail "the stop left the directory locked"; fi
"$E3_BIN" verify --allow-incomplete "$out" > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify after the stop"; }
rerun_completes 2 "$out" "Ctrl-C to mpirun" "${args[@]}"
