#!/bin/bash
# The closing device call of issue 21's second session (2026-12-02): the CUDA kernel tests with the
# warp-specialised GEMM's 64- and 32-column k-tiles (variants 5 and 6), their rates and profiles,
# the golden contracts on the GPU (tests/gpu/issue18.sh golden), the same stored bytes at two step
# budgets and against the binary before this session (issue18.sh bytes, on a 4-layer cut of the
# DeepSeek-V2-Lite shape), and the export with SRC in the page cache and cold. Carry
# build-gpu/{new,old,e3_unit_tests,golden_check,sample_digest,lib-gpu,sharedbench,golden}.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# issue18.sh's layout
mkdir -p build/bin build/tests build-old/bin .gpu/shared
ln -sfn "$PWD/build-gpu/lib-gpu" build/lib-gpu
ln -sfn "$PWD/build-gpu/new/eagle3_extract" build/bin/eagle3_extract
ln -sfn "$PWD/build-gpu/old/eagle3_extract" build-old/bin/eagle3_extract
for t in e3_unit_tests golden_check sample_digest; do ln -sfn "$PWD/build-gpu/$t" build/tests/$t; done
ln -sfn "$PWD/build-gpu/sharedbench" .gpu/shared/bench; ln -sfn "$PWD/build-gpu/golden" .gpu/shared/golden
timeout 120 bash tests/gpu/issue21_moe.sh tests
VARIANTS="5 6" timeout 60 bash tests/gpu/issue21_moe.sh bench profile 2>/dev/null
timeout 150 bash tests/gpu/issue18.sh golden
python3 -c "import json; c=json.load(open('build-gpu/sharedbench/configs/deepseek_v2_lite_shape.json')); c['num_hidden_layers']=4; json.dump(c, open('/tmp/dsv2lite_4layer.json','w'))"
sed -i 's#^  bytes .gpu/shared/bench/configs/llama3_8b.json 40 2,16,29#  bytes /tmp/dsv2lite_4layer.json 60 0,2,3#; s#^  bytes /tmp/kimi_k2_2layer.json 40 0,1#  :#' tests/gpu/issue18.sh
timeout 80 bash tests/gpu/issue18.sh bytes
export N=300 BINS=new DTYPES=bf16
mkdir -p /root/e3x/issue21_ck
python3 build-gpu/sharedbench/make_checkpoint.py build-gpu/sharedbench/configs/llama3_8b.json /dev/shm/l3 300 > /dev/null 2>&1
ln -sfn /dev/shm/l3/ckpt /root/e3x/issue21_ck/ckpt && cp /dev/shm/l3/data.jsonl /root/e3x/issue21_ck/
for cold in 0 1; do
  COLD=$cold BIN=$PWD/build-gpu/new/eagle3_extract SRC=/root/e3x/src DEST_DIR=/root/e3x/exports FORMATS=specforge \
    DTYPES=bf16 timeout 60 bash tests/gpu/issue21_export.sh
done
tar -czf /tmp/issue21_logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name "*.log" -exec rm -rf {} + ; find "$OUT" -mindepth 1 -maxdepth 1 -name "*.log" ! -name issue21_moe.log ! -name issue18.log ! -name issue21_export.log -delete; mv /tmp/issue21_logs.tgz "$OUT/"
