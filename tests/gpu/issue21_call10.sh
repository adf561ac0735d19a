#!/bin/bash
# Issue 21 item 4, fifth session (2026-12-03): the attention kernel with 128 queries per block
# (8 warps, three K/V buffers, masks only where a tile cuts through a warp's rows). Old is
# build-gpu/old (8461775, the attention of 64 queries per block), new is this session's binary.
#   the CUDA kernel tests; compute tok/s of old and new on the three bench shapes, each beside
#   HF's hf_baseline.py; E3_PROFILE=1 of new on deepseek_v2_lite_shape and llama3_8b; and the
#   stored bits of old and new (issue18.sh bytes on a 4-layer cut of deepseek_v2_lite_shape).
# Carry build-gpu/{new,old,e3_unit_tests,golden_check,sample_digest,lib-gpu,sharedbench}.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/issue21_call10.log
say() { echo "$*" | tee -a "$LOG"; }
fields() { grep -oE '"(tokens_per_s|mfu|matmul_ceiling_tflops|step_ms)":[0-9.]+' "$1" | tr '\n' ' '; }
CFG=build-gpu/sharedbench/configs
say "== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
timeout 120 build-gpu/e3_unit_tests --gtest_filter='Cuda*' > "$OUT/tests.log" 2>&1
say "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|FAILED" "$OUT/tests.log" | head -20 | tee -a "$LOG"
for s in deepseek_v2_lite_shape kimi_k2_3layer llama3_8b; do
  for b in old new; do
    timeout 120 build-gpu/$b/eagle3_extract bench --config $CFG/$s.json --batch 8 --seq 2048 --iters 5 --warmup 2 \
      > "$OUT/bench_${s}_$b.log" 2>&1
    say "$(date -u +%T) $s $b rc $?: $(fields "$OUT/bench_${s}_$b.log")"
  done
  timeout 150 python3 build-gpu/sharedbench/hf_baseline.py $CFG/$s.json > "$OUT/hf_$s.log" 2>&1
  say "$(date -u +%T) HF $s rc $?: $(tail -1 "$OUT/hf_$s.log")"
done
for s in deepseek_v2_lite_shape llama3_8b; do
  E3_PROFILE=1 timeout 120 build-gpu/new/eagle3_extract bench --config $CFG/$s.json --batch 8 --seq 2048 --iters 5 \
    --warmup 2 > "$OUT/profile_${s}_new.log" 2>&1
  say "profile $s new: $(grep -E '^attention ' "$OUT/profile_${s}_new.log") $(fields "$OUT/profile_${s}_new.log")"
done
# issue18.sh's layout, and its bytes stage on a 4-layer cut of deepseek_v2_lite_shape only
mkdir -p build/bin build/tests build-old/bin .gpu/shared
ln -sfn "$PWD/build-gpu/lib-gpu" build/lib-gpu
ln -sfn "$PWD/build-gpu/new/eagle3_extract" build/bin/eagle3_extract
ln -sfn "$PWD/build-gpu/old/eagle3_extract" build-old/bin/eagle3_extract
for t in e3_unit_tests golden_check sample_digest; do ln -sfn "$PWD/build-gpu/$t" build/tests/$t; done
ln -sfn "$PWD/build-gpu/sharedbench" .gpu/shared/bench
python3 -c "import json; c=json.load(open('$CFG/deepseek_v2_lite_shape.json')); c['num_hidden_layers']=4; json.dump(c, open('/tmp/dsv2lite_4layer.json','w'))"
sed -i 's#^  bytes .gpu/shared/bench/configs/llama3_8b.json 40 2,16,29#  bytes /tmp/dsv2lite_4layer.json 60 0,2,3#; s#^  bytes /tmp/kimi_k2_2layer.json 40 0,1#  :#' tests/gpu/issue18.sh
timeout 100 bash tests/gpu/issue18.sh bytes
cat "$OUT/issue18.log" >> "$LOG"
say "== done $(date -u)"
tar -czf /tmp/logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name issue21_call10.log -exec rm -rf {} + ; mv /tmp/logs.tgz "$OUT/"
