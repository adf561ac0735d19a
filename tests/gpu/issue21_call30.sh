#!/bin/bash
# Ninth session (2026-12-05), second GPU call:
#   start   where `--version`'s 0.35 s go on the GPU machine (0.08 s on the build machine): the
#           files it opens over time (strace, where installed), and the time with hwloc's GPU
#           plugins and Open MPI's one-sided UCX component left out
#   bind    the export started directly, under `mpirun -np 1` (Open MPI binds one rank to one
#           core) and under `mpirun -np 1 --bind-to none`: whether the binding alone made the
#           mpirun exports of calls 23-29 slower; and the warning the program now gives for it
#   export  issue 21 item 3 on this machine: every format, bf16 and fp8, SRC in the page cache
# Carry build-gpu/pack (carry.tar.xz of carry/{new,make_export_src,lib}).
set -uo pipefail
STAGES=${*:-start bind export}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call30.log
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nproc) cores, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
mkdir -p build/bin
ln -sfn "$C/lib" build/lib-gpu

ver() {  # LABEL [env...]: the best and worst of 5 starts of --version
  local label=$1; shift
  for i in 1 2 3 4 5; do env "$@" /usr/bin/time -f "%e" "$C/new" --version 2>&1 > /dev/null | tail -1; done |
    sort -n | awk -v l="$label" '{a[NR] = $1} END {printf "--version %s: %s-%s s\n", l, a[1], a[NR]}' | tee -a "$LOG"
}
if [[ " $STAGES " == *" start "* ]]; then
  ver default
  ver "no hwloc GPU plugins" HWLOC_COMPONENTS=-cuda,-nvml,-opencl,-gl,-rsmi,-levelzero
  ver "no osc ucx" OMPI_MCA_osc=^ucx
  ver "no hwloc GPU plugins, no osc ucx, no coll hcoll/ucc" HWLOC_COMPONENTS=-cuda,-nvml,-opencl,-gl,-rsmi,-levelzero \
    OMPI_MCA_osc=^ucx OMPI_MCA_coll=^hcoll,ucc
  say "ompi_info components: $(ompi_info 2> /dev/null | grep -cE 'MCA ') ($(ompi_info 2> /dev/null | grep -E 'MCA (osc|coll|btl|pml|mtl)' | awk '{print $2 $3}' | tr '\n' ' '))"
  LD_DEBUG=statistics "$C/new" --version > "$OUT/logs/ld_statistics.log" 2>&1
  say "ld.so: $(grep -E 'total startup time|time needed for relocation' "$OUT/logs/ld_statistics.log" | head -2 | tr -s ' ' | tr '\n' ';')"
  if command -v strace > /dev/null; then
    strace -f -tt -e trace=openat,execve,clone,clone3 -o "$OUT/logs/strace_version.log" "$C/new" --version > /dev/null 2>&1
    say "strace: $(wc -l < "$OUT/logs/strace_version.log") lines, first $(head -1 "$OUT/logs/strace_version.log" | cut -c1-30), last $(tail -1 "$OUT/logs/strace_version.log" | cut -c1-30)"
  else
    say "no strace here"
  fi
fi

mkdir -p /root/e3x
for d in bf16 fp8; do
  dir=/root/e3x/src; [ $d = fp8 ] && dir=/root/e3x/src_fp8
  [ -f $dir/manifest.json ] && continue
  $C/make_export_src $dir --hidden 4096 --layers-total 32 --dtype $d --samples 300 --tokens 650 \
    --samples-per-shard 100 --vocab 128256 > "$OUT/logs/make_src_$d.log" 2>&1 || say "make_export_src $d failed"
done
exp() {  # LABEL FORMATS DTYPES [LAUNCH]
  env SRC=/root/e3x/src FORMATS="$2" DTYPES="$3" OUT=$OUT/logs COLD=0 BIN=$C/new LABEL=$1 \
    LAUNCH="${4:-}" DEST_DIR=/root/e3x/ex timeout 240 bash tests/gpu/issue21_export.sh > /dev/null
}
if [[ " $STAGES " == *" bind "* ]]; then
  exp direct specforge bf16
  exp mpirun specforge bf16 "mpirun --allow-run-as-root -np 1"
  exp mpirun_unbound specforge bf16 "mpirun --allow-run-as-root -np 1 --bind-to none"
  exp direct2 specforge bf16
  say "warning under mpirun -np 1: $(grep -m1 -oE 'warning: this rank may run on .{0,80}' "$OUT/logs/export_bf16_specforge_mpirun_cold0.log")"
  say "under --bind-to none: $(grep -c 'may run on' "$OUT/logs/export_bf16_specforge_mpirun_unbound_cold0.log") such warnings"
fi
if [[ " $STAGES " == *" export "* ]]; then
  exp all "specforge speculators modelopt" "bf16 fp8"
fi
grep -E "specforge|speculators|modelopt|GB written" "$OUT/logs/issue21_export.log" >> "$LOG"
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
