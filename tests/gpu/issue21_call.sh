#!/bin/bash
# The last device call of issue 21's session (2026-12-02): the llama3_8b checkpoint, the export
# measurement on it (tests/gpu/issue21_export.sh, 300 samples), the HF peer of a whole run and the
# scaling sweep, each under its own time limit so that one call returns all that finished.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
N=1000 timeout 60 bash tests/gpu/issue21.sh setup
mkdir -p /root/e3x/issue21_ck && ln -sfn /dev/shm/l3/ckpt /root/e3x/issue21_ck/ckpt
head -300 /dev/shm/l3/data.jsonl > /root/e3x/issue21_ck/data.jsonl
BIN=$PWD/build-gpu/new/eagle3_extract SRC=/root/e3x/src DEST_DIR=/root/e3x/exports timeout ${EXPORT_S:-200} bash tests/gpu/issue21_export.sh
rm -rf /root/e3x
timeout ${HF_S:-120} bash tests/gpu/issue21.sh hf
HF_ITERS=2 ITERS=4 BUDGET_BATCHES="4 64" timeout ${SCALING_S:-180} bash tests/gpu/issue21_scaling.sh
# Only 8 files come back from a call: everything in one archive, the summaries beside it.
tar -czf /tmp/issue21_logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name issue21.log ! -name issue21_export.log ! -name scaling.jsonl -exec rm -rf {} + && mv /tmp/issue21_logs.tgz "$OUT/"
