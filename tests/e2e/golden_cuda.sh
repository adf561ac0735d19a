# golden_cuda.sh CASE TP dense|moe: the CUDA backend in bf16 against HF's fp32 reference, TP ranks
# sharing the GPU over the MPI communicator. dense: relative error below 2e-2 per sample and layer;
# moe: the per-token bound of ../shared/golden/README.md ("Accuracy in bf16"). Exit 77 (skipped)
# where no GPU is visible.
source "$(dirname "$0")/lib.sh"
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "SKIP: no GPU visible; the CUDA golden tests run on the GPU machine"
  exit 77
fi
case_name=$1
tp=$2
bound=(--tol 2e-2)
[ "${3:-dense}" = moe ] && bound=(--moe-bf16)
dir=$(golden_dir "$case_name")
work=$(fresh_dir "golden_cuda_${case_name}_tp${tp}")
ids=$(all_layer_ids "$dir")
for final in post-norm pre-norm; do
  LOG="$work/$final.log"
  run "$tp" --model "$dir" --data "$dir/input.jsonl" --out "$work/$final" --layers "$ids" --final "$final" \
    --dtype fp32 --backend cuda --comm mpi --log-level warn
  [ "$RC" -eq 0 ] || { cat "$LOG"; fail "run exited $RC"; }
  "$E3_GOLDEN_CHECK" "$work/$final" "$dir" --layers "$ids" --final "$final" "${bound[@]}"
done
