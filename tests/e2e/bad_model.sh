# Bad checkpoints: one clear line naming the tensor and the file, exit code 4, nothing written.
source "$(dirname "$0")/lib.sh"
src="$E3_GOLDEN_DIR/tiny_llama_default"
work=$(fresh_dir bad_model)
data="$src/input.jsonl"
copy_model() {  # a writable copy of the tiny checkpoint
  rm -rf "$work/$1"
  mkdir -p "$work/$1"
  cp "$src/config.json" "$src/model.safetensors" "$work/$1/"
  echo "$work/$1"
}

m=$(copy_model missing_tensor)
"$E3_ST_INDEX" "$m/model.safetensors" --drop model.layers.3.mlp.up_proj.weight > "$m/model.safetensors.index.json"
LOG="$work/missing_tensor.log"
run 2 --model "$m" --data "$data" --out "$work/out1"
expect_failure 4 "tensor 'model.layers.3.mlp.up_proj.weight' not found in $m/model.safetensors.index.json" "$work/out1"

m=$(copy_model missing_shard)
"$E3_ST_INDEX" "$m/model.safetensors" --extra model.norm.weight=model-00002-of-00002.safetensors > "$m/model.safetensors.index.json"
LOG="$work/missing_shard.log"
run 2 --model "$m" --data "$data" --out "$work/out2"
expect_failure 4 "shard 'model-00002-of-00002.safetensors' (holding tensor 'model.norm.weight') does not exist" "$work/out2"

m=$(copy_model wrong_shape)
sed -i 's/"intermediate_size": 256/"intermediate_size": 320/' "$m/config.json"
LOG="$work/wrong_shape.log"
run 2 --model "$m" --data "$data" --out "$work/out3"
expect_failure 4 "tensor 'model.layers.0.mlp.gate_proj.weight' in $m/model.safetensors has shape \[256, 128\], expected \[320, 128\]" "$work/out3"

m=$(copy_model truncated)
size=$(stat -c %s "$m/model.safetensors")
head -c $((size - 5000)) "$src/model.safetensors" > "$m/model.safetensors"
LOG="$work/truncated.log"
run 2 --model "$m" --data "$data" --out "$work/out4"
expect_failure 4 "$m/model.safetensors: tensor '.*': data_offsets .* run past the end of the data" "$work/out4"

m=$(copy_model bad_header)
printf 'garbage!' > "$m/model.safetensors"
LOG="$work/bad_header.log"
run 1 --model "$m" --data "$data" --out "$work/out5"
expect_failure 4 "$m/model.safetensors: header length .* is not plausible" "$work/out5"

LOG="$work/tp3.log"
run 3 --model "$src" --data "$data" --out "$work/out6"
expect_failure 4 "num_attention_heads 4 is not divisible by --tp 3" "$work/out6"

m=$(copy_model arch)
sed -i 's/"LlamaForCausalLM"/"GPT2LMHeadModel"/; s/"model_type": "llama"/"model_type": "gpt2"/' "$m/config.json"
LOG="$work/arch.log"
run 2 --model "$m" --data "$data" --out "$work/out7"
expect_failure 4 "unsupported architecture 'GPT2LMHeadModel'" "$work/out7"

LOG="$work/no_config.log"
run 2 --model "$work/nowhere" --data "$data" --out "$work/out8"
expect_failure 4 "cannot read $work/nowhere/config.json" "$work/out8"

# A sharded checkpoint (index + shard) loads and gives the same numbers as the single file.
m=$(copy_model sharded)
mv "$m/model.safetensors" "$m/model-00001-of-00001.safetensors"
"$E3_ST_INDEX" "$m/model-00001-of-00001.safetensors" > "$m/model.safetensors.index.json"
LOG="$work/sharded.log"
run 2 --model "$m" --data "$data" --out "$work/out_sharded" --layers 0,1,2,3,4,5,6,7 --dtype fp32 --log-level warn
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "sharded checkpoint run exited $RC"; }
"$E3_GOLDEN_CHECK" "$work/out_sharded" "$src" --layers 0,1,2,3,4,5,6,7 --final post-norm --tol 1e-4

# MoE: a missing expert is found by the rank that owns it (expert 5 is rank 1's at TP 4), which
# alone reports it; the others exit with its code.
moe="$E3_GOLDEN_DIR/s_dsv3_group"
rm -rf "$work/missing_expert"
mkdir -p "$work/missing_expert"
cp "$moe/config.json" "$moe/model.safetensors" "$work/missing_expert/"
"$E3_ST_INDEX" "$work/missing_expert/model.safetensors" --drop model.layers.1.mlp.experts.5.up_proj.weight \
  > "$work/missing_expert/model.safetensors.index.json"
LOG="$work/missing_expert.log"
run 4 --model "$work/missing_expert" --data "$moe/input.jsonl" --out "$work/out9" --layers 0,1,2
expect_failure 4 "\[r1/4 tp1 dp0\] critical: rank 1: model error: tensor 'model.layers.1.mlp.experts.5.up_proj.weight' not found" "$work/out9"

rm -rf "$work/expert_shape"
mkdir -p "$work/expert_shape"
cp "$moe/model.safetensors" "$work/expert_shape/"
sed 's/"moe_intermediate_size": 32/"moe_intermediate_size": 64/' "$moe/config.json" > "$work/expert_shape/config.json"
LOG="$work/expert_shape.log"
run 2 --model "$work/expert_shape" --data "$moe/input.jsonl" --out "$work/out10" --layers 0,1,2
expect_failure 4 "tensor 'model.layers.1.mlp.experts.0.gate_proj.weight' in .*/expert_shape/model.safetensors has shape \[32, 128\], expected \[64, 128\]" "$work/out10"

