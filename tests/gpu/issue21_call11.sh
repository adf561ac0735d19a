#!/bin/bash
# Issue 21, fifth session (2026-12-03): the golden contracts on the GPU with this session's
# attention kernel (issue18.sh golden, the repository's cases), then the export of stop 29
# ("prev": this session's binary with verify's 8 MiB pieces, build-gpu/prev) against this
# session's ("new": 1 MiB pieces, so that the checksum and the value checks read what the copy
# has just put in the core's cache), with SRC in the page cache and cold, beside dd (write, and
# a copy of SRC on the same disk), and the two exports' files compared byte for byte.
# Carry build-gpu/{new,prev,e3_unit_tests,golden_check,sample_digest,lib-gpu,sharedbench}.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/issue21_call11.log
say() { echo "$*" | tee -a "$LOG"; }
mkdir -p build/bin build/tests .gpu/shared
ln -sfn "$PWD/build-gpu/lib-gpu" build/lib-gpu
ln -sfn "$PWD/build-gpu/new/eagle3_extract" build/bin/eagle3_extract
for t in e3_unit_tests golden_check sample_digest; do ln -sfn "$PWD/build-gpu/$t" build/tests/$t; done
ln -sfn "$PWD/build-gpu/sharedbench" .gpu/shared/bench
timeout 170 bash tests/gpu/issue18.sh golden
cat "$OUT/issue18.log" >> "$LOG"
mkdir -p /root/e3x/issue21_ck /root/e3x/disk
python3 build-gpu/sharedbench/make_checkpoint.py build-gpu/sharedbench/configs/llama3_8b.json /dev/shm/l3 300 > "$OUT/make_checkpoint.log" 2>&1
ln -sfn /dev/shm/l3/ckpt /root/e3x/issue21_ck/ckpt && cp /dev/shm/l3/data.jsonl /root/e3x/issue21_ck/
say "== $(date -u) disk $(df -h /root | tail -1)"
sync; echo 3 > /proc/sys/vm/drop_caches
say "dd read direct 4 GiB: $(dd if=/dev/zero of=/root/e3x/disk/a bs=64M count=64 oflag=direct 2>&1 >/dev/null; dd if=/root/e3x/disk/a of=/dev/null bs=64M iflag=direct 2>&1 | tail -1)"
rm -f /root/e3x/disk/*
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
  env $common COLD=$cold BIN=$PWD/build-gpu/prev/eagle3_extract LABEL=prev DEST_DIR=/root/e3x/ex_prev \
    timeout 100 bash tests/gpu/issue21_export.sh
  env $common COLD=$cold BIN=$PWD/build-gpu/new/eagle3_extract LABEL=new DEST_DIR=/root/e3x/ex_new \
    timeout 100 bash tests/gpu/issue21_export.sh
done
cat "$OUT/issue21_export.log" >> "$LOG"
say "== done $(date -u)"
tar -czf /tmp/logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name issue21_call11.log -exec rm -rf {} + ; mv /tmp/logs.tgz "$OUT/"
