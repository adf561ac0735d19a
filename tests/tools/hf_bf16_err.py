"""HF transformers itself in bf16 against a golden case's fp32 reference, on the GPU machine:
the per-layer relative error golden_check reports, for comparison with ours. Quantized cases
are dequantized first with the shared oracle's st.py (pass its folder with --st).

  python3 hf_bf16_err.py [--st ../shared/golden] CASE_DIR...
"""
import argparse, json, os, re, sys, tempfile
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def plain_bf16_copy(case, st):
    """A checkpoint HF can load: text config only, no quantization, dequantized bf16 weights."""
    cfg = json.load(open(os.path.join(case, "config.json")))
    cfg = dict(cfg.get("text_config", cfg))
    cfg.pop("quantization_config", None)
    if cfg.get("model_type") == "kimi_k2":
        cfg["model_type"] = "deepseek_v3"
    layers = cfg["num_hidden_layers"]
    weights = {}
    for k, v in st.load(os.path.join(case, "model.safetensors")).items():
        m = re.match(r"model\.layers\.(\d+)\.", k)
        if (m and int(m.group(1)) >= layers) or not k.startswith(("model.", "lm_head")):
            continue  # the extra next-token-prediction layer, vision tower
        weights[k] = torch.from_numpy(np.ascontiguousarray(v)).to(torch.bfloat16)
    out = tempfile.mkdtemp()
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
    save_file(weights, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--st", help="folder holding the shared oracle's st.py (for quantized cases)")
    ap.add_argument("cases", nargs="+")
    a = ap.parse_args()
    st = None
    if a.st:
        sys.path.insert(0, a.st)
        import st as st_module
        st = st_module
    for case in a.cases:
        quantized = "quantization_config" in open(os.path.join(case, "config.json")).read()
        src = plain_bf16_copy(case, st) if quantized else case
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16, attn_implementation="eager").cuda().eval()
        ref = load_file(os.path.join(case, "ref.safetensors"))
        worst, i = {}, 0
        while f"s{i}.input_ids" in ref:
            with torch.no_grad():
                out = model(input_ids=ref[f"s{i}.input_ids"].cuda()[None], output_hidden_states=True, use_cache=False)
            for k, h in enumerate(out.hidden_states):
                r = ref[f"s{i}.hidden_states"][k]
                worst[k] = max(worst.get(k, 0.0), ((h[0].float().cpu() - r).norm() / r.norm()).item())
            i += 1
        print(os.path.basename(case.rstrip("/")), "HF bf16 vs fp32, worst per layer:",
              " ".join(f"{k}={v:.2e}" for k, v in sorted(worst.items())), flush=True)


if __name__ == "__main__":
    main()
