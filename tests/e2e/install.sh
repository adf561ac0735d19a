# install.sh BUILD_DIR: `cmake --install` puts the binary, the sbatch scripts and the demo under a
# prefix; the installed binary, run from an unrelated directory with no --model, finds the demo
# relative to itself (no source path is compiled in), and a lone copy of it says to pass --model.
source "$(dirname "$0")/lib.sh"
build=$1
work=$(fresh_dir install)
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install failed"; }
bin="$prefix/bin/eagle3_extract"
[ -x "$bin" ] || { cat "$work/install.log"; fail "cmake --install did not install bin/eagle3_extract"; }
for s in eagle3_1node eagle3_nodes eagle3_array; do
  [ -x "$prefix/share/eagle3_extract/slurm/$s.sbatch" ] || fail "$s.sbatch is not installed (executable)"
done
for f in config.json model.safetensors input.jsonl; do
  [ -f "$prefix/share/eagle3_extract/demo/$f" ] && [ ! -L "$prefix/share/eagle3_extract/demo/$f" ] ||
    fail "the demo's $f is not installed as a file"
done

"$bin" --version > "$work/version.txt" 2>&1 || { cat "$work/version.txt"; fail "--version exited non-zero"; }
grep -qxE "eagle3_extract [0-9]+\.[0-9]+\.[0-9]+" "$work/version.txt" || { cat "$work/version.txt"; fail "--version output"; }

# The demo, from a directory that has nothing to do with the source or the build.
mkdir "$work/elsewhere"
cd "$work/elsewhere"
LOG="$work/demo.log"
E3_BIN=$bin run 1
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "the installed binary's demo exited $RC"; }
grep -q "(embedded demo: no --model given)" "$LOG" || { cat "$LOG"; fail "no demo startup line"; }
grep -q "info: model $prefix/share/eagle3_extract/demo (llama" "$LOG" || { cat "$LOG"; fail "the demo was not the installed one"; }
grep -q "done: 8 samples computed now" "$LOG" || { cat "$LOG"; fail "no summary line"; }
"$bin" verify eagle3_out > "$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "verify of the demo output"; }
grep -q "ok: 1 shards, 8 samples" "$work/verify.log" || { cat "$work/verify.log"; fail "verify report"; }
# The installed Python reader reads that output.
PYTHONPATH="$prefix/share/eagle3_extract/python" "$PYTHON" -c "
import eagle3_extract
ds = eagle3_extract.open_dataset('eagle3_out')
assert len(ds) == 8 and ds[0]['hidden_states'].shape[1] == 3, len(ds)
" || fail "the installed Python reader"

# A copy of the binary with no demo beside it: one usage error naming where it looked.
mkdir -p "$work/lone/bin" "$work/lone/run"
cp "$bin" "$work/lone/bin/"
cd "$work/lone/run"
LOG="$work/lone.log"
E3_BIN="$work/lone/bin/eagle3_extract" run 1
expect_failure 2 "embedded demo is not at $work/lone/share/eagle3_extract/demo .*pass --model" "$work/lone/run/eagle3_out"
