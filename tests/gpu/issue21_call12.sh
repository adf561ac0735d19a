#!/bin/bash
# Issue 21 item 3, fifth session (2026-12-03), after call 11 (which found the export's readers
# never waiting for a writer: reading SRC sets the pace): "prev" (build-gpu/prev, verify's pass
# as at stop 29: 8 MiB pieces, a shard in the page cache copied out of it by the pass itself)
# against "new" (1 MiB pieces, and a shard in the page cache copied out of it by a read-ahead
# thread of its own, beside the pass's checksum and checks), SRC in the page cache and cold, beside
# dd, and the files of both compared. Carry build-gpu/{new,prev,lib-gpu,sharedbench}.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/issue21_call12.log
say() { echo "$*" | tee -a "$LOG"; }
mkdir -p build/bin .gpu/shared
ln -sfn "$PWD/build-gpu/lib-gpu" build/lib-gpu
ln -sfn "$PWD/build-gpu/new/eagle3_extract" build/bin/eagle3_extract
ln -sfn "$PWD/build-gpu/sharedbench" .gpu/shared/bench
mkdir -p /root/e3x/issue21_ck
python3 build-gpu/sharedbench/make_checkpoint.py build-gpu/sharedbench/configs/llama3_8b.json /dev/shm/l3 300 > "$OUT/make_checkpoint.log" 2>&1
ln -sfn /dev/shm/l3/ckpt /root/e3x/issue21_ck/ckpt && cp /dev/shm/l3/data.jsonl /root/e3x/issue21_ck/
common="SRC=/root/e3x/src FORMATS=specforge DTYPES=bf16"
for cold in 0 1; do
  env $common COLD=$cold DDCOPY=1 BIN=$PWD/build-gpu/prev/eagle3_extract LABEL=prev DEST_DIR=/root/e3x/ex_prev \
    KEEP=$((1 - cold)) timeout 100 bash tests/gpu/issue21_export.sh
  env $common COLD=$cold BIN=$PWD/build-gpu/new/eagle3_extract LABEL=new DEST_DIR=/root/e3x/ex_new \
    KEEP=$((1 - cold)) timeout 100 bash tests/gpu/issue21_export.sh
  if [ "$cold" = 0 ]; then
    a=$(cd /root/e3x/ex_prev/issue21_bf16_specforge && find . -type f ! -name export.json | sort | xargs -P 8 -n 20 sha256sum | sort -k2 | sha256sum)
    b=$(cd /root/e3x/ex_new/issue21_bf16_specforge && find . -type f ! -name export.json | sort | xargs -P 8 -n 20 sha256sum | sort -k2 | sha256sum)
    say "files of prev and new: $([ "$a" = "$b" ] && echo same || echo DIFFERENT) ($(find /root/e3x/ex_new/issue21_bf16_specforge -type f | wc -l) files)"
    rm -rf /root/e3x/ex_prev /root/e3x/ex_new
  fi
  for b in new prev new; do
    env $common COLD=$cold BIN=$PWD/build-gpu/$b/eagle3_extract LABEL=$b DEST_DIR=/root/e3x/ex_$b \
      timeout 100 bash tests/gpu/issue21_export.sh
  done
done
for b in prev new; do  # verify alone, SRC in the page cache
  cat /root/e3x/src/*.h5 > /dev/null
  say "verify $b: $(build-gpu/$b/eagle3_extract verify /root/e3x/src 2>&1 | grep -oE 'read [0-9.]+ GB of .*')"
done
cat "$OUT/issue21_export.log" >> "$LOG"
say "== done $(date -u)"
tar -czf /tmp/logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name issue21_call12.log -exec rm -rf {} + ; mv /tmp/logs.tgz "$OUT/"
