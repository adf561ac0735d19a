"""kimi_k2_3layer with quantized experts, for bench's random weights on the GPU machine.

    python3 kimi_quant_configs.py CONFIG_DIR OUT_DIR

writes OUT_DIR/kimi_k2_3layer_int4.json (compressed-tensors pack-quantized INT4, symmetric, groups
of 32: Kimi-K2.5's own format) and OUT_DIR/kimi_k2_3layer_fp8.json (FP8 e4m3 in 128 x 128 blocks:
DeepSeek-V3's) from CONFIG_DIR/kimi_k2_3layer.json.
"""
import json
import sys

config_dir, out_dir = sys.argv[1], sys.argv[2]
with open(f"{config_dir}/kimi_k2_3layer.json") as f:
    config = json.load(f)
weights = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32}
config["quantization_config"] = {
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None}}}
with open(f"{out_dir}/kimi_k2_3layer_int4.json", "w") as f:
    json.dump(config, f)
config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
with open(f"{out_dir}/kimi_k2_3layer_fp8.json", "w") as f:
    json.dump(config, f)
