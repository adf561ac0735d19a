# Sourced by the GPU-machine scripts (issue21_call32.sh and later): timing `bench`, the unit tests, the golden cases.
# Wants C (the unpacked carry: the binary as $C/new), OUT (logs under $OUT/logs) and LOG; bench and run_ncu
# run E3_BENCH_BIN instead where it is set (a baseline build carried beside the new one).
say() { echo "$*" | tee -a "$LOG"; }
# wants STAGE: whether STAGE is among the script's $STAGES.
wants() { [[ " $STAGES " == *" $1 "* ]]; }
# begin_call N DEFAULT_STAGES [STAGE...]: the common start of a call script run from the repository root with the
# carry unpacked in build-gpu/carry: C, OUT (/tmp/out unless set), LOG ($OUT/issue21_call$CALL.log, CALL = N unless
# set), STAGES (the script's arguments, else DEFAULT_STAGES), the carried libraries first, then start_call.
begin_call() {
  CALL=${CALL:-$1} STAGES=$2
  shift 2
  [ $# -gt 0 ] && STAGES="$*"
  C=$PWD/build-gpu/carry
  export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
  OUT=${OUT:-/tmp/out}
  mkdir -p "$OUT/logs"
  LOG=$OUT/issue21_call$CALL.log
  start_call
}
# The machine's line in the log, and the carried libraries where tests/e2e expects a build's.
start_call() {
  say "== $(date -u) $(nproc) cores, $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,enforced.power.limit --format=csv,noheader)"
  mkdir -p build/bin
  ln -sfn "$C/lib" build/lib-gpu
}
fields() { grep -oE '"(tokens_per_s|mfu|matmul_ceiling_tflops|matmul_ceiling_after_tflops)":[0-9.]+' "$1" | tr '\n' ' '; }
bench() {  # NAME CONFIG [env...] -- [args...]: BENCH_ITERS (5) timed steps, killed after BENCH_LIMIT
  # seconds (240: a call expecting a hang can keep it short)
  local name=$1 config=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  env "${envs[@]}" timeout -k 10 "${BENCH_LIMIT:-240}" "${E3_BENCH_BIN:-$C/new}" bench --config "$config" --batch 8 --seq 2048 --iters "${BENCH_ITERS:-5}" --warmup 2 "$@" \
    > "$OUT/logs/bench_$name.log" 2>&1
  local rc=$?  # before the line's $(date) replaces $?
  say "$(date -u +%T) $name rc $rc: $(fields "$OUT/logs/bench_$name.log")"
}
# The GPU's unit tests (the CUDA kernels' bit checks among them) into $OUT/logs/unit.log.
unit_tests() {
  timeout -k 10 400 "$C/e3_unit_tests" --gtest_filter='Cuda*:GemmEpilogue*:StorageCodec*:CublasLt*:MoeScratch*' > "$OUT/logs/unit.log" 2>&1
  say "unit rc $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/logs/unit.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|differs" "$OUT/logs/unit.log" | head -30 | tee -a "$LOG"
}
# Every repository golden case at TP 1, the CUDA backend in bf16 against HF's references, four at a
# time, into $OUT/logs/golden.log (tests/e2e/golden_cuda.sh; wants the repository as the working folder).
golden_cases() {
  export E3_BIN=$C/new E3_GOLDEN_CHECK=$C/golden_check E3_MPIRUN="mpirun --allow-run-as-root --oversubscribe"
  export E3_GOLDEN_DIR=$PWD/tests/golden E3_SHARED_GOLDEN_DIR=/nonexistent E3_WORK=/tmp/e2e_work E3_PYTHON=python3
  local jobs=() c
  for c in tiny_llama_default llama_linear_bias s_llama_yarn_params s_qwen2_yarn s_qwen3_kv1_bias s_mistral_swa s_qwen3_fp8_bf16scale; do
    jobs+=("$c 1 dense"); done
  for c in s_dsv3_group s_dsv3_noqlora_yarn s_dsv2_greedy s_dsv2_grouped s_qwen3_moe_a s_qwen3_moe_b s_kimi_thinking_int4 s_glm45_noqk_r25 s_glm45_air_r75; do
    jobs+=("$c 1 moe"); done
  printf '%s\n' "${jobs[@]}" | timeout -k 10 300 xargs -P 4 -L 1 bash -c \
    'if bash tests/e2e/golden_cuda.sh "$0" "$1" "$2" > /tmp/golden_$0_$1.log 2>&1; then echo "PASS $0 tp$1 $2: $(grep -h "^ok" /tmp/golden_$0_$1.log | tr "\n" " ")"; else echo "FAIL $0 tp$1 $2: $(grep -h "FAIL\|critical\|rror" /tmp/golden_$0_$1.log | head -3 | tr "\n" " ")"; fi' \
    | sort > "$OUT/logs/golden.log"
  say "golden: $(grep -c ^PASS "$OUT/logs/golden.log") passed, $(grep -c ^FAIL "$OUT/logs/golden.log") failed"
  grep ^FAIL "$OUT/logs/golden.log" | tee -a "$LOG"
}
# run_ncu NAME CONFIG SKIP [ncu args...]: ncu on launch SKIP of the grouped expert GEMM (NCU_KERNEL, a
# regex of kernel names, grouped_gemm_ws unless set; even: gate/up, odd: down) of one bench step of
# 8 x NCU_SEQ (2048) tokens, into $OUT/logs/ncu_NAME.log (--clock-control none: the clocks are left alone).
run_ncu() {
  local name=$1 config=$2 skip=$3; shift 3
  timeout -k 10 240 ncu --clock-control none --kernel-name "regex:${NCU_KERNEL:-grouped_gemm_ws}" --launch-skip "$skip" --launch-count 1 "$@" \
    "${E3_BENCH_BIN:-$C/new}" bench --config "$config" --batch 8 --seq "${NCU_SEQ:-2048}" --iters 1 --warmup 1 > "$OUT/logs/ncu_$name.log" 2>&1
  say "ncu $name rc $?:"
}
# ncu_stalls NAME CONFIG SKIP: run_ncu twice on one launch: ncu's speed-of-light, memory, scheduler and
# warp-state sections (their headline lines into the log), then per-instruction stall samples (SASS, csv) into
# $OUT/logs/ncu_NAME_sass.log, summed by reason with the busiest instructions into the log.
ncu_stalls() {
  local name=$1 config=$2 skip=$3
  run_ncu "${name}_sol" "$config" "$skip" --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis
  grep -E "Duration|Throughput|Pipe|Issued|Eligible|Active Warps|Stall|L2 Hit|DRAM" "$OUT/logs/ncu_${name}_sol.log" | head -40 | tee -a "$LOG"
  run_ncu "${name}_sass" "$config" "$skip" --section SourceCounters --section WarpStateStats --page source --csv --print-source sass
  say "sass $(wc -l < "$OUT/logs/ncu_${name}_sass.log") lines"
  python3 "$(dirname "${BASH_SOURCE[0]}")/ncu_stall_summary.py" "$OUT/logs/ncu_${name}_sass.log" 20 2>&1 | tee -a "$LOG"
}
# power_bench NAME CONFIG [env...]: bench of BENCH_ITERS (60) steps with nvidia-smi dmon (power, clocks, one
# line a second) beside it, into $OUT/logs/dmon_NAME.log; logs dmon's header and its 8 seconds of highest power.
power_bench() {
  local name=$1
  nvidia-smi dmon -s pc -d 1 > "$OUT/logs/dmon_$name.log" 2>&1 &
  local dmon=$!
  BENCH_ITERS=${BENCH_ITERS:-60} bench "$@"
  kill "$dmon"; wait "$dmon" 2>/dev/null
  say "$name dmon $(grep -E '^# *gpu' "$OUT/logs/dmon_$name.log" | head -1 | tr -s ' ')"
  say "$name dmon $(grep -vE '^#' "$OUT/logs/dmon_$name.log" | sort -k2 -g -r | head -8 | tr -s ' ' | tr '\n' '|')"
}
