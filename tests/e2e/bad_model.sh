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
# Found by comparing the config with the checkpoint, before anything is allocated from it.
expect_failure 4 "$m/config.json: intermediate_size is 320, but 'model.layers.0.mlp.down_proj.weight' in $m/model.safetensors has shape \[128, 256\]" "$work/out3"

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
expect_failure 4 "moe_intermediate_size is 64, but 'model.layers.1.mlp.experts.[0-9]*.down_proj.weight' in .*/expert_shape/model.safetensors has shape \[128, 32\]" "$work/out10"


# Hostile model directories: one model error naming the file and the key, never a crash, a hang,
# exit 1, or an allocation or a free-space check sized from the lie.
m=$(copy_model fifo_config)
rm "$m/config.json"
mkfifo "$m/config.json"
LOG="$work/fifo_config.log"
# The timeout only bounds a regression (a rank blocked in open()); the fix returns at once.
E3_MPIRUN="timeout -k 10 120 $E3_MPIRUN" run 2 --model "$m" --data "$data" --out "$work/out11"
expect_failure 4 "cannot read $m/config.json: it is a FIFO, not a regular file" "$work/out11"

m=$(copy_model fifo_weights)
rm "$m/model.safetensors"
mkfifo "$m/model.safetensors"
LOG="$work/fifo_weights.log"
E3_MPIRUN="timeout -k 10 120 $E3_MPIRUN" run 2 --model "$m" --data "$data" --out "$work/out12"
expect_failure 4 "cannot read $m/model.safetensors: it is a FIFO, not a regular file" "$work/out12"

m=$(copy_model overflow)
sed -i 's/"rope_theta": 10000.0/"rope_theta": 1e400/' "$m/config.json"
LOG="$work/overflow.log"
run 2 --model "$m" --data "$data" --out "$work/out13"
expect_failure 4 "$m/config.json: invalid JSON at key 'rope_theta': number overflow parsing '1e400'" "$work/out13"

for change in num_hidden_layers:8:1000000000 vocab_size:512:1000000000000 intermediate_size:256:4611686018427387904 \
              hidden_size:128:2147483648; do
  IFS=: read -r key was now <<< "$change"
  m=$(copy_model "absurd_$key")
  sed -i "s/\"$key\": $was,/\"$key\": $now,/" "$m/config.json"
  grep -q "\"$key\": $now," "$m/config.json" || fail "could not set $key"
  LOG="$work/absurd_$key.log"
  run 2 --model "$m" --data "$data" --out "$work/out_$key"
  expect_failure 4 "$m/config.json: '$key' is $now, more than this tool accepts" "$work/out_$key"
done
# `info` reads the config alone: the same bounds keep its memory arithmetic from overflowing.
set +e
"$E3_BIN" info "$work/absurd_intermediate_size" > "$work/info_absurd.log" 2>&1
RC=$?
set -e
[ "$RC" -eq 4 ] || { cat "$work/info_absurd.log"; fail "info on an absurd config exited $RC, expected 4"; }
grep -q "'intermediate_size' is 4611686018427387904, more than this tool accepts" "$work/info_absurd.log" ||
  { cat "$work/info_absurd.log"; fail "info did not name intermediate_size"; }

# Plausible but not this checkpoint's: found before the free-space check and before loading.
m=$(copy_model wrong_hidden)
sed -i 's/"hidden_size": 128,/"hidden_size": 65536,/' "$m/config.json"
LOG="$work/wrong_hidden.log"
run 2 --model "$m" --data "$data" --out "$work/out14"
expect_failure 4 "$m/config.json: hidden_size is 65536, but 'model.embed_tokens.weight' in $m/model.safetensors has shape \[512, 128\]" "$work/out14"

# An index may name only files in the model directory, whatever they resolve to.
m=$(copy_model escape)
mkdir -p "$work/elsewhere"
cp "$src/model.safetensors" "$work/elsewhere/model.safetensors"
"$E3_ST_INDEX" "$m/model.safetensors" | sed 's#"model.safetensors"#"../elsewhere/model.safetensors"#' \
  > "$m/model.safetensors.index.json"
grep -q '"../elsewhere/model.safetensors"' "$m/model.safetensors.index.json" || fail "could not write the index"
LOG="$work/escape.log"
run 2 --model "$m" --data "$data" --out "$work/out15"
expect_failure 4 "$m/model.safetensors.index.json: weight_map\['.*'\] is '../elsewhere/model.safetensors', not a file name in the model directory" "$work/out15"

# The HF hub cache layout: snapshots/<rev>/* are relative symlinks to ../../blobs/<hash>. It loads
# and gives the golden numbers.
hub="$work/hub/models--tiny"
mkdir -p "$hub/blobs" "$hub/snapshots/0123abcd"
cp "$src/config.json" "$hub/blobs/c0ffee01"
cp "$src/model.safetensors" "$hub/blobs/c0ffee02"
"$E3_ST_INDEX" "$src/model.safetensors" | sed 's#"model.safetensors"#"model-00001-of-00001.safetensors"#' \
  > "$hub/blobs/c0ffee03"
ln -s ../../blobs/c0ffee01 "$hub/snapshots/0123abcd/config.json"
ln -s ../../blobs/c0ffee02 "$hub/snapshots/0123abcd/model-00001-of-00001.safetensors"
ln -s ../../blobs/c0ffee03 "$hub/snapshots/0123abcd/model.safetensors.index.json"
LOG="$work/hub.log"
run 2 --model "$hub/snapshots/0123abcd" --data "$data" --out "$work/out_hub" --layers 0,1,2,3,4,5,6,7 --dtype fp32 \
  --log-level warn
[ "$RC" -eq 0 ] || { cat "$LOG"; fail "hub-cache checkpoint run exited $RC"; }
"$E3_GOLDEN_CHECK" "$work/out_hub" "$src" --layers 0,1,2,3,4,5,6,7 --final post-norm --tol 1e-4

# A manifest whose shard entry points outside --out is refused (exit 5) before a rerun touches
# anything by that name.
echo "not a shard" > "$work/victim.h5"
manifest="$work/out_hub/manifest.json"
first=$(grep -o '"file": *"[^"]*"' "$manifest" | head -1 | sed 's/.*"\([^"]*\)"$/\1/')
[ -n "$first" ] || fail "no shard entry in $manifest"
sed -i "s#\"$first\"#\"../victim.h5\"#" "$manifest"
LOG="$work/manifest_escape.log"
run 2 --model "$hub/snapshots/0123abcd" --data "$data" --out "$work/out_hub" --layers 0,1,2,3,4,5,6,7 --dtype fp32
expect_failure 5 "$manifest: shard entry 0 has \"file\": \"../victim.h5\", which is not a file name in the output directory" \
  "$work/nowhere"
[ "$(cat "$work/victim.h5")" = "not a shard" ] || fail "the rerun touched a file outside --out"
