# The Python reader on shards with one flipped metadata bit (flip_metadata.py): each open in a
# forked child, none may crash, raise anything but a DatasetError naming the shard, or read
# other values than the undamaged shard. HDF5's checksummed metadata (the 1.10 file format the
# writer asks for) is what turns these flips into refusals.
source "$(dirname "$0")/../e2e/lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
export PYTHONPATH="$here/../../io/python"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir python_reader_flips)
LOG="$work/extract.log"
run 1 --model "$model" --data "$model/input.jsonl" --out "$work/run" --samples-per-shard 3 --max-seq-len 100
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "extraction exited $RC"; }
"$PYTHON" "$here/flip_metadata.py" "$work/run" "$work" 300 || fail "flipped metadata bits"
echo ok
