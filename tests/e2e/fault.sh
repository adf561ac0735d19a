# A failure on one rank in the middle of a run (its peers are inside an all-reduce) ends the
# whole job within seconds with that rank's message, and leaves only whole shards.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir fault)
LOG="$work/fault.log"
# 2 DP groups of 2, shards balanced by tokens: group 0 holds shards 0, 2, 3 (samples 0, 1, 4-7),
# group 1 shard 1 (samples 2, 3) as steps [2] [3]. Rank 3 (group 1) fails before the step with
# sample 3; all ranks agree on it at that step's start, and shard 0, already complete, is kept.
args=(--model "$model" --data "$model/input.jsonl" --out "$work/out" --tp 2 --samples-per-shard 2
      --max-tokens-per-step 128 --max-seq-len 128)
export E3_FAIL_AT_SAMPLE=3 E3_FAIL_ON_RANK=3
start=$(date +%s)
run 4 "${args[@]}"
elapsed=$(( $(date +%s) - start ))
unset E3_FAIL_AT_SAMPLE E3_FAIL_ON_RANK
[ "$RC" -ne 0 ] || fail "the job succeeded despite the injected failure"
grep -q "\[r3/4 tp1 dp1\] critical: rank 3: internal error: injected failure before the step holding sample 3" "$LOG" ||
  { cat "$LOG"; fail "no critical line from rank 3"; }
[ "$(grep -c critical "$LOG")" -eq 1 ] || { cat "$LOG"; fail "more than the one root-cause line"; }
[ "$RC" -eq 1 ] || { cat "$LOG"; fail "exit code $RC, expected 1 (the failing rank's)"; }
[ -e "$work/out/shard-000000.h5" ] || fail "shard 0, complete before the failure, was not committed"
[ "$elapsed" -lt 30 ] || fail "the job took $elapsed s to end"
# A rerun keeps what was committed and completes the rest.
LOG="$work/rerun.log"
run 4 "${args[@]}"
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "rerun exited $RC"; }
grep -q "done: [0-9] samples computed now, [2-9] done before" "$LOG" || { cat "$LOG"; fail "nothing was kept"; }
"$E3_BIN" verify "$work/out" > /dev/null || fail "verify after the rerun"
"$E3_GOLDEN_CHECK" "$work/out" "$model" --layers 2,4,5 --final post-norm --tol 4e-3

# A std::exception (not an e3::Error) from the writer's publisher thread on the last shard
# surfaces only in the final agreement, after the last step: it is agreed there like a step's
# failure, one line and the internal error's code, not an MPI_Abort.
LOG="$work/publish.log"
export E3_FAIL_PUBLISH_SHARD=3
run 2 --model "$model" --data "$model/input.jsonl" --out "$work/publish" --tp 2 --samples-per-shard 2 \
  --max-tokens-per-step 128 --max-seq-len 128
unset E3_FAIL_PUBLISH_SHARD
[ "$RC" -eq 1 ] || { cat "$LOG"; fail "publisher failure: exit code $RC, expected 1"; }
grep -q "critical: rank 0: internal error: .*injected failure publishing a shard" "$LOG" ||
  { cat "$LOG"; fail "no critical line naming the publisher's failure"; }
[ "$(grep -c critical "$LOG")" -eq 1 ] || { cat "$LOG"; fail "more than the one root-cause line"; }
if grep -qi "MPI_ABORT" "$LOG"; then cat "$LOG"; fail "the publisher's failure ended in MPI_Abort"; fi
[ -e "$work/publish/shard-000002.h5" ] || fail "shard 2, published before the failure, was not kept"
[ ! -e "$work/publish/shard-000003.h5" ] || fail "the shard whose publishing failed is in place"
