# A stop signal on one rank (Slurm's time-limit warning, SIGTERM, Ctrl-C's SIGINT) ends the
# whole job after the current step with the resumable exit code 75, the leader's last line
# saying so; kill -9 of a rank ends the job; in every case a rerun completes the dataset, each
# sample exactly once, with the values of an uninterrupted run.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir signals)
# 600 samples of 40-79 tokens, one to three per step: hundreds of steps.
for i in $(seq 0 599); do
  n=$((40 + i % 40))
  printf '{"id": "q%d", "input_ids": [%s]}\n' "$i" "$(seq -s, $((i % 97 + 3)) $((i % 97 + 2 + n)))"
done > "$work/data.jsonl"
args=(--model "$model" --data "$work/data.jsonl" --tp 2 --samples-per-shard 50 --max-tokens-per-step 160
      --max-seq-len 160 --layers 1,4,7 --dtype fp32 --log-level info --progress-interval 1)

LOG="$work/reference.log"
run 4 "${args[@]}" --out "$work/reference"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "reference run exited $RC"; }

interrupt() {  # interrupt NAME SIGNAL: start a run, signal one rank once it computes, wait
  local name=$1 sig=$2
  LOG="$work/$name.log"
  set +e
  $E3_MPIRUN -np 4 "$E3_BIN" "${args[@]}" --out "$work/$name" > "$LOG" 2>&1 &
  local launcher=$!
  # Signal only once a shard has been published, so that "something was kept" is a fair
  # assertion however slowly a loaded machine starts the ranks.
  for _ in $(seq 1 600); do compgen -G "$work/$name/shard-*.h5" > /dev/null && break; sleep 0.1; done
  local victim
  victim=$(pgrep -f "eagle3_extract.*$work/$name" | tail -1)
  [ -n "$victim" ] && kill "-$sig" "$victim"
  wait "$launcher"
  RC=$?
  set -e
}
resume_and_compare() {  # resume_and_compare NAME
  rerun_completes 4 "$work/$1" "$1" "${args[@]}"
}

interrupt usr1 USR1
[ "$RC" -eq 75 ] || { cat "$LOG"; fail "SIGUSR1: exit code $RC, expected 75"; }
grep -q "stopped by signal 10" "$LOG" || { cat "$LOG"; fail "no stop message"; }
"$E3_BIN" verify --allow-incomplete "$work/usr1" > /dev/null || fail "verify --allow-incomplete after the stop"
set +e
"$E3_BIN" verify "$work/usr1" > "$work/usr1.verify.log" 2>&1
verify_rc=$?
set -e
[ "$verify_rc" -eq 6 ] || { cat "$work/usr1.verify.log"; fail "verify of a stopped run: exit $verify_rc, expected 6"; }
grep -q "the run is not complete" "$work/usr1.verify.log" || { cat "$work/usr1.verify.log"; fail "verify: no reason"; }
resume_and_compare usr1

interrupt term TERM
[ "$RC" -eq 75 ] || { cat "$LOG"; fail "SIGTERM: exit code $RC, expected 75"; }
resume_and_compare term

# Ctrl-C on a rank: the same clean stop, no temporary file left, and the leader's last line
# says the run is resumable and how to resume.
interrupt int INT
[ "$RC" -eq 75 ] || { cat "$LOG"; fail "SIGINT: exit code $RC, expected 75"; }
last=$(grep '\[r0/4 ' "$LOG" | tail -1)
case $last in
  *"stopped by signal 2 after the current step (SIGINT)"*resumable*"rerun the same command"*) ;;
  *) cat "$LOG"; fail "the leader's last line after SIGINT does not say resumable and how to rerun: $last" ;;
esac
if compgen -G "$work/int/*.tmp.*" > /dev/null; then ls "$work/int"; fail "SIGINT left temporary files"; fi
resume_and_compare int

interrupt kill9 KILL
[ "$RC" -ne 0 ] || fail "the job survived kill -9 of a rank"
# Whatever kill -9 left behind verifies: final-named shards are whole, including those
# committed after the manifest's last update (another group's, or one renamed just before).
"$E3_BIN" verify --allow-incomplete "$work/kill9" > "$work/kill9.verify.log" 2>&1 || { cat "$work/kill9.verify.log"; fail "verify after kill -9"; }
resume_and_compare kill9
