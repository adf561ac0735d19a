#!/usr/bin/python3
"""Writes a Llama-shaped bf16 checkpoint of random values (sharded, with an index) for load_bench.

Defaults give Llama-3-8B's shapes (about 15 GiB; a rank at TP 1 reads all but lm_head.weight):
  make_load_checkpoint.py OUT_DIR [--hidden 4096 --inter 14336 --layers 32 --heads 32 --kv-heads 8
                                   --vocab 128256 --shards 5]
"""
import argparse
import json
import os
import struct

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inter", type=int, default=14336)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--shards", type=int, default=5)
    a = ap.parse_args()
    H, I, hd = a.hidden, a.inter, a.hidden // a.heads
    tensors = [("model.embed_tokens.weight", [a.vocab, H])]
    for l in range(a.layers):
        p = f"model.layers.{l}."
        tensors += [(p + "input_layernorm.weight", [H]), (p + "post_attention_layernorm.weight", [H]),
                    (p + "self_attn.q_proj.weight", [a.heads * hd, H]),
                    (p + "self_attn.k_proj.weight", [a.kv_heads * hd, H]),
                    (p + "self_attn.v_proj.weight", [a.kv_heads * hd, H]),
                    (p + "self_attn.o_proj.weight", [H, a.heads * hd]),
                    (p + "mlp.gate_proj.weight", [I, H]), (p + "mlp.up_proj.weight", [I, H]),
                    (p + "mlp.down_proj.weight", [H, I])]
    tensors += [("model.norm.weight", [H]), ("lm_head.weight", [a.vocab, H])]
    os.makedirs(a.out, exist_ok=True)
    total = sum(int(np.prod(s)) * 2 for _, s in tensors)
    per_shard = total / a.shards
    groups, cur, size = [], [], 0
    for t in tensors:
        cur.append(t)
        size += int(np.prod(t[1])) * 2
        if size >= per_shard * (len(groups) + 1) and len(groups) < a.shards - 1:
            groups.append(cur)
            cur = []
    groups.append(cur)
    rng = np.random.default_rng(0)
    weight_map = {}
    for i, group in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        header, off = {}, 0
        for n, s in group:
            nbytes = int(np.prod(s)) * 2
            header[n] = {"dtype": "BF16", "shape": s, "data_offsets": [off, off + nbytes]}
            off += nbytes
            weight_map[n] = name
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(a.out, name), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for n, s in group:
                # bf16 of values in about [-0.03, 0.03]: a sign, exponents 117..121, any mantissa.
                count = int(np.prod(s))
                bits = (rng.integers(117, 122, count, dtype=np.uint16) << 7) | rng.integers(0, 128, count, dtype=np.uint16)
                bits |= rng.integers(0, 2, count, dtype=np.uint16) << 15
                f.write(bits.astype("<u2").tobytes())
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
                   "intermediate_size": I, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
                   "num_key_value_heads": a.kv_heads, "head_dim": hd, "vocab_size": a.vocab,
                   "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 8192,
                   "tie_word_embeddings": False, "torch_dtype": "bfloat16"}, f, indent=1)
    print(f"{a.out}: {total / 2**30:.2f} GiB in {len(groups)} shards")


if __name__ == "__main__":
    main()
