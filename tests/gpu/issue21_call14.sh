#!/bin/bash
# Issue 21 item 4, sixth session (2026-12-04): attention on warpgroup MMA (kernels/attention_sm90.cu).
# One binary; E3_ATTENTION_VARIANT=0 runs the mma.sync kernel it replaces (the old bits), the
# default runs the new one. Carry build-gpu/carry (eagle3_extract, e3_unit_tests, golden_check,
# sample_digest, wgmma_probe, lib, sharedbench). STAGES picks from: probe unit bench profile golden bytes.
#   probe:   the two register-A wgmma forms against a CPU product (tests/gpu/wgmma_probe.cu)
#   unit:    the CUDA kernel tests (both attention kernels); a failure stops the later stages
# BENCH_SHAPES, VARIANTS, HF=0 and PROFILE_SHAPES narrow the bench and profile stages.
#   bench:   compute tok/s, old and new attention, beside HF's hf_baseline.py, three shapes
#   profile: E3_PROFILE=1 with the new attention, deepseek_v2_lite_shape and llama3_8b
#   golden:  the repository's golden cases on the GPU (tests/e2e/golden_cuda.sh via issue18.sh)
#   bytes:   a 4-layer deepseek_v2_lite_shape cut, bf16 and fp8: the new kernel's stored bits at
#            step budgets 16384 and 6000, and the old kernel's against the binary before (sha)
set -uo pipefail
STAGES=${STAGES:-probe unit bench profile golden bytes}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/issue21_call14.log
say() { echo "$*" | tee -a "$LOG"; }
fields() { grep -oE '"(tokens_per_s|mfu|matmul_ceiling_tflops|step_ms)":[0-9.]+' "$1" | tr '\n' ' '; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
CFG=$C/sharedbench/configs
say "== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) stages: $STAGES"
if has probe; then
  timeout 60 "$C/wgmma_probe" 2>&1 | tee -a "$LOG"
fi
if has unit; then
  timeout 300 "$C/e3_unit_tests" --gtest_filter='*Cuda*' > "$OUT/tests.log" 2>&1
  rc=$?
  say "unit rc $rc: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
  grep -E "Failure|Expected|Which is|FAILED|rel err|error" "$OUT/tests.log" | head -30 | tee -a "$LOG"
  if [ $rc -ne 0 ]; then say "unit tests failed: later stages skipped"; STAGES="probe unit"; fi
fi
if has bench; then
  for s in ${BENCH_SHAPES:-deepseek_v2_lite_shape llama3_8b kimi_k2_3layer}; do
    for v in ${VARIANTS:-0 1}; do
      E3_ATTENTION_VARIANT=$v timeout 150 "$C/eagle3_extract" bench --config "$CFG/$s.json" --batch 8 --seq 2048 \
        --iters 5 --warmup 2 > "$OUT/bench_${s}_a$v.log" 2>&1
      say "$(date -u +%T) $s attention $v rc $?: $(fields "$OUT/bench_${s}_a$v.log")"
    done
    [ "${HF:-1}" = 1 ] || continue
    timeout 150 python3 "$C/sharedbench/hf_baseline.py" "$CFG/$s.json" > "$OUT/hf_$s.log" 2>&1
    say "$(date -u +%T) HF $s rc $?: $(tail -1 "$OUT/hf_$s.log")"
  done
fi
if has profile; then
  for s in ${PROFILE_SHAPES:-deepseek_v2_lite_shape llama3_8b}; do
    E3_PROFILE=1 timeout 120 "$C/eagle3_extract" bench --config "$CFG/$s.json" --batch 8 --seq 2048 --iters 5 \
      --warmup 2 > "$OUT/profile_$s.log" 2>&1
    say "profile $s: $(grep -E '^attention ' "$OUT/profile_$s.log") $(fields "$OUT/profile_$s.log")"
  done
fi
if has golden; then
  # issue18.sh's layout; its golden stage runs the repository's cases (the shared ones stay behind).
  mkdir -p build/bin build/tests .gpu/shared
  ln -sfn "$C/lib" build/lib-gpu
  ln -sfn "$C/eagle3_extract" build/bin/eagle3_extract
  for t in e3_unit_tests golden_check sample_digest; do ln -sfn "$C/$t" build/tests/$t; done
  ln -sfn "$C/sharedbench" .gpu/shared/bench
  timeout 240 bash tests/gpu/issue18.sh golden
  cat "$OUT/issue18.log" >> "$LOG"; rm -f "$OUT/issue18.log"
fi
if has bytes; then
  python3 -c "import json; c=json.load(open('$CFG/deepseek_v2_lite_shape.json')); c['num_hidden_layers']=4; json.dump(c, open('/tmp/ds4.json','w'))"
  d=/dev/shm/ck_ds4; rm -rf $d
  python3 "$C/sharedbench/make_checkpoint.py" /tmp/ds4.json $d 60 > /dev/null 2>&1 || say "make_checkpoint failed"
  for dtype in bf16 fp8; do
    for run in "1 16384" "1 6000" "0 16384"; do
      set -- $run
      o=/dev/shm/out_$1_$2
      rm -rf "$o"
      E3_ATTENTION_VARIANT=$1 "$C/eagle3_extract" --model $d/ckpt --data $d/data.jsonl --out "$o" --max-seq-len 4096 \
        --dtype $dtype --max-tokens-per-step $2 --layers 0,2,3 --samples-per-shard 16 > "$o.log" 2>&1
      say "bytes $dtype attention $1 budget $2: rc $? $(grep -oE 'done: .*' "$o.log" | head -1 | cut -c1-100)"
      "$C/sample_digest" "$o" > "/tmp/${dtype}_$1_$2.digest"
      rm -rf "$o"
    done
    if [ -s /tmp/${dtype}_1_16384.digest ] && cmp -s /tmp/${dtype}_1_16384.digest /tmp/${dtype}_1_6000.digest; then
      say "SAME BYTES $dtype: new attention at budgets 16384 and 6000 ($(wc -l < /tmp/${dtype}_1_16384.digest) sample datasets)"
    else say "DIFFERENT $dtype: new attention at budgets 16384 and 6000"; fi
    say "old attention $dtype digest sha: $(sha256sum < /tmp/${dtype}_0_16384.digest | cut -c1-16); new: $(sha256sum < /tmp/${dtype}_1_16384.digest | cut -c1-16)"
  done
  rm -rf $d
fi
say "== done $(date -u)"
tar -czf /tmp/logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name issue21_call14.log -exec rm -rf {} + ; mv /tmp/logs.tgz "$OUT/"
