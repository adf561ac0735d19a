# verify exits 6 naming the problem when an output directory is damaged.
source "$(dirname "$0")/lib.sh"
model="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir verify_detects)
LOG="$work/run.log"
run 2 --model "$model" --data "$model/input.jsonl" --out "$work/good" --samples-per-shard 3
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
damaged() {  # damaged NAME PATTERN: copy, let the caller damage it, expect verify to fail
  rm -rf "$work/$1"
  cp -r "$work/good" "$work/$1"
}
expect_verify_fails() {
  set +e
  "$E3_BIN" verify "$work/$1" > "$work/$1.log" 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 6 ] || { cat "$work/$1.log"; fail "verify exit $rc on $1, expected 6"; }
  grep -q -- "$2" "$work/$1.log" || { cat "$work/$1.log"; fail "verify message lacks: $2"; }
}
damaged truncated; head -c 5000 "$work/good/shard-000001.h5" > "$work/truncated/shard-000001.h5"
expect_verify_fails truncated "shard-000001.h5: 5000 bytes, the manifest says"
# One byte changed in place (same size): only the checksum can tell.
damaged flipped
size=$(stat -c %s "$work/flipped/shard-000001.h5")
printf '\x5a' | dd of="$work/flipped/shard-000001.h5" bs=1 seek=$((size - 100)) conv=notrunc status=none
expect_verify_fails flipped "shard-000001.h5: checksum [0-9a-f]* differs from the manifest's"
damaged missing; rm "$work/missing/shard-000002.h5"
expect_verify_fails missing "shard-000002.h5: listed in the manifest but missing"
damaged stray; cp "$work/good/shard-000000.h5" "$work/stray/shard-000009.h5"
expect_verify_fails stray "shard-000009.h5: a shard file that no manifest lists"
damaged nomanifest; rm "$work/nomanifest/manifest.json"
expect_verify_fails nomanifest "no manifest.json"
