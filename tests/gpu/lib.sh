# Sourced by the GPU-machine scripts that time `bench` (issue21_call32.sh, issue21_call33.sh).
# Wants C (the unpacked carry: the binary as $C/new), OUT (logs under $OUT/logs) and LOG.
say() { echo "$*" | tee -a "$LOG"; }
fields() { grep -oE '"(tokens_per_s|mfu|matmul_ceiling_tflops|matmul_ceiling_after_tflops)":[0-9.]+' "$1" | tr '\n' ' '; }
bench() {  # NAME CONFIG [env...] -- [args...]
  local name=$1 config=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  env "${envs[@]}" timeout 240 "$C/new" bench --config "$config" --batch 8 --seq 2048 --iters 5 --warmup 2 "$@" \
    > "$OUT/logs/bench_$name.log" 2>&1
  say "$(date -u +%T) $name rc $?: $(fields "$OUT/logs/bench_$name.log")"
}
