#!/usr/bin/python3
"""Load an export directory the way speculators' offline EAGLE-3 training does.

Modelled on vllm-project/speculators (c05b95b3, 2026-08-20): `ArrowDataset` in
src/speculators/train/data.py and `FileTransfer` in hs_connectors/.../transfer.py.
What it does there, and here:
- rows come from the `datasets` directory `--data-path D`, saved in torch format: columns
  input_ids, loss_mask (int64 tensors) and seq_len. `datasets` is not installed with the
  Debian packages, so the rows are read from `D/data.jsonl`, the file the README turns into
  that directory, with the same typing (lists of integers become int64 tensors);
- row i's states are `D/hidden_states/hs_{i}.safetensors` (no glob), keys `hidden_states`
  [T, n, H] and `token_ids` [T];
- a missing file fails the run (we pass `--on-missing raise`); a `.lock` file next to it makes
  the trainer wait for and delete it, so one in an export is an error here;
- a file whose token_ids differ from its row is dropped with a warning (`torch.equal`);
- the sample handed to the model: hidden_states[:, :-1] flattened to [T, 3H], the last slot
  as verifier_last_hidden_states [T, H] (the model applies the verifier's final norm to
  it), input_ids = token_ids, loss_mask from the row.

The draft vocabulary (scripts/train.py `parse_vocab_mappings`, `_load_mappings`;
src/speculators/model.py `load_vocab_mappings`; src/speculators/train/vocab_mapping.py
`build_vocab_mappings_from_distribution`):
- with no --d2t-path/--t2d-path, DEST/d2t.npy and DEST/t2d.npy are used when both exist, each
  `torch.from_numpy(np.load(path))`; the draft vocabulary size is d2t.shape[0], and a
  --draft-vocab-size that differs is an error;
- the model then requires t2d.shape[0] == the verifier's vocab_size, t2d.sum() == the draft
  vocabulary size and d2t.shape[0] == it, and copies both into its buffers (bool t2d, int64
  d2t); it takes the draft lm_head as the verifier's rows `lm_head[t2d]` (ascending target ids)
  and maps draft id i to target id i + d2t[i];
- its builder (used when only token_freq.pt is there) sorts the counted ids by (-count, id),
  keeps the first N, fills up with the lowest ids not counted, sorts them; d2t = ids - arange(N).

Usage: read_speculators.py DEST  (exit 1 when a row is missing or would be dropped)
"""

import json
import os
import sys

import numpy as np
import torch

import safetensors_io

ROW_KEYS = {"input_ids", "loss_mask", "seq_len"}


class ReaderError(Exception):
    pass


def _int_list(value):
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def read_rows(path):
    """data.jsonl as the torch-formatted rows the trainer indexes."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                raise ReaderError(f"{path}:{lineno}: blank line (every line is one row)")
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ReaderError(f"{path}:{lineno}: not JSON: {e}") from None
            if not isinstance(row, dict) or set(row) != ROW_KEYS:
                got = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise ReaderError(f"{path}:{lineno}: keys {got}, expected {sorted(ROW_KEYS)}")
            if not (_int_list(row["input_ids"]) and _int_list(row["loss_mask"])
                    and isinstance(row["seq_len"], int) and not isinstance(row["seq_len"], bool)):
                raise ReaderError(f"{path}:{lineno}: input_ids/loss_mask must be integer lists, seq_len an integer")
            rows.append({"input_ids": torch.tensor(row["input_ids"], dtype=torch.int64),
                         "loss_mask": torch.tensor(row["loss_mask"], dtype=torch.int64),
                         "seq_len": row["seq_len"]})
    return rows


class SpeculatorsReader:
    def __init__(self, data_path, hidden_states_path=None):
        self.data_path = data_path
        self.hidden_states_path = hidden_states_path or os.path.join(data_path, "hidden_states")
        self.rows = read_rows(os.path.join(data_path, "data.jsonl"))
        self.dropped = []  # (row, warning) of the samples the trainer would skip

    def __len__(self):
        return len(self.rows)

    def file_of(self, i):
        return os.path.join(self.hidden_states_path, f"hs_{i}.safetensors")

    def raw(self, i):
        path = self.file_of(i)
        if os.path.exists(path + ".lock"):
            raise ReaderError(f"{path}.lock exists: the trainer would wait for it and delete it")
        if not os.path.exists(path):
            raise ReaderError(f"Failed to load hidden states for sample {i}: {path} does not exist")
        return safetensors_io.load(path)

    def __getitem__(self, i):
        return self.view(i, self.raw(i))

    def view(self, i, loaded):
        """The sample the trainer builds from row i and its loaded file, or None when it drops it."""
        for key in ("hidden_states", "token_ids"):
            if key not in loaded:
                raise ReaderError(f"{self.file_of(i)}: no tensor {key!r}")
        if not torch.equal(loaded["token_ids"], self.rows[i]["input_ids"]):
            self.dropped.append((i, f"Loaded token ids for index {i} don't match input ids"))
            return None
        hs = loaded["hidden_states"]
        return {"hidden_states": hs[:, :-1].flatten(1),
                "input_ids": loaded["token_ids"],
                "verifier_last_hidden_states": hs[:, -1],
                "loss_mask": self.rows[i]["loss_mask"]}


def build_vocab_mappings(token_freq, draft_vocab_size, target_vocab_size):
    """The trainer's builder on {token id: count}: (d2t int64 [N], t2d bool [V])."""
    ranked = sorted(token_freq, key=lambda tid: (-token_freq[tid], tid))
    chosen = ranked[:draft_vocab_size]
    taken = set(chosen)
    tid = 0
    while len(chosen) < draft_vocab_size:
        if tid not in taken:
            chosen.append(tid)
        tid += 1
    chosen.sort()
    d2t = torch.tensor(chosen, dtype=torch.long) - torch.arange(draft_vocab_size, dtype=torch.long)
    t2d = torch.zeros(target_vocab_size, dtype=torch.bool)
    t2d[chosen] = True
    return d2t, t2d


def load_vocab_mappings(data_path, draft_vocab_size, verifier_vocab_size):
    """DEST's d2t.npy and t2d.npy as the trainer loads them into the draft model's buffers:
    (d2t, t2d, the target id of each draft id). Raises ReaderError where the trainer fails."""
    d2t_path, t2d_path = os.path.join(data_path, "d2t.npy"), os.path.join(data_path, "t2d.npy")
    if not (os.path.exists(d2t_path) and os.path.exists(t2d_path)):
        raise ReaderError(f"{data_path}: no d2t.npy and t2d.npy: the trainer would use the full verifier vocabulary")
    try:
        d2t = torch.from_numpy(np.load(d2t_path))
        t2d = torch.from_numpy(np.load(t2d_path))
    except Exception as e:  # np.load raises many kinds on a broken file
        raise ReaderError(f"{data_path}: np.load of d2t.npy/t2d.npy fails: {type(e).__name__}: {e}") from None
    if d2t.dim() != 1 or t2d.dim() != 1:
        raise ReaderError(f"{data_path}: d2t has shape {list(d2t.shape)}, t2d {list(t2d.shape)}: both must be 1-D")
    if d2t.shape[0] != draft_vocab_size:
        raise ReaderError(f"{d2t_path}: {d2t.shape[0]} entries, but --draft-vocab-size {draft_vocab_size}")
    if t2d.shape[0] != verifier_vocab_size:
        raise ReaderError(f"{t2d_path}: t2d.shape[0] ({t2d.shape[0]}) must match verifier_vocab_size "
                          f"({verifier_vocab_size})")
    if int(t2d.sum(dtype=torch.long)) != draft_vocab_size:
        raise ReaderError(f"{t2d_path}: t2d has {int(t2d.sum(dtype=torch.long))} non-zero values, expected "
                          f"{draft_vocab_size}")
    buffers = {"t2d": torch.zeros(verifier_vocab_size, dtype=torch.bool),
               "d2t": torch.zeros(draft_vocab_size, dtype=torch.long)}
    buffers["t2d"].copy_(t2d)
    buffers["d2t"].copy_(d2t)
    return buffers["d2t"], buffers["t2d"], torch.arange(draft_vocab_size) + buffers["d2t"]


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        reader = SpeculatorsReader(argv[1])
        loaded = sum(reader[i] is not None for i in range(len(reader)))
    except Exception as e:  # one line, whatever failed
        print(f"read_speculators: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    for i, why in reader.dropped:
        print(f"read_speculators: row {i} dropped: {why}", file=sys.stderr)
    print(f"speculators: {len(reader)} rows, {loaded} samples loaded, {len(reader.dropped)} dropped")
    return 1 if reader.dropped else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
