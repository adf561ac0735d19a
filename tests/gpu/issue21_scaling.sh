#!/bin/bash
# Issue 21 item 5 on the GPU machine: how compute tok/s grows with sample length and with the step
# budget, ours (`bench`) beside HF transformers (hf_baseline.py) in the same call, for one dense
# (llama3_8b) and one MoE shape (deepseek_v2_lite_shape). From the repository root with
# build-gpu/{new,lib-gpu,sharedbench} carried; writes $OUT/scaling.jsonl, one line per point:
#   {"peer": "ours"|"hf", "config": ..., "sweep": "length"|"budget", "seq": S, "batch": B, "tokens_per_s": ...}
# tests/gpu/plot_scaling.py turns it into docs/scaling.svg.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib-gpu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
J=$OUT/scaling.jsonl
BIN=build-gpu/new/eagle3_extract
CONFIGS=${CONFIGS:-llama3_8b deepseek_v2_lite_shape}
PEERS=${PEERS:-ours hf}
point() {  # point SWEEP CONFIG SEQ BATCH
  local sweep=$1 cfg=build-gpu/sharedbench/configs/$2.json seq=$3 batch=$4 line
  for peer in $PEERS; do
    if [ $peer = ours ]; then
      line=$($BIN bench --config $cfg --batch $batch --seq $seq --iters ${ITERS:-5} --warmup 2 2>>$OUT/scaling.err | grep '^{' | tail -1)
    else
      line=$(python3 build-gpu/sharedbench/hf_baseline.py $cfg --batch $batch --seq $seq --iters ${HF_ITERS:-3} 2>>$OUT/scaling.err | grep '^{' | tail -1)
    fi
    [ -n "$line" ] || line='{"tokens_per_s": null}'
    python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({'peer': '$peer', 'config': '$2', 'sweep': '$sweep', 'seq': $seq, 'batch': $batch, 'tokens_per_s': d.get('tokens_per_s'), 'mfu': d.get('mfu')}))" "$line" | tee -a $J
  done
}
echo "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $OUT/scaling.err
for c in $CONFIGS; do
  # Sample length at a budget of 16384 tokens a step (the run's default --max-tokens-per-step).
  for seq in 128 512 2048 8192; do point length $c $seq $((16384 / seq)); done
  # Step budget at 512-token samples.
  for batch in ${BUDGET_BATCHES:-4 16 64}; do point budget $c 512 $batch; done
done
echo "== $(date -u) end" >> $OUT/scaling.err
