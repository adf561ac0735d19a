# What a user sees of a TP 2 x DP 2 job: the startup line of all 4 ranks in the merged output,
# the same lines in per-rank files under --log-dir, leader progress with samples, tokens/s,
# GB, ETA and the slowest DP group, and with --log-level debug per-layer capture statistics
# from every rank (equal within a TP group, which computes one residual stream).
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir observability)
for i in $(seq 0 39); do
  printf '{"input_ids": [%s]}\n' "$(seq -s, $((i + 1)) $((i + 30)))"
done > "$work/data.jsonl"
LOG="$work/run.log"
run 4 --model "$model" --data "$work/data.jsonl" --out "$work/out" --tp 2 --samples-per-shard 5 \
  --max-tokens-per-step 64 --max-seq-len 64 --log-level debug --log-dir "$work/logs" --progress-interval 0.001
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
for r in 0 1 2 3; do
  tag="\[r$r/4 tp$((r % 2)) dp$((r / 2))\]"
  grep -q "$tag info: eagle3_extract .* up: host .* TP rank $((r % 2))/2, DP group $((r / 2))/2, .* log level debug, also logging to $work/logs/rank-0000$r.log" "$LOG" ||
    { cat "$LOG"; fail "no startup line of rank $r in the merged output"; }
  grep -q "$tag info: eagle3_extract .* up: host" "$work/logs/rank-0000$r.log" || fail "rank $r's log file lacks its startup line"
  grep -q "$tag debug: step 0 capture stats: id 2: rms [0-9.]* min -[0-9.]* max [0-9.]*; id 4: .*; id 5: .*; final (post-norm): rms" "$LOG" ||
    { cat "$LOG"; fail "no capture statistics from rank $r"; }
done
# The file of rank 1 holds rank 1's lines only.
if grep -v "\[r1/4 tp1 dp0\]" "$work/logs/rank-00001.log" | grep -q .; then fail "rank 1's file holds other ranks' lines"; fi
# Both TP ranks of a group see the same states.
for g in 0 1; do
  a=$(grep "\[r$((2 * g))/4 .*step 1 capture stats" "$LOG" | sed 's/.*capture stats: //')
  b=$(grep "\[r$((2 * g + 1))/4 .*step 1 capture stats" "$LOG" | sed 's/.*capture stats: //')
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "DP group $g: TP ranks disagree: '$a' vs '$b'"
done
grep -qE "\[r0/4 tp0 dp0\] info: progress: [0-9]+/40 samples \([0-9.]+%\), [0-9]+/1200 tokens, [0-9]+ tok/s, [0-9.]+ GB written, elapsed [0-9]+ s, ETA [0-9]+ s; slowest DP group [01] at [0-9.]+%" "$LOG" ||
  { cat "$LOG"; fail "no progress line with samples, tokens/s, GB, ETA and the slowest group"; }
if grep "info: progress:" "$LOG" | grep -qv "\[r0/4"; then fail "a rank other than the leader prints progress"; fi
