# export's files are the same bytes as before it read SRC once and wrote past the page cache
# (issue 21): DEST of every format, from SRCs of every storage dtype (make_export_src: seeded
# random states, 7 samples in shards of 3, H = 256) and of unsorted --layers (ModelOpt reorders
# them), checksummed file by file against export_identity.sha256, which the export of before
# those changes wrote (commit 9db9081). The same bytes with --skip-verify, with one thread, with
# three writers per shard (more than this machine's cores give by default), and under two ranks. export.json is left out: it names SRC's path.
source "$(dirname "$0")/lib.sh"
[ -n "${E3_MAKE_EXPORT_SRC:-}" ] || fail "E3_MAKE_EXPORT_SRC is not set"
golden="$(cd "$(dirname "$0")" && pwd)/export_identity.sha256"
work=$(fresh_dir export_identity)
cd "$work"
for dt in bf16 fp16 fp32 fp8; do
  "$E3_MAKE_EXPORT_SRC" "src_$dt" --hidden 256 --layers-total 8 --dtype "$dt" --samples 7 --tokens 16 \
    --samples-per-shard 3 --vocab 1000 --seed 5 > /dev/null
done
"$E3_MAKE_EXPORT_SRC" src_unsorted --hidden 256 --layers-total 8 --layers 5,2,4 --dtype bf16 --samples 7 --tokens 16 \
  --samples-per-shard 3 --vocab 1000 --seed 6 > /dev/null
exported() {  # exported NP DEST ARGS...
  LOG="$work/$2.log"
  run "$1" export "${@:3}" "$work/$2"
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "export ${*:3} $2 exited $RC"; }
}
for src in bf16 fp16 fp32 fp8 unsorted; do
  for f in speculators specforge modelopt; do exported 1 "out_${src}_$f" --format "$f" "src_$src"; done
done
listing() {  # the checksums of DEST's files but export.json, named as in the golden file
  local d
  for d in "$@"; do
    (cd "$d" && find . -type f ! -name export.json | LC_ALL=C sort | xargs sha256sum | sed "s|  ./|  $d/|")
  done
}
diff <(LC_ALL=C sort -k2 "$golden") <(listing out_* | LC_ALL=C sort -k2) > diff.txt ||
  { cat diff.txt; fail "export's files differ from export_identity.sha256"; }
# The other ways through: --skip-verify (no verify pass), one thread, two ranks.
for f in speculators specforge modelopt; do
  exported 1 "skip_$f" --format "$f" --skip-verify src_fp8
  exported 1 "one_$f" --format "$f" --threads 1 src_bf16
  exported 2 "np2_$f" --format "$f" src_unsorted
  exported 1 "w3_$f" --format "$f" --threads 3 --writers 3 src_fp8
  grep -q "and 9 writing threads)" "w3_$f.log" || { cat "w3_$f.log"; fail "--writers 3: not 3 writers for each of 3 shards"; }
  grep -qE "values [0-9.]+ s, waiting for writers [0-9.]+ s, convert" "w3_$f.log" ||
    { cat "w3_$f.log"; fail "the account has no time waiting for the writers"; }
  diff <(listing "out_fp8_$f" | sed "s|out_fp8_$f/||") <(listing "skip_$f" | sed "s|skip_$f/||") > /dev/null ||
    fail "--skip-verify wrote other bytes ($f)"
  diff <(listing "out_fp8_$f" | sed "s|out_fp8_$f/||") <(listing "w3_$f" | sed "s|w3_$f/||") > /dev/null ||
    fail "--writers 3 wrote other bytes ($f)"
  diff <(listing "out_bf16_$f" | sed "s|out_bf16_$f/||") <(listing "one_$f" | sed "s|one_$f/||") > /dev/null ||
    fail "--threads 1 wrote other bytes ($f)"
  diff <(listing "out_unsorted_$f" | sed "s|out_unsorted_$f/||") <(listing "np2_$f" | sed "s|np2_$f/||") > /dev/null ||
    fail "two ranks wrote other bytes ($f)"
done
# Each export reads SRC once: "N GB read" is the size of SRC's shards (about 0.1 GB here).
"$E3_MAKE_EXPORT_SRC" src_big --hidden 2048 --layers-total 8 --dtype bf16 --samples 7 --tokens 512 \
  --samples-per-shard 3 --vocab 1000 > /dev/null
src_gb=$(du -cb src_big/shard-*.h5 | tail -1 | awk '{printf "%.2f", $1 / 1e9}')
for f in speculators specforge modelopt; do
  exported 1 "big_$f" --format "$f" src_big
  grep -q "export: $src_gb GB read, " "big_$f.log" || { cat "big_$f.log"; fail "export did not read SRC ($src_gb GB) once"; }
done
echo ok
