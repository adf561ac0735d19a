# The README's first command: `mpirun -np 2 eagle3_extract` with no arguments runs the
# checkpoint kept in the repository; h5dump shows hidden_states as (T, K, H).
source "$(dirname "$0")/lib.sh"
work=$(fresh_dir demo)
cd "$work"
LOG="$work/demo.log"
run 2
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "demo exited $RC"; }
for r in 0 1; do grep -q "\[r$r/2 tp$r dp0\] info: eagle3_extract .* up: host" "$LOG" || fail "no startup line of rank $r"; done
grep -q "done: 8 samples computed now" "$LOG" || { cat "$LOG"; fail "no summary line"; }
h5dump -H eagle3_out/shard-000000.h5 > header.txt
grep -q 'DATASPACE  SIMPLE { ( 120, 3, 128 ) / ( 120, 3, 128 ) }' header.txt || fail "hidden_states is not (T, 3, 128)"
grep -q 'DATASET "last_hidden_state"' header.txt || fail "no last_hidden_state"
"$E3_BIN" verify eagle3_out > verify.log || { cat verify.log; fail "verify failed"; }
grep -q "ok: 1 shards, 8 samples" verify.log || fail "verify report"
"$E3_BIN" info "$E3_GOLDEN_DIR/tiny_llama_default" --tp 2 > info.log
grep -q "default layers   \[2, 4, 5\]" info.log || { cat info.log; fail "info default layers"; }
"$E3_BIN" --help > help.log
for flag in --model --data --out --layers --final --tp --backend --dtype --max-seq-len --on-long \
            --max-tokens-per-step --samples-per-shard --log-level --expert-dequant; do
  grep -q -- "$flag" help.log || fail "--help does not document $flag"
done
