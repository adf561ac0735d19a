"""torch_dataset: the samples under the key names and dtypes a trainer's offline loader yields."""

import warnings

import numpy as np
import torch

from ._manifest import DatasetError
from ._reader import open_dataset

# What each trainer needs for its final state, and the --final that stores it.
_NEEDS = {
    "speculators": ("pre_norm_key", "before the final norm (its trainer applies the norm itself)", "pre-norm"),
    "specforge": ("post_norm_key", "after the final norm", "post-norm"),
}


def _bf16(bits):
    # Same element size, so a view: the bits are not converted.
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(torch.bfloat16)


class TrainerDataset(torch.utils.data.Dataset):
    """A torch Dataset over an output directory; item i is the i-th stored sample (input order).

    keys="speculators": {"input_ids": int64 [T], "loss_mask": int64 [T],
    "hidden_states": bfloat16 [T, K + 1, H]: the K captures, then the last decoder layer's
    output before the final norm}.
    keys="specforge": {"input_ids": int64 [T], "loss_mask": int64 [T],
    "aux_hidden_state": bfloat16 [T, K * H]: the K captures concatenated,
    "hidden_state": bfloat16 [T, H]: after the final norm} (the shapes SpecForge's loader
    yields after it squeezes its files' leading dimension of 1).

    Warns when the captures are not the EAGLE-3 default [2, L/2, L-3] every trainer assumes.
    bf16 output is passed through bit for bit; fp16, fp32 and fp8 output is decoded and
    rounded to bf16 (nearest, ties to even).
    """

    def __init__(self, directory, keys="speculators", **open_options):
        if keys not in _NEEDS:
            raise ValueError(f"keys must be one of {', '.join(_NEEDS)}, not {keys!r}")
        self.keys = keys
        self.dataset = open_dataset(directory, dtype="bfloat16-bits", **open_options)
        attribute, what, final = _NEEDS[keys]
        meta = self.dataset.meta
        self._final_key = getattr(meta, attribute)
        if self._final_key is None:
            raise DatasetError(
                f"{meta.directory}: keys={keys!r} needs the final state {what}, which this run did not store "
                f"(--final {meta.final}); rerun eagle3_extract with --final {final} or --final both")
        L = meta.num_hidden_layers
        default = [2, L // 2, L - 3]
        if meta.hf_index != default:
            # Not refused: a draft model may be configured for other layers; it must then say so.
            warnings.warn(f"{meta.directory}: captured output_hidden_states {meta.hf_index}, not the EAGLE-3 default "
                          f"{default} (--layers 2,{L // 2},{L - 3}) that {keys} trains with unless its draft "
                          "config names other layers", stacklevel=4)

    @property
    def meta(self):
        return self.dataset.meta

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, position):
        return self._convert(self.dataset[position])

    def __iter__(self):  # shard by shard, each file opened once
        for sample in self.dataset:
            yield self._convert(sample)

    def _convert(self, s):
        out = {"input_ids": torch.from_numpy(s["input_ids"]),
               "loss_mask": torch.from_numpy(s["loss_mask"].astype(np.int64))}
        hs = s["hidden_states"]
        final = s[self._final_key]
        if self.keys == "speculators":
            out["hidden_states"] = _bf16(np.concatenate([hs, final[:, None, :]], axis=1))
        else:
            out["aux_hidden_state"] = _bf16(hs.reshape(hs.shape[0], -1))
            out["hidden_state"] = _bf16(final)
        return out


def torch_dataset(directory, keys="speculators", **open_options):
    """TrainerDataset(directory, keys): a torch.utils.data.Dataset (see TrainerDataset)."""
    return TrainerDataset(directory, keys, **open_options)
