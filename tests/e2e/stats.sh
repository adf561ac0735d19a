# `stats DIR` against numpy's own reading of the shards (h5py: HDF5 converts bf16 to float; the
# fp8 codes are decoded here from the e4m3fn definition), the SVG parsed as XML and its numbers
# against the table, a shard with NaN and infinities written into it, the same bytes whatever
# the thread and rank counts, a partial output, and the errors of verify.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir stats)
cd "$work"
for dtype in bf16 fp8; do
  LOG="$work/run_$dtype.log"
  run 1 --model "$model" --data "$model/input.jsonl" --out "$work/$dtype" --dtype "$dtype" --final both \
    --samples-per-shard 3
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "run --dtype $dtype exited $RC"; }
done

# check.py DIR TABLE SVG JSON: every figure of the three outputs against numpy.
cat > check.py <<'EOF'
import glob, json, math, re, sys
import xml.etree.ElementTree as ET
import h5py, numpy as np

out_dir, table_path, svg_path, json_path = sys.argv[1:5]

def e4m3fn(code):
    s, e, m = code >> 7, (code >> 3) & 15, code & 7
    if e == 15 and m == 7:
        return float("nan")
    v = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if s else v
E4M3 = np.array([e4m3fn(c) for c in range(256)], np.float32)

def values(g, name):
    ds = g[name]
    if ds.dtype == np.uint8:  # fp8: code x its row's float32 scale, in float32
        return E4M3[ds[()]] * g[name + "_scale"][()][..., None]
    return ds.astype(np.float32)[()]

states, lengths, masked, zero_masks = {}, [], 0, 0
def add(name, v):
    v = v.astype(np.float64).ravel()
    fin = v[np.isfinite(v)]
    s = states.setdefault(name, dict(elements=0, sq=0.0, finite=0, absmax=0.0, nan=0, pinf=0, ninf=0))
    s["elements"] += v.size; s["finite"] += fin.size; s["sq"] += float(np.sum(fin * fin))
    s["absmax"] = max(s["absmax"], float(np.max(np.abs(fin))) if fin.size else 0.0)
    s["nan"] += int(np.isnan(v).sum()); s["pinf"] += int(np.isposinf(v).sum()); s["ninf"] += int(np.isneginf(v).sum())

for path in sorted(glob.glob(out_dir + "/shard-*.h5")):
    with h5py.File(path, "r") as f:
        for key in sorted(f["samples"]):
            g = f["samples"][key]
            mask = g["loss_mask"][()]
            lengths.append(mask.size); masked += int((mask != 0).sum()); zero_masks += int((mask != 0).sum() == 0)
            hs = values(g, "hidden_states")
            for k in range(hs.shape[1]):
                add("hidden_states[:,%d]" % k, hs[:, k, :])
            for name in ("last_hidden_state", "last_hidden_state_prenorm"):
                if name in g:
                    add(name, values(g, name))
rms = lambda s: math.sqrt(s["sq"] / s["finite"]) if s["finite"] else 0.0

def close(a, b, what, rel):
    if not (a == b or abs(a - b) <= rel * max(abs(a), abs(b))):
        sys.exit("%s: stats says %r, numpy %r" % (what, a, b))

# The table: one line per state, numbers printed to 6 digits.
table = open(table_path).read().splitlines()
rows = {l.split()[0]: l.split() for l in table if l.startswith(("hidden_states[", "last_hidden_state"))}
if set(rows) != set(states):
    sys.exit("table states %s, numpy %s" % (sorted(rows), sorted(states)))
for name, s in states.items():
    r = rows[name]
    elements, t_rms, t_absmax, nan, pinf, ninf = int(r[-6]), float(r[-5]), float(r[-4]), int(r[-3]), int(r[-2]), int(r[-1])
    if (elements, nan, pinf, ninf) != (s["elements"], s["nan"], s["pinf"], s["ninf"]):
        sys.exit("%s: table counts %s, numpy %s" % (name, r, s))
    close(t_rms, rms(s), name + " rms (table)", 1e-5)
    close(t_absmax, s["absmax"], name + " absmax (table)", 1e-5)
m = re.search(r"loss_mask: (\d+) of (\d+) tokens are 1 \(masked fraction ([0-9.e+-]+)\); (\d+) samples have an all-zero mask", "\n".join(table))
if not m or (int(m[1]), int(m[2]), int(m[4])) != (masked, sum(lengths), zero_masks):
    sys.exit("table's loss_mask line %r, numpy %d of %d, %d all-zero" % (m and m[0], masked, sum(lengths), zero_masks))
close(float(m[3]), masked / sum(lengths), "masked fraction", 1e-5)
bins = {}
for n in lengths:
    b = n.bit_length() - 1
    bins[b] = bins.get(b, 0) + 1
for b, n in bins.items():
    line = "  [%d, %d)" % (2 ** b, 2 ** (b + 1))
    hits = [l for l in table if l.startswith(line + " ")]
    if len(hits) != 1 or int(hits[0].split()[2]) != n:
        sys.exit("histogram bin %s: table %s, numpy %d" % (line, hits, n))

# The JSON: the same at full precision.
doc = json.load(open(json_path))
for e in doc["states"]:
    s = states[e["name"]]
    if (e["elements"], e["nan"], e["pos_inf"], e["neg_inf"]) != (s["elements"], s["nan"], s["pinf"], s["ninf"]):
        sys.exit("json counts of %s: %s, numpy %s" % (e["name"], e, s))
    close(e["rms"], rms(s), e["name"] + " rms (json)", 1e-9)
    close(e["abs_max"], s["absmax"], e["name"] + " absmax (json)", 0)
if doc["samples"]["count"] != len(lengths) or doc["samples"]["tokens"] != sum(lengths):
    sys.exit("json samples %s" % doc["samples"])

# The SVG: well-formed XML whose figures are the table's, digit for digit.
svg = ET.parse(svg_path).getroot()
ns = "{http://www.w3.org/2000/svg}"
if svg.tag != ns + "svg":
    sys.exit("root element is %s" % svg.tag)
drawn = {g.get("data-name"): g for g in svg.iter(ns + "g") if g.get("class") == "state"}
if set(drawn) != set(rows):
    sys.exit("svg states %s, table %s" % (sorted(drawn), sorted(rows)))
for name, g in drawn.items():
    got = [g.get(a) for a in ("data-elements", "data-rms", "data-absmax", "data-nan", "data-pos-inf", "data-neg-inf")]
    if got != rows[name][-6:]:
        sys.exit("%s: svg %s, table %s" % (name, got, rows[name][-6:]))
    if len([r for r in g.iter(ns + "rect")]) != 2:
        sys.exit("%s: not two bars" % name)
hist = {int(r.get("data-low")): int(r.get("data-count")) for r in svg.iter(ns + "rect") if r.get("class") == "length-bin"}
if {k: v for k, v in hist.items() if v} != {2 ** b: n for b, n in bins.items()}:
    sys.exit("svg histogram %s, numpy %s" % (hist, bins))
mk = [g for g in svg.iter(ns + "g") if g.get("id") == "masked"]
if len(mk) != 1 or mk[0].get("data-masked-fraction") != m[3] or int(mk[0].get("data-all-zero-mask")) != zero_masks:
    sys.exit("svg masked fraction %s, table %s" % (mk and mk[0].attrib, m[3]))
print("ok", sum(lengths), "tokens,", len(states), "states")
EOF

# stats_ok NAME ARGS...: stats exits 0; its table (the lines that are not log lines) in NAME.table.
stats_ok() {
  local name=$1
  shift
  set +e
  "$@" > "$name.log" 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 0 ] || { cat "$name.log"; fail "$name: stats exited $rc"; }
  grep -v '^[0-9]\{4\}-[0-9][0-9]-[0-9][0-9] ' "$name.log" > "$name.table" || true
}

for dtype in bf16 fp8; do
  stats_ok "$dtype" "$E3_BIN" stats "$work/$dtype" --svg "$dtype.svg" --json "$dtype.json"
  grep -q "stats $work/$dtype: 3 of 3 shards (run complete), 8 samples" "$dtype.table" || { cat "$dtype.log"; fail "$dtype: summary line"; }
  grep -q "info: stats $work/$dtype: read .* GB of 3 shard files in .* s: .* MB/s (1 rank x .* threads); figures in $dtype.svg and $dtype.json" "$dtype.log" ||
    { cat "$dtype.log"; fail "$dtype: no timing line"; }
  "$PYTHON" check.py "$work/$dtype" "$dtype.table" "$dtype.svg" "$dtype.json" || fail "$dtype: stats differ from numpy"
  ls -a | grep -q partial && fail "a .partial file was left behind"
done
# Without --svg the figures go to ./stats.svg, never into DIR.
stats_ok default "$E3_BIN" stats "$work/bf16"
[ -f stats.svg ] && [ ! -e "$work/bf16/stats.svg" ] || fail "the default SVG is not ./stats.svg"
cmp -s stats.svg bf16.svg || fail "the default SVG differs from --svg's"
set +e
(cd "$work/bf16" && "$E3_BIN" stats . > "$work/inside.log" 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "stats --svg stats.svg: that is inside ., the output directory" inside.log ||
  { cat inside.log; fail "stats run inside DIR: exit $rc, expected 2"; }

# The same bytes with 1 thread, 3 threads and 2 ranks.
stats_ok t1 "$E3_BIN" stats "$work/bf16" --threads 1 --svg t1.svg --json t1.json
stats_ok t3 "$E3_BIN" stats "$work/bf16" --threads 3 --svg t3.svg --json t3.json
stats_ok np2 $E3_MPIRUN -np 2 "$E3_BIN" stats "$work/bf16" --threads 1 --svg np2.svg --json np2.json
grep -q "(2 ranks x 1 threads)" np2.log || { cat np2.log; fail "stats under 2 ranks"; }
for other in t3 np2; do
  cmp t1.table "$other.table" || fail "the table of $other differs from 1 thread's"
  cmp t1.svg "$other.svg" || fail "the SVG of $other differs from 1 thread's"
  cmp t1.json "$other.json" || fail "the JSON of $other differs from 1 thread's"
done
cmp t1.table bf16.table || fail "--threads 1 differs from the default"

# NaN, +Inf and -Inf written over stored bf16 values of shard 1 (raw bits, same size): counted.
cp -r "$work/bf16" "$work/poisoned"
"$PYTHON" - "$work/poisoned/shard-000001.h5" <<'EOF'
import sys, h5py
path = sys.argv[1]
with h5py.File(path, "r") as f:
    g = f["samples"][sorted(f["samples"])[0]]
    offset = g["hidden_states"].id.get_offset()
    T, K, H = g["hidden_states"].shape
    assert T >= 3, T
with open(path, "r+b") as f:
    # [T, K, H]: NaN at capture 1 of token 0, +Inf at capture 1 of token 1, -Inf at capture 0 of token 2
    for (t, k, c), bits in (((0, 1, 0), 0x7fc0), ((1, 1, 1), 0x7f80), ((2, 0, 2), 0xff80)):
        element = (t * K + k) * H + c
        f.seek(offset + 2 * element)
        f.write(bits.to_bytes(2, "little"))
EOF
stats_ok poisoned "$E3_BIN" stats "$work/poisoned" --svg poisoned.svg --json poisoned.json
"$PYTHON" check.py "$work/poisoned" poisoned.table poisoned.svg poisoned.json || fail "poisoned: stats differ from numpy"
grep -Eq '^hidden_states\[:,1\] +id 4 +[0-9]+ +[0-9.e+-]+ +[0-9.e+-]+ +1 +1 +0$' poisoned.table &&
  grep -Eq '^hidden_states\[:,0\] +id 2 +[0-9]+ +[0-9.e+-]+ +[0-9.e+-]+ +0 +0 +1$' poisoned.table ||
  { cat poisoned.table; fail "the NaN and infinities are not counted where they are"; }

# A partial output (one part of two): what is there, said so.
LOG="$work/part.log"
run 1 --model "$model" --data "$model/input.jsonl" --out "$work/part" --samples-per-shard 3 --part 0/2
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "run --part 0/2 exited $RC"; }
stats_ok part "$E3_BIN" stats "$work/part" --svg part.svg --json part.json
grep -q "2 of 2 shards of the 1 of 2 parts present (run not complete: what is there so far)" part.table ||
  { cat part.log; fail "partial output not said"; }
"$PYTHON" check.py "$work/part" part.table part.svg part.json || fail "part: stats differ from numpy"

# verify's errors: a damaged shard (exit 6, naming it), a directory that is no output (exit 6).
cp -r "$work/bf16" "$work/truncated"
head -c 5000 "$work/bf16/shard-000002.h5" > "$work/truncated/shard-000002.h5"
for case in truncated:shard-000002.h5 model:"is not an eagle3_extract output directory"; do
  dir=${case%%:*}
  [ "$dir" = model ] && dir_path="$model" || dir_path="$work/$dir"
  set +e
  "$E3_BIN" stats "$dir_path" --svg "$dir.svg" > "$dir.err" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 6 ] || { cat "$dir.err"; fail "stats on $dir: exit $rc, expected 6"; }
  grep -q "critical: rank 0: verify failed: .*${case#*:}" "$dir.err" || { cat "$dir.err"; fail "stats on $dir: message"; }
  [ ! -e "$dir.svg" ] || fail "stats on $dir wrote an SVG"
done
echo "stats: ok"
