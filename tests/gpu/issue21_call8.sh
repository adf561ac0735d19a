#!/bin/bash
# Issue 21 item 3 (export at >= 90% of dd on the same disk), third session: the export before
# (build-gpu/old: 8461775, one writer per shard) and after (build-gpu/new: writers per shard,
# buffers reused, SRC read ahead past the page cache when cold), each with SRC in the page
# cache and cold, beside dd (write; copy of SRC on the same disk; four writes at once), and the
# two exports' files compared byte for byte; then E3_PROFILE=1 of both MoE shapes. Carry build-gpu/{new,old,lib-gpu,sharedbench}.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/issue21_call8.log
say() { echo "$*" | tee -a "$LOG"; }
mkdir -p /root/e3x/issue21_ck /root/e3x/disk
python3 build-gpu/sharedbench/make_checkpoint.py build-gpu/sharedbench/configs/llama3_8b.json /dev/shm/l3 300 > "$OUT/make_checkpoint.log" 2>&1
ln -sfn /dev/shm/l3/ckpt /root/e3x/issue21_ck/ckpt && cp /dev/shm/l3/data.jsonl /root/e3x/issue21_ck/
# The disk: one dd write, four at once, one direct read.
say "== $(date -u) disk $(df -h /root | tail -1)"
say "dd write 1 x 4 GiB: $(dd if=/dev/zero of=/root/e3x/disk/a bs=64M count=64 oflag=direct 2>&1 | tail -1)"
s=$(date +%s.%N)
for i in 1 2 3 4; do dd if=/dev/zero of=/root/e3x/disk/p$i bs=64M count=16 oflag=direct 2> /dev/null & done; wait
say "dd write 4 x 1 GiB at once: $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f GB/s", 4 * 2^30 / (e - s) / 1e9 }')"
sync; echo 3 > /proc/sys/vm/drop_caches
say "dd read direct 4 GiB: $(dd if=/root/e3x/disk/a of=/dev/null bs=64M iflag=direct 2>&1 | tail -1)"
sync; echo 3 > /proc/sys/vm/drop_caches
say "dd read buffered 8M 4 GiB: $(dd if=/root/e3x/disk/a of=/dev/null bs=8M 2>&1 | tail -1)"
rm -f /root/e3x/disk/*
common="SRC=/root/e3x/src FORMATS=specforge DTYPES=bf16"
for cold in 0 1; do
  env $common COLD=$cold DDCOPY=1 BIN=$PWD/build-gpu/old/eagle3_extract LABEL=old DEST_DIR=/root/e3x/ex_old \
    KEEP=$((1 - cold)) timeout 120 bash tests/gpu/issue21_export.sh
  env $common COLD=$cold BIN=$PWD/build-gpu/new/eagle3_extract LABEL=new DEST_DIR=/root/e3x/ex_new \
    KEEP=$((1 - cold)) timeout 120 bash tests/gpu/issue21_export.sh
  if [ "$cold" = 0 ]; then
    a=$(cd /root/e3x/ex_old/issue21_bf16_specforge && find . -type f ! -name export.json | sort | xargs -P 8 -n 20 sha256sum | sort -k2 | sha256sum)
    b=$(cd /root/e3x/ex_new/issue21_bf16_specforge && find . -type f ! -name export.json | sort | xargs -P 8 -n 20 sha256sum | sort -k2 | sha256sum)
    say "files of old and new: $([ "$a" = "$b" ] && echo same || echo DIFFERENT) ($(find /root/e3x/ex_new/issue21_bf16_specforge -type f | wc -l) files)"
    rm -rf /root/e3x/ex_old /root/e3x/ex_new
  fi
  env $common COLD=$cold BIN=$PWD/build-gpu/new/eagle3_extract LABEL=new EXPORT_ARGS="--writers 1" \
    DEST_DIR=/root/e3x/ex_new timeout 120 bash tests/gpu/issue21_export.sh
  env $common COLD=$cold BIN=$PWD/build-gpu/new/eagle3_extract LABEL=new DEST_DIR=/root/e3x/ex_new \
    timeout 120 bash tests/gpu/issue21_export.sh
done
cat "$OUT/issue21_export.log" >> "$LOG"
# Where a MoE step's GPU time goes, op by op (the whole table is in the tarball's bench_*_profile.log).
VARIANTS=5 timeout 90 bash tests/gpu/issue21_moe.sh profile > /dev/null 2>&1
tar -czf /tmp/logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name issue21_call8.log -exec rm -rf {} + ; mv /tmp/logs.tgz "$OUT/"
