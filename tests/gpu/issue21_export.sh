#!/bin/bash
# Issue 21 item 3 (export at >= 90% of dd on the same disk, reading SRC once) on the GPU machine:
#   BIN=build/bin/eagle3_extract SRC=/disk/src DEST_DIR=/disk/exports DISK=/disk bash tests/gpu/issue21_export.sh
# BIN      the program (default build/bin/eagle3_extract; build/lib-gpu is put on LD_LIBRARY_PATH)
# SRC      a finished run directory to export; made first when it holds no manifest.json: a
#          random-weight llama3_8b-shape checkpoint (MAKE_CHECKPOINT, default
#          .gpu/shared/bench/make_checkpoint.py, with CONFIG, default .gpu/shared/bench/configs/llama3_8b.json)
#          and SAMPLES (default 300) chat-length samples, run in DTYPES' first dtype with --final both
#          on the CUDA backend. Then the same with each further dtype of DTYPES (SRC_<dtype> beside SRC).
# DEST_DIR where the exports go (each removed after it is timed; KEEP=1 keeps them)
# DISK     a directory on DEST_DIR's disk for dd's file (default DEST_DIR)
# FORMATS  default "specforge speculators modelopt"; DTYPES default "bf16 fp8"; COLD=1 (default)
#          drops the page cache before each export (needs root), so SRC is read from the disk;
#          COLD=0 reads SRC's shards first (cat), so that they are in the page cache (fincore says).
# LAUNCH   how the export is started: empty (default) runs BIN directly, as the README shows;
#          LAUNCH="mpirun -np 1" as the calls before 2026-12-04 evening did (mpirun's own start,
#          about 0.4 s, then counts in the wall time).
# EXPORT_ARGS more arguments for the export (e.g. "--writers 1"); LABEL names the export in the log.
# DDCOPY=1 also times dd copying SRC's shards into DISK (oflag=direct; iflag=direct when COLD=1):
#          the same bytes read from the same disk and written to it, the bound of an export whose
#          SRC is on DEST's disk.
# For each SRC and format: dd if=/dev/zero bs=64M count=64 oflag=direct on DISK, then the export:
# GB written / s, the ratio to dd, the GB read against SRC's size (once = 1.00), and the
# export's per-stage account line. Logs under $OUT (default /tmp/out).
set -uo pipefail
BIN=${BIN:-$PWD/build/bin/eagle3_extract}
SRC=${SRC:?give SRC (a run directory, or where to make one)}
DEST_DIR=${DEST_DIR:?give DEST_DIR (on the disk to measure)}
DISK=${DISK:-$DEST_DIR}
FORMATS=${FORMATS:-specforge speculators modelopt}
DTYPES=${DTYPES:-bf16 fp8}
SAMPLES=${SAMPLES:-300}
COLD=${COLD:-1}
EXPORT_ARGS=${EXPORT_ARGS:-}
LAUNCH=${LAUNCH:-}
LABEL=${LABEL:-$(basename "$BIN")}
DDCOPY=${DDCOPY:-0}
MAKE_CHECKPOINT=${MAKE_CHECKPOINT:-$PWD/.gpu/shared/bench/make_checkpoint.py}
CONFIG=${CONFIG:-$PWD/.gpu/shared/bench/configs/llama3_8b.json}
OUT=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/build/lib-gpu:${LD_LIBRARY_PATH:-}
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
mkdir -p "$OUT" "$DEST_DIR" "$DISK"
LOG=$OUT/issue21_export.log
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
say "disk: $(df -h "$DEST_DIR" | tail -1)"

# make_src DIR DTYPE: a run into DIR from the checkpoint (made once, under DIR's parent).
make_src() {
  local dir=$1 dtype=$2 ck
  ck=$(dirname "$dir")/issue21_ck
  if [ ! -f "$ck/data.jsonl" ]; then
    python3 "$MAKE_CHECKPOINT" "$CONFIG" "$ck" "$SAMPLES" > "$OUT/make_checkpoint.log" 2>&1 ||
      { say "make_checkpoint failed: $(tail -2 "$OUT/make_checkpoint.log")"; exit 1; }
  fi
  rm -rf "$dir"
  $MPIRUN -np 1 "$BIN" --backend cuda --model "$ck/ckpt" --data "$ck/data.jsonl" --out "$dir" --dtype "$dtype" \
    --final both --max-seq-len 4096 > "$OUT/run_$dtype.log" 2>&1 ||
    { say "the run of $dtype failed: $(grep -m1 critical "$OUT/run_$dtype.log")"; exit 1; }
  say "SRC $dir ($dtype): $(grep -oE 'done: .*' "$OUT/run_$dtype.log" | head -1 | cut -c1-120)"
}

dd_rate() {  # GB/s of dd oflag=direct on DISK
  local f=$DISK/issue21_dd.$$ line
  line=$(dd if=/dev/zero of="$f" bs=64M count=64 oflag=direct 2>&1 | tail -1)
  rm -f "$f"
  echo "$line" | awk '{for (i = 1; i <= NF; ++i) if ($i == "s,") { print $1 / $(i - 1) / 1e9; exit }}'
}

drop_or_fill() {  # SRC ($1) cold (COLD=1) or in the page cache; says so on stderr and in the log
  sync
  if [ "$COLD" = 1 ]; then
    echo 3 > /proc/sys/vm/drop_caches || say "cannot drop the page cache: SRC may be read from memory" >&2
  else
    cat "$1"/shard-*.h5 > /dev/null
    if command -v fincore > /dev/null; then
      say "  SRC in the page cache: $(fincore -b -n -o RES "$1"/shard-*.h5 | awk '{s += $1} END {printf "%.2f GB", s / 1e9}')" >&2
    else
      say "  SRC read once before (no fincore here to say how much of it the page cache holds)" >&2
    fi
  fi
}

dd_copy() {  # seconds for dd to copy SRC's ($1) shards into DISK, past the page cache
  local s e f iflag=; [ "$COLD" = 1 ] && iflag=iflag=direct
  drop_or_fill "$1"
  s=$(date +%s.%N)
  for f in "$1"/shard-*.h5; do dd if="$f" of="$DISK/issue21_ddcopy.$$" bs=64M $iflag oflag=direct 2> /dev/null; done
  e=$(date +%s.%N)
  rm -f "$DISK/issue21_ddcopy.$$"
  awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f", e - s }'
}

first=${DTYPES%% *}
for dtype in $DTYPES; do
  src=$SRC; [ "$dtype" = "$first" ] || src=${SRC}_$dtype
  [ -f "$src/manifest.json" ] || make_src "$src" "$dtype"
  src_bytes=$(du -cb "$src"/shard-*.h5 | tail -1 | cut -f1)
  copy_s=0
  if [ "$DDCOPY" = 1 ]; then
    copy_s=$(dd_copy "$src")
    say "dd copy of SRC ($(awk -v b="$src_bytes" 'BEGIN { printf "%.2f GB", b / 1e9 }'), cold $COLD): $copy_s s"
  fi
  for fmt in $FORMATS; do
    dest=$DEST_DIR/issue21_${dtype}_$fmt
    rm -rf "$dest"
    dd=$(dd_rate)
    drop_or_fill "$src"
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    elog=$OUT/export_${dtype}_${fmt}_${LABEL}_cold$COLD.log
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    $LAUNCH "$BIN" export --format "$fmt" $EXPORT_ARGS "$src" "$dest" > "$elog" 2>&1
    rc=$?
    end=$(date +%s.%N)
    written=$(du -cb "$dest" | tail -1 | cut -f1)
    read_gb=$(grep -oE 'export: [0-9.]+ GB read' "$elog" | grep -oE '[0-9.]+' | head -1)
    awk -v w="$written" -v s="$start" -v e="$end" -v dd="$dd" -v r="${read_gb:-0}" -v src="$src_bytes" \
      -v name="$dtype $fmt $LABEL${EXPORT_ARGS:+ $EXPORT_ARGS}${LAUNCH:+ under $LAUNCH} cold $COLD" -v rc="$rc" -v load="$load" -v copy="$copy_s" 'BEGIN {
        gbs = w / (e - s) / 1e9;
        printf "%s: rc %d, %.2f GB in %.1f s = %.2f GB/s, dd oflag=direct %.2f GB/s, ratio %.2f%s; SRC %.2f GB read %.2fx; load %s\n",
               name, rc, w / 1e9, e - s, gbs, dd, gbs / dd,
               (copy > 0 ? sprintf(", dd copy of SRC / export time %.2f", copy / (e - s)) : ""), src / 1e9, r * 1e9 / src, load }' | tee -a "$LOG"
    # The export's own clock (without mpirun's start) and its per-stage account.
    say "  $(grep -oE 'GB written in [0-9.]+ s \([0-9]+ MB/s\)' "$elog" | head -1); $(grep -oE 'export: [0-9.]+ GB read, .*' "$elog")"
    [ "$rc" -eq 0 ] || say "  $(grep -m1 critical "$elog")"
    [ "${KEEP:-0}" = 1 ] || rm -rf "$dest"
  done
done
