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
