#!/bin/bash
# Issue 21 item 3, fifth session (2026-12-03): the export's sample buffers in 2 MiB pages with
# MADV_HUGEPAGE ("huge", build-gpu/huge) against main's 4 KiB-page buffers ("base",
# build-gpu/base), SRC in the page cache, alternately, and their files compared.
# Carry build-gpu/{base,huge,lib-gpu,sharedbench}.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/issue21_call13.log
say() { echo "$*" | tee -a "$LOG"; }
say "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
mkdir -p build/bin .gpu/shared
ln -sfn "$PWD/build-gpu/lib-gpu" build/lib-gpu
ln -sfn "$PWD/build-gpu/base/eagle3_extract" build/bin/eagle3_extract
ln -sfn "$PWD/build-gpu/sharedbench" .gpu/shared/bench
mkdir -p /root/e3x/issue21_ck
python3 build-gpu/sharedbench/make_checkpoint.py build-gpu/sharedbench/configs/llama3_8b.json /dev/shm/l3 300 > "$OUT/make_checkpoint.log" 2>&1
ln -sfn /dev/shm/l3/ckpt /root/e3x/issue21_ck/ckpt && cp /dev/shm/l3/data.jsonl /root/e3x/issue21_ck/
common="SRC=/root/e3x/src FORMATS=specforge DTYPES=bf16 COLD=0"
env $common BIN=$PWD/build-gpu/base/eagle3_extract LABEL=base DEST_DIR=/root/e3x/ex_base KEEP=1 timeout 100 bash tests/gpu/issue21_export.sh
env $common BIN=$PWD/build-gpu/huge/eagle3_extract LABEL=huge DEST_DIR=/root/e3x/ex_huge KEEP=1 timeout 100 bash tests/gpu/issue21_export.sh
a=$(cd /root/e3x/ex_base/issue21_bf16_specforge && find . -type f ! -name export.json | sort | xargs -P 8 -n 20 sha256sum | sort -k2 | sha256sum)
b=$(cd /root/e3x/ex_huge/issue21_bf16_specforge && find . -type f ! -name export.json | sort | xargs -P 8 -n 20 sha256sum | sort -k2 | sha256sum)
say "files of base and huge: $([ "$a" = "$b" ] && echo same || echo DIFFERENT) ($(find /root/e3x/ex_huge/issue21_bf16_specforge -type f | wc -l) files)"
rm -rf /root/e3x/ex_base /root/e3x/ex_huge
for b in base huge base huge; do
  env $common BIN=$PWD/build-gpu/$b/eagle3_extract LABEL=$b DEST_DIR=/root/e3x/ex_$b timeout 100 bash tests/gpu/issue21_export.sh
done
grep -E "specforge|GB written" "$OUT/issue21_export.log" >> "$LOG"
say "== done $(date -u)"
tar -czf /tmp/logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name issue21_call13.log -exec rm -rf {} + ; mv /tmp/logs.tgz "$OUT/"
