#!/bin/bash
# Ninth session (2026-12-05), third GPU call: a process started alone now also leaves out hwloc's
# GPU plugins (HWLOC_COMPONENTS, parallel/mpi_env.h). --version with that default and with the
# variable set empty by the user (hwloc's own default, as before), then the CUDA backend in a
# process started alone: a short bench and a run of tests/golden/tiny_llama_default, verified.
# Carry build-gpu/pack (carry.tar.xz of carry/{new,lib,configs}).
set -uo pipefail
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/issue21_call31.log
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nproc) cores, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
ver() {  # LABEL [env...]: 5 starts of --version, each one's seconds and exit code
  local label=$1; shift
  say "--version $label: $(for i in 1 2 3 4 5; do env "$@" /usr/bin/time -f "%e s rc %x" "$C/new" --version 2>&1 > /dev/null | tail -1; done | tr '\n' ',')"
}
ver "new default"
ver "HWLOC_COMPONENTS set empty" HWLOC_COMPONENTS=
ver "new default (again)"
timeout 120 "$C/new" bench --config "$C/configs/llama3_8b.json" --batch 2 --seq 512 --iters 2 --warmup 1 > "$OUT/bench.log" 2>&1
say "bench started alone: rc $?: $(grep -oE '"(tokens_per_s|mfu)":[0-9.]+' "$OUT/bench.log" | tr '\n' ' ')"
m=tests/golden/tiny_llama_default
rm -rf /tmp/tiny_out
timeout 120 "$C/new" --model $m --data $m/input.jsonl --out /tmp/tiny_out --backend cuda > "$OUT/tiny.log" 2>&1
say "tiny run started alone (cuda): rc $?: $(grep -oE 'done: .{0,100}' "$OUT/tiny.log" | head -1)"
timeout 60 "$C/new" verify /tmp/tiny_out > "$OUT/verify.log" 2>&1
say "verify: rc $?: $(tail -1 "$OUT/verify.log" | cut -c1-160)"
grep -iE "hwloc|warn|error" "$OUT"/*.log | grep -v "$LOG" | head -5 | tee -a "$LOG"
say "== done $(date -u)"
