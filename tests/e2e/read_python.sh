# The README's "Reading the output in Python" example, run as written (Debian's python3-h5py)
# on bf16, fp16, fp32 and fp8 output. The reader's values against HDF5's own reads are checked
# by tests/python_reader/reader.sh.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir read_python)
readme="$(dirname "$0")/../../README.md"
export PYTHONPATH="$(cd "$(dirname "$0")/../../io/python" && pwd)"
# The first python block of the section. awk reads to the end: exiting early would kill sed with
# SIGPIPE, which pipefail turns into a silent failure of this script.
sed -n '/^### Reading the output in Python/,/^### /p' "$readme" |
  awk '/^```python/ && !done {on=1; next} on && /^```/ {on=0; done=1} on' > "$work/snippet.py"
grep -q "open_dataset" "$work/snippet.py" || fail "no open_dataset in the README's Python section"
for dtype in bf16 fp16 fp32 fp8; do
  LOG="$work/$dtype.log"
  run 1 --model "$model" --data "$model/input.jsonl" --out "$work/$dtype" --dtype "$dtype" --samples-per-shard 3
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "run --dtype $dtype exited $RC"; }
  # The snippet opens eagle3_out: run it there as written.
  (cd "$work" && rm -f eagle3_out && ln -s "$dtype" eagle3_out && "$PYTHON" snippet.py > "$dtype.out") ||
    fail "the README snippet fails on $dtype output"
  grep -qx "8 \[2, 4, 5\] post-norm" "$work/$dtype.out" || { cat "$work/$dtype.out"; fail "README snippet output ($dtype)"; }
done
