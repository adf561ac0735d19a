"""Reading eagle3_extract output directories in Python (numpy + h5py; torch optional).

    import eagle3_extract
    ds = eagle3_extract.open_dataset("eagle3_out")       # refuses a broken or partial run
    print(ds.meta.hf_index, ds.meta.last_hidden_state_norm)
    for sample in ds:                                   # input order, each shard opened once
        sample["hidden_states"]                         # float32 [T, K, H]

    tds = eagle3_extract.torch_dataset("eagle3_out", keys="speculators")  # needs torch

See open_dataset and Dataset for the item layout, Meta for the layer metadata.
"""

from ._decode import (E4M3FN, bf16_bits_to_float32, float32_to_bf16_bits, fp8_bits_to_float32,
                      fp16_bits_to_float32)
from ._manifest import DatasetError
from ._reader import OUTPUT_DTYPES, Dataset, Meta, open_dataset

__all__ = ["open_dataset", "Dataset", "Meta", "DatasetError", "OUTPUT_DTYPES", "E4M3FN", "bf16_bits_to_float32",
           "fp16_bits_to_float32", "fp8_bits_to_float32", "float32_to_bf16_bits", "torch_dataset"]


def torch_dataset(directory, keys="speculators", **open_options):
    """A torch.utils.data.Dataset with a trainer's key names and bf16 tensors (keys="speculators"
    or "specforge"; see eagle3_extract._torch.TrainerDataset). Needs torch."""
    try:
        from ._torch import torch_dataset as make
    except ImportError as e:
        raise ImportError(f"eagle3_extract.torch_dataset needs torch: {e}") from None
    return make(directory, keys, **open_options)
