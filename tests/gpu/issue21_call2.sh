#!/bin/bash
# The last device call of issue 21's second session (2026-12-02), after the warp-specialised
# grouped GEMM: the load with a cold page cache, our whole run and hf_extract.py on the same
# llama3_8b files in one call, the export with SRC in the page cache (COLD=0) and dropped from it
# (COLD=1), and DeepSeek-V2-Lite's scaling points beside HF. Each part under its own time limit,
# so that one call returns all that finished. Carry build-gpu/{new,load_bench,lib-gpu,sharedbench}.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
export N=${N:-300} BINS=new DTYPES=bf16
timeout ${COLD_S:-170} bash tests/gpu/issue21.sh setup dd cold
timeout ${RUNS_S:-170} bash tests/gpu/issue21.sh runs hf
mkdir -p /root/e3x/issue21_ck && ln -sfn /dev/shm/l3/ckpt /root/e3x/issue21_ck/ckpt && cp /dev/shm/l3/data.jsonl /root/e3x/issue21_ck/
for cold in 0 1; do
  COLD=$cold BIN=$PWD/build-gpu/new/eagle3_extract SRC=/root/e3x/src DEST_DIR=/root/e3x/exports FORMATS=specforge \
    DTYPES=bf16 timeout ${EXPORT_S:-90} bash tests/gpu/issue21_export.sh
done
rm -rf /root/e3x
CONFIGS=deepseek_v2_lite_shape HF_ITERS=2 ITERS=4 BUDGET_BATCHES="4 64" timeout ${SCALING_S:-150} bash tests/gpu/issue21_scaling.sh
# Only 8 files come back from a call: everything in one archive, the summaries beside it.
tar -czf /tmp/issue21_logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name issue21.log ! -name issue21_export.log ! -name scaling.jsonl -exec rm -rf {} + && mv /tmp/issue21_logs.tgz "$OUT/"
