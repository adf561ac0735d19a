# The start-up line reports the load time and rate: the bytes read from the checkpoint (every
# tensor the model uses, here all but lm_head.weight: 2494720 bytes) over the seconds taken.
source "$(dirname "$0")/lib.sh"
src="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir load_rate)
LOG="$work/run.log"
run 1 --model "$src" --data "$src/input.jsonl" --out "$work/out" --layers 1,4,7
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "exit code $RC"; }
line=$(grep "ready on" "$LOG") || { cat "$LOG"; fail "no ready line"; }
[[ "$line" =~ loaded\ in\ ([0-9.]+)\ s\ \(([0-9.e+-]+)\ GB\ read\ at\ ([0-9.]+)\ GB/s\) ]] ||
  fail "the ready line gives no load rate: $line"
[ "${BASH_REMATCH[2]}" = "0.00249" ] || fail "read ${BASH_REMATCH[2]} GB, expected 0.00249 (2494720 bytes): $line"
"$PYTHON" -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" "${BASH_REMATCH[3]}" ||
  fail "no positive rate: $line"
