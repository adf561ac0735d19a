#!/bin/bash
# Tenth session (2026-12-05), issue 21 item 4: how the warp-specialised grouped GEMM's persistent
# blocks walk the tiles. Variant 5 (each expert's tiles m-tile major, every gridDim-th tile per
# block) against 7 (n-tile major: the m-tiles that share a slab of the expert's weights side by
# side) and 8 (7 with each block taking its next tile from a counter), in the same call:
#   unit     the CUDA kernel tests (every variant's bits against the cp.async kernel's)
#   bench    compute-only tok/s and MFU of both MoE shapes, two rounds of 5, 7, 8
#   quant    kimi_k2_3layer with INT4 and FP8 experts converted in the GEMM, 5 against the best
#   profile  E3_PROFILE=1 (GPU time per op) of kimi_k2_3layer, 5, 7 and 8
#   ncu      device-memory bytes and L2 hit rate of one gate/up and one down launch of
#            kimi_k2_3layer, 5 against 8 (ncu --clock-control none: the clocks are left alone)
#   hf       hf_baseline.py on both shapes
# Carry build-gpu/pack (carry.tar.xz of carry/{new,e3_unit_tests,lib,configs,hf_baseline.py}).
set -uo pipefail
STAGES=${*:-unit bench quant profile ncu hf}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call32.log
VARIANTS=${VARIANTS:-5 7 8}
. "$(dirname "$0")/lib.sh"
say "== $(date -u) $(nproc) cores, $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
if [[ " $STAGES " == *" unit "* ]]; then
  unit_tests
fi
if [[ " $STAGES " == *" bench "* ]]; then
  for s in kimi_k2_3layer deepseek_v2_lite_shape; do
    for round in 1 2; do
      for v in $VARIANTS; do bench "${s}_v${v}_r$round" "$C/configs/$s.json" E3_GEMM_VARIANT=$v; done
    done
  done
fi
if [[ " $STAGES " == *" quant "* ]]; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
  for q in int4 fp8; do
    for v in $VARIANTS; do bench "kimi_${q}_gemm_v$v" /tmp/kimi_k2_3layer_$q.json E3_GEMM_VARIANT=$v -- --expert-dequant gemm; done
  done
fi
if [[ " $STAGES " == *" profile "* ]]; then
  for v in $VARIANTS; do
    bench "kimi_v${v}_profile" "$C/configs/kimi_k2_3layer.json" E3_GEMM_VARIANT=$v E3_PROFILE=1
    grep -iE "moe_gemm|total" "$OUT/logs/bench_kimi_v${v}_profile.log" | head -6 | sed 's/^/   /' | tee -a "$LOG"
  done
fi
if [[ " $STAGES " == *" ncu "* ]]; then
  if command -v ncu > /dev/null; then
    for v in 5 8; do
      # A step of kimi_k2_3layer launches the gate/up and the down GEMM of each MoE layer: skip the
      # first step's, then one gate/up and one down.
      E3_GEMM_VARIANT=$v timeout 300 ncu --clock-control none --kernel-name regex:grouped_gemm_ws --launch-skip 4 \
        --launch-count 2 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
        "$C/new" bench --config "$C/configs/kimi_k2_3layer.json" --batch 8 --seq 2048 --iters 1 --warmup 1 \
        > "$OUT/logs/ncu_v$v.log" 2>&1
      say "ncu v$v rc $?:"
      grep -E "grouped_gemm_ws|gpu__time|dram__|lts__|sm__throughput" "$OUT/logs/ncu_v$v.log" | sed 's/^ */   /' | cut -c1-150 | tee -a "$LOG"
    done
  else
    say "no ncu here"
  fi
fi
if [[ " $STAGES " == *" hf "* ]]; then
  for s in kimi_k2_3layer deepseek_v2_lite_shape; do
    timeout 300 python3 "$C/hf_baseline.py" "$C/configs/$s.json" > "$OUT/logs/hf_$s.log" 2>&1
    say "$(date -u +%T) HF $s rc $?: $(tail -1 "$OUT/logs/hf_$s.log")"
  done
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
