#!/bin/bash
# Thirteenth session (2026-12-06), issue 21 item 4: the expert GEMM's tiles walked by L2 side
# (E3_L2_SIDES, kernels/l2_sides_cuda.cu). CALL=NN names the log.
#   probe   tests/gpu/l2_partition_probe.cu (carried as $C/l2_partition_probe): each SM's cold and warm
#           latencies to the same 2048 lines, one SM at a time, and the groups they fall into
#   unit, golden  the GPU's unit tests and the golden cases (tests/gpu/lib.sh); golden with E3_L2_SIDES=1
#   cmp     E3_L2_SIDES=0 and 1 interleaved, deepseek_v2_lite_shape and kimi_k2_3layer (bf16), two rounds
#   quant   kimi_k2_3layer with INT4 and FP8 experts (--expert-dequant gemm), E3_L2_SIDES=0 and 1
#   l2      ncu on kimi_k2_3layer's gate/up launch with E3_L2_SIDES=0 and 1: time, the L2 fabric's share
#           and sectors, DRAM bytes (--clock-control none: the clocks are left alone)
# Carry build-gpu/pack (build-gpu/carry/l2_partition_probe beside the binary). Calls 43 and 44 ran it
# before the probes' clock fix (every latency read 2 cycles), call 45 after, with all six stages
# (docs/PERFORMANCE.md, thirteenth session).
set -uo pipefail
STAGES=${*:-probe unit cmp quant}
C=$PWD/build-gpu/carry
export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
LOG=$OUT/issue21_call${CALL:-43}.log
. "$(dirname "$0")/lib.sh"
start_call
if wants probe; then
  for lines in 2048 256; do
    timeout 60 "$C/l2_partition_probe" "$lines" > "$OUT/logs/probe_$lines.log" 2>&1
    say "probe $lines rc $?: $(head -1 "$OUT/logs/probe_$lines.log")"
    for pass in cold warm; do
      say "  $pass groups: $(grep -A400 "== $pass" "$OUT/logs/probe_$lines.log" | grep -m1 -B400 "^== warm\|^$" | grep -oE 'group .' | sort | uniq -c | tr '\n' ' ')"
    done
  done
  grep "^sm" "$OUT/logs/probe_2048.log" | head -140 > "$OUT/probe_2048_table.txt"
fi
wants unit && unit_tests
if wants unit; then
  grep -E "L2 sides by SM|TheL2Probe" "$OUT/logs/unit.log" | tee -a "$LOG"
  grep -E "^sm +[0-9]+ score" "$OUT/logs/unit.log" > "$OUT/l2_sides_table.txt"
  # No split found: the sides' timings would time the same walk twice.
  if ! grep -qE "L2 sides by SM: [01]*1" "$OUT/logs/unit.log"; then
    say "no L2 sides found: cmp, quant, golden and l2 skipped"
    STAGES=" "
  fi
fi
if wants golden; then
  E3_L2_SIDES=1 golden_cases
  cp "$OUT/logs/golden.log" "$OUT/logs/golden_sides1.log"
fi
sides_line() { grep -oE "(tiles by L2 side|no L2 sides found)[^)]*\)" "$1" | head -1; }
if wants cmp; then
  for round in 1 2; do
    for c in deepseek_v2_lite_shape kimi_k2_3layer; do
      for s in 0 1; do
        bench "${c}_sides${s}_r$round" "$C/configs/$c.json" E3_L2_SIDES=$s
      done
    done
  done
  say "sides: $(sides_line "$OUT/logs/bench_kimi_k2_3layer_sides1_r1.log")"
fi
if wants quant; then
  python3 "$(dirname "$0")/kimi_quant_configs.py" "$C/configs" /tmp
  for q in int4 fp8; do
    for s in 0 1; do bench "kimi_${q}_sides${s}" /tmp/kimi_k2_3layer_$q.json E3_L2_SIDES=$s -- --expert-dequant gemm; done
  done
fi
if wants l2; then
  m='gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_ltcfabric.sum'
  m+=',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct'
  for s in 0 1; do
    say "-- l2 E3_L2_SIDES=$s kimi gate/up"
    E3_L2_SIDES=$s run_ncu "l2_kimi_gateup_sides$s" "$C/configs/kimi_k2_3layer.json" 2 \
      --metrics "breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed,$m"
    grep -E "^ +[a-z]" "$OUT/logs/ncu_l2_kimi_gateup_sides$s.log" | sort -k3 -g -r | head -14 | tee -a "$LOG"
    grep -E "(gpu__time|srcunit_tex_op_read|dram__bytes|hmma|hit_rate|ltcfabric)" "$OUT/logs/ncu_l2_kimi_gateup_sides$s.log" | tee -a "$LOG"
  done
fi
say "== done $(date -u)"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
