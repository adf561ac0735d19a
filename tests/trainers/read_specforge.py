#!/usr/bin/python3
"""Load an export directory the way SpecForge's offline EAGLE-3 training does.

Modelled on sgl-project/SpecForge (a6b6b023, 2026-08-08): `list_feature_files` and
`_inspect_feature_file` in specforge/runtime/data_plane/offline_reader.py,
`load_feature_file` in .../feature_store.py and `normalize_offline_sample`
(eagle3_offline_v1) in specforge/algorithms/eagle3/data.py; the older
scripts/train_eagle3.py path (`list_local_files`, `OfflineEagle3Dataset`) reads the same way.
- every file under DEST (recursively) whose name ends in .ckpt or .ckpt.gz is a sample; the
  absolute paths are sorted as strings, and that is the order; the rows_*/data_* names are
  not interpreted;
- torch.load(path, weights_only=False, mmap=True) (.gz: decompressed first); torch before
  2.1 has no mmap, so the plain load is used there;
- the validation pass (SPECFORGE_VALIDATE_OFFLINE_FEATURES=1): input_ids, loss_mask,
  hidden_state and aux_hidden_state present, each a tensor. Always done here;
- the sample handed to the model: aux_hidden_state.squeeze(0)[:max_len] as its input,
  hidden_state.squeeze(0)[:max_len] as the target (the lm_head alone is applied to it, so
  it must be after the final norm), input_ids[:max_len], loss_mask[:max_len] with the last
  position zeroed.

The draft vocabulary (model.vocab_mapping_path; specforge/modeling/draft/base.py
`load_vocab_mapping`, the checks of scripts/prepare_hidden_states.py, and the builder
`process_token_dict_to_mappings` in specforge/data/preprocessing.py with the offline count
`count_effective_feature_tokens` in specforge/training/vocab_mapping.py):
- the file is torch.load'ed (a dict with d2t and t2d) and copied into the draft model's
  buffers, t2d bool [target vocab_size] and d2t int64 [draft_vocab_size] (copy_: a size that
  does not fit fails); the draft head is the target's lm_head columns [..., t2d] (ascending
  target ids) and a draft prediction p means target id p + d2t[p];
- without a file, a local offline run counts the masked tokens of the feature files in
  list_feature_files order (ids ascending within a file) into a Counter; the builder adds
  missing ids of range(N) with count 0 (in set order) until there are N, takes most_common(N)
  (ties: first counted first), sorts the ids; d2t = ids - arange(N), t2d marks them.

Usage: read_specforge.py DEST [MAX_LEN]
"""

import gzip
import io
import os
import sys
from collections import Counter

import torch

SUFFIXES = (".ckpt", ".ckpt.gz")
KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")


class ReaderError(Exception):
    pass


def list_feature_files(path):
    if os.path.isfile(path):
        return [os.path.abspath(path)]
    files = []
    for root, _dirs, names in os.walk(path):
        for name in names:
            if name.endswith(SUFFIXES):
                files.append(os.path.abspath(os.path.join(root, name)))
    files.sort()
    return files


def load_feature_file(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return torch.load(io.BytesIO(fh.read()), weights_only=False)
    try:
        return torch.load(path, weights_only=False, mmap=True)
    except TypeError as e:  # torch < 2.1: no mmap keyword
        if "mmap" not in str(e):
            raise
        return torch.load(path, weights_only=False)


def validate(raw, path):
    if not isinstance(raw, dict):
        raise ReaderError(f"{path}: holds a {type(raw).__name__}, not a dict")
    missing = [k for k in KEYS if k not in raw]
    if missing:
        raise ReaderError(f"{path} missing required offline feature keys {missing}")
    for k in KEYS:
        if not torch.is_tensor(raw[k]):
            raise ReaderError(f"{path} feature {k!r} is not a tensor: {type(raw[k])!r}")


def normalize(raw, max_len):
    loss_mask = raw["loss_mask"][:max_len].clone().unsqueeze(0)
    if loss_mask.numel() > 0:
        loss_mask[0, -1] = 0
    return {"attention_mask": torch.ones_like(loss_mask, dtype=torch.long),
            "loss_mask": loss_mask,
            "target": raw["hidden_state"].squeeze(0)[:max_len].unsqueeze(0),
            "hidden_state": raw["aux_hidden_state"].squeeze(0)[:max_len].unsqueeze(0),
            "input_ids": raw["input_ids"][:max_len].unsqueeze(0)}


class SpecForgeReader:
    def __init__(self, hidden_states_path, max_len=2048):
        self.files = list_feature_files(hidden_states_path)
        self.max_len = max_len

    def __len__(self):
        return len(self.files)

    def raw(self, i):
        raw = load_feature_file(self.files[i])
        validate(raw, self.files[i])
        return raw

    def __getitem__(self, i):
        return normalize(self.raw(i), self.max_len)


def process_token_dict_to_mappings(token_dict, draft_vocab_size, target_vocab_size):
    """The trainer's builder on a Counter (changed in place, as the trainer changes it):
    (d2t int64 [N], t2d bool [V])."""
    if len(token_dict) < draft_vocab_size:
        for token in set(range(draft_vocab_size)) - set(token_dict):
            token_dict[token] = 0
            if len(token_dict) >= draft_vocab_size:
                break
    used = sorted(key for key, _ in token_dict.most_common(draft_vocab_size))
    d2t = torch.tensor([used[i] - i for i in range(len(used))])
    t2d = torch.tensor([i in set(used) for i in range(target_vocab_size)])
    return d2t, t2d


def count_effective_feature_tokens(hidden_states_path, max_length=None):
    """The masked tokens of DEST's feature files, counted as a local offline run counts them."""
    counts = Counter()
    for path in list_feature_files(hidden_states_path):
        raw = load_feature_file(path)
        input_ids, loss_mask = raw["input_ids"].reshape(-1), raw["loss_mask"].reshape(-1)
        if max_length is not None:
            input_ids, loss_mask = input_ids[:max_length], loss_mask[:max_length]
        ids, freqs = input_ids[loss_mask.to(dtype=bool)].unique(return_counts=True)
        for token_id, freq in zip(ids.tolist(), freqs.tolist()):
            counts[int(token_id)] += int(freq)
    return counts


def load_vocab_mapping(path, draft_vocab_size, target_vocab_size):
    """The file as the trainer loads it into the draft model's buffers: (d2t, t2d, the target
    id of each draft id). Raises ReaderError where the trainer fails."""
    try:
        mapping = torch.load(path, weights_only=True)
    except Exception as e:  # torch.load raises many kinds on a broken file
        raise ReaderError(f"{path}: torch.load fails: {type(e).__name__}: {e}") from None
    if not isinstance(mapping, dict) or not {"d2t", "t2d"} <= set(mapping):
        raise ReaderError(f"{path}: not a dict with d2t and t2d")
    d2t, t2d = mapping["d2t"], mapping["t2d"]
    for name, value, size in (("d2t", d2t, draft_vocab_size), ("t2d", t2d, target_vocab_size)):
        if not torch.is_tensor(value) or tuple(value.shape) != (size,):
            raise ReaderError(f"{path} has invalid {name} shape; expected ({size},), got {getattr(value, 'shape', None)}")
    buffers = {"t2d": torch.ones(target_vocab_size, dtype=torch.bool),
               "d2t": torch.zeros(draft_vocab_size, dtype=torch.int64)}
    buffers["t2d"].copy_(t2d)
    buffers["d2t"].copy_(d2t)
    return buffers["d2t"], buffers["t2d"], torch.arange(draft_vocab_size) + buffers["d2t"]


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    reader = SpecForgeReader(argv[1], int(argv[2]) if len(argv) == 3 else 2048)
    if not len(reader):
        print(f"read_specforge: no .ckpt files under {argv[1]}", file=sys.stderr)
        return 1
    try:
        tokens = sum(int(reader[i]["input_ids"].shape[1]) for i in range(len(reader)))
    except Exception as e:  # one line, whatever failed
        print(f"read_specforge: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"specforge: {len(reader)} samples, {tokens} tokens (after max_len)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
