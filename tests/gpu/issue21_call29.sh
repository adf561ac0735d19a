#!/bin/bash
# Ninth session (2026-12-05), first GPU call after the eighth session's changes, which had no GPU:
#   unit    the CUDA kernel tests, the storage codecs and the cuBLASLt loader (cuBLASLt is now
#           opened at the first GEMM, never linked: this is its first run on a GPU)
#   golden  the CUDA backend in bf16 against HF's references, every repository case at TP 1
#   export  issue 21 item 3: the export started directly (as the README shows) and, once, under
#           `mpirun -np 1`; SRC as in calls 24-28 (make_export_src, 300 llama3_8b-shape samples,
#           12.15 GB bf16, 6.09 GB fp8), in the page cache, then cold (with dd's copy of SRC)
#   profile kimi_k2_3layer, E3_PROFILE=1 (GPU time per op), for item 4
# Carry build-gpu/pack (carry.tar.xz of carry/{new,e3_unit_tests,golden_check,make_export_src,lib,configs}).
set -uo pipefail
STAGES=${*:-unit golden export profile}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call29.log
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nproc) cores, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
for i in 1 2 3; do /usr/bin/time -f "--version: %e s" "$C/new" --version > /dev/null 2>> "$LOG"; done
mkdir -p build/bin
ln -sfn "$C/lib" build/lib-gpu

if [[ " $STAGES " == *" unit "* ]]; then
  timeout 300 "$C/e3_unit_tests" --gtest_filter='Cuda*:StorageCodec*:CublasLt*' > "$OUT/logs/unit.log" 2>&1
  say "unit rc $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/logs/unit.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" "$OUT/logs/unit.log" | head -20 | tee -a "$LOG"
fi

if [[ " $STAGES " == *" golden "* ]]; then
  export E3_BIN=$C/new E3_GOLDEN_CHECK=$C/golden_check E3_MPIRUN="mpirun --allow-run-as-root --oversubscribe"
  export E3_GOLDEN_DIR=$PWD/tests/golden E3_SHARED_GOLDEN_DIR=/nonexistent E3_WORK=/tmp/e2e_work E3_PYTHON=python3
  jobs=()
  for c in tiny_llama_default llama_linear_bias s_llama_yarn_params s_qwen2_yarn s_qwen3_kv1_bias s_mistral_swa s_qwen3_fp8_bf16scale; do
    jobs+=("$c 1 dense"); done
  for c in s_dsv3_group s_dsv3_noqlora_yarn s_dsv2_greedy s_dsv2_grouped s_qwen3_moe_a s_qwen3_moe_b s_kimi_thinking_int4 s_glm45_noqk_r25 s_glm45_air_r75; do
    jobs+=("$c 1 moe"); done
  printf '%s\n' "${jobs[@]}" | timeout 300 xargs -P 4 -L 1 bash -c \
    'if bash tests/e2e/golden_cuda.sh "$0" "$1" "$2" > /tmp/golden_$0_$1.log 2>&1; then echo "PASS $0 tp$1 $2: $(grep -h "^ok" /tmp/golden_$0_$1.log | tr "\n" " ")"; else echo "FAIL $0 tp$1 $2: $(grep -h "FAIL\|critical\|rror" /tmp/golden_$0_$1.log | head -3 | tr "\n" " ")"; fi' \
    | sort > "$OUT/logs/golden.log"
  say "golden: $(grep -c ^PASS "$OUT/logs/golden.log") passed, $(grep -c ^FAIL "$OUT/logs/golden.log") failed"
  grep ^FAIL "$OUT/logs/golden.log" | tee -a "$LOG"
fi

if [[ " $STAGES " == *" export "* ]]; then
  mkdir -p /root/e3x
  for d in bf16 fp8; do
    dir=/root/e3x/src; [ $d = fp8 ] && dir=/root/e3x/src_fp8
    [ -f $dir/manifest.json ] && continue
    $C/make_export_src $dir --hidden 4096 --layers-total 32 --dtype $d --samples 300 --tokens 650 \
      --samples-per-shard 100 --vocab 128256 > "$OUT/logs/make_src_$d.log" 2>&1 || say "make_export_src $d failed"
  done
  exp() {  # LABEL FORMATS DTYPES COLD DDCOPY [LAUNCH]
    env SRC=/root/e3x/src FORMATS="$2" DTYPES="$3" OUT=$OUT/logs COLD=$4 DDCOPY=$5 BIN=$C/new LABEL=$1 \
      LAUNCH="${6:-}" DEST_DIR=/root/e3x/ex timeout 240 bash tests/gpu/issue21_export.sh > /dev/null
  }
  exp new "specforge speculators modelopt" "bf16 fp8" 0 0
  exp new specforge bf16 0 0
  exp new_mpirun specforge bf16 0 0 "mpirun --allow-run-as-root -np 1"
  exp new specforge "bf16 fp8" 1 1
  grep -E "specforge|speculators|modelopt|GB written|dd copy" "$OUT/logs/issue21_export.log" >> "$LOG"
fi

if [[ " $STAGES " == *" profile "* ]]; then
  E3_PROFILE=1 timeout 240 "$C/new" bench --config "$C/configs/kimi_k2_3layer.json" --batch 8 --seq 2048 --iters 5 \
    --warmup 2 > "$OUT/logs/profile_kimi.log" 2>&1
  say "profile kimi rc $?: $(grep -oE '"(tokens_per_s|mfu|matmul_ceiling_tflops)":[0-9.]+' "$OUT/logs/profile_kimi.log" | tr '\n' ' ')"
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
