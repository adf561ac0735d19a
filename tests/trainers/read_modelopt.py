#!/usr/bin/python3
"""Load an export directory the way NVIDIA ModelOpt's offline EAGLE-3 training does.

Modelled on NVIDIA/Model-Optimizer (a2fbac7b, 2026-08-21): `make_eagle_supervised_data_module`
in examples/speculative_decoding/eagle_utils.py and `OfflineSupervisedDataset` in
modelopt/torch/speculative/eagle/utils.py.
- the samples are `Path(DEST).rglob("*.pt")` (recursive, in file-system order; an optional
  sample_size keeps the first N); the names are not interpreted;
- torch.load(path, weights_only=True): only tensors and plain Python values may be stored;
- used keys: input_ids [T], hidden_states [T, H] (the base model's output, post-norm unless
  the file says hidden_states_prenorm=True), aux_hidden_states [T, 3H]; loss_mask [T] only
  with answer-only loss (otherwise all ones); labels are input_ids shifted left by one with
  -100 last.

Usage: read_modelopt.py DEST [--answer-only-loss]
"""

import sys
from pathlib import Path

import torch

IGNORE_TOKEN_ID = -100


class ReaderError(Exception):
    pass


class ModelOptReader:
    def __init__(self, offline_data_path, answer_only_loss=False, sample_size=-1):
        self.files = [str(p) for p in Path(offline_data_path).rglob("*.pt")]
        if not self.files:
            raise ReaderError(f"No .pt files found in {offline_data_path}")
        if sample_size > 0:
            self.files = self.files[:sample_size]
        self.answer_only_loss = answer_only_loss

    def __len__(self):
        return len(self.files)

    def raw(self, i):
        return torch.load(self.files[i], weights_only=True)

    def __getitem__(self, i):
        data = self.raw(i)
        if not isinstance(data, dict):
            raise ReaderError(f"{self.files[i]}: holds a {type(data).__name__}, not a dict")
        for key in ("input_ids", "hidden_states", "aux_hidden_states"):
            if key not in data:
                raise ReaderError(f"{self.files[i]}: no {key!r}")
        labels = torch.full_like(data["input_ids"], IGNORE_TOKEN_ID)
        labels[..., :-1] = data["input_ids"][..., 1:]
        if self.answer_only_loss:
            if "loss_mask" not in data:
                raise ReaderError(f"answer_only_loss=True requires a 'loss_mask' entry, {self.files[i]} has none")
            loss_mask = data["loss_mask"].to(data["input_ids"].dtype)
        else:
            loss_mask = torch.ones_like(data["input_ids"])
        return {"input_ids": data["input_ids"],
                "base_model_hidden_states": data["hidden_states"],
                "aux_hidden_states": data["aux_hidden_states"],
                "attention_mask": torch.ones_like(data["input_ids"]),
                "loss_mask": loss_mask,
                "labels": labels,
                "base_hidden_prenorm": bool(data.get("hidden_states_prenorm", False))}


def main(argv):
    args = [a for a in argv[1:] if a != "--answer-only-loss"]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        reader = ModelOptReader(args[0], answer_only_loss="--answer-only-loss" in argv)
        tokens = sum(int(reader[i]["input_ids"].shape[0]) for i in range(len(reader)))
    except Exception as e:  # one line, whatever failed
        print(f"read_modelopt: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"modelopt: {len(reader)} samples, {tokens} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
