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

The draft vocabulary (data.draft_vocab_cache; `HFEagleModel.load_draft_vocab_cache` in
modelopt/torch/speculative/plugins/hf_eagle.py, `calibrate_frequent_vocab` in
modelopt/torch/speculative/utils.py):
- nothing is loaded when eagle_architecture_config.draft_vocab_size >= the base vocab_size;
  otherwise the path must be a file, torch.load(path, weights_only=True) must give a tensor of
  the d2t buffer's shape [draft_vocab_size] and dtype int64, copied into it; base logits are
  mapped to the draft vocabulary by indexing with arange(N) + d2t (any order);
- its calibration counts every token of the tokenized conversations (not only the answers)
  into a Counter, takes most_common(N) (ties: first counted first; fewer than N distinct ids
  is refused), and d2t[i] = id_i - i in that order.

Usage: read_modelopt.py DEST [--answer-only-loss]
"""

import os
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


def calibrate_frequent_vocab(counter, draft_vocab_size):
    """The calibration's mapping from a Counter: d2t int64 [N], most frequent first. Raises
    ReaderError where the calibration refuses (fewer than N distinct ids)."""
    vocab = counter.most_common(draft_vocab_size)
    if len(vocab) != draft_vocab_size:
        raise ReaderError(f"Not enough vocabs to calibrate ({len(vocab)}/{draft_vocab_size})")
    mapping = torch.zeros(draft_vocab_size, dtype=torch.int64)
    for i in range(draft_vocab_size):
        mapping[i] = vocab[i][0] - i
    return mapping


def load_draft_vocab_cache(path, draft_vocab_size, vocab_size):
    """The file as the trainer loads it into the d2t buffer: (d2t, the target id of each draft
    id), or None when the trainer loads nothing. Raises ReaderError where the trainer fails."""
    if draft_vocab_size >= vocab_size:
        return None
    if path is None or not os.path.isfile(path):
        raise ReaderError(f"Draft vocab cache is required when draft_vocab_size ({draft_vocab_size}) < vocab_size "
                          f"({vocab_size}); got d2t_path={path!r}")
    d2t = torch.zeros(draft_vocab_size, dtype=torch.int64)
    try:
        loaded = torch.load(path, map_location=d2t.device, weights_only=True)
    except Exception as e:  # what weights_only refuses, or a broken file
        raise ReaderError(f"{path}: torch.load(weights_only=True) fails: {type(e).__name__}: {e}") from None
    if not torch.is_tensor(loaded) or loaded.shape != d2t.shape or loaded.dtype != d2t.dtype:
        raise ReaderError(f"Draft vocab cache mismatch at {path}: got shape={tuple(getattr(loaded, 'shape', ()))} "
                          f"dtype={getattr(loaded, 'dtype', type(loaded).__name__)}, expected shape={tuple(d2t.shape)} "
                          f"dtype={d2t.dtype}.")
    d2t.copy_(loaded)
    return d2t, torch.arange(draft_vocab_size) + d2t


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
