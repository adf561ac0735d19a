"""io::write_npy's files: byte for byte what np.save writes for the same array (header padding
included, over header lengths that hit every alignment case), loaded back by np.load and as
speculators loads its d2t.npy / t2d.npy (torch.from_numpy(np.load(path))); a type NumPy lacks
(bf16) is refused.

usage: check_npy.py TENSOR_FILE_WRITER WORKDIR"""
import io
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import writer_spec  # noqa: E402

NUMPY = {"I64": "<i8", "I32": "<i4", "U8": "|u1", "BOOL": "|b1", "F32": "<f4", "F16": "<f2"}
TORCH = {"I64": torch.int64, "BOOL": torch.bool}


def expected(t):
    data = np.frombuffer(writer_spec.tensor_bytes(t), dtype=NUMPY[t["dtype"]]).reshape(t["shape"])
    buf = io.BytesIO()
    np.save(buf, data)
    return buf.getvalue(), data


def check(writer, work, t, name):
    path = os.path.join(work, name)
    rc, err = writer_spec.write(writer, "npy", {"entries": [{"key": "x", "tensor": t}]}, path)
    assert rc == 0, (t, rc, err)
    got = open(path, "rb").read()
    want, data = expected(t)
    assert got == want, (t, got[:160], want[:160])
    loaded = np.load(path)
    assert loaded.dtype == data.dtype and loaded.shape == data.shape and loaded.tobytes() == data.tobytes(), t
    if t["dtype"] in TORCH:  # speculators: torch.from_numpy(np.load(d2t_path))
        tensor = torch.from_numpy(np.load(path))
        assert tensor.dtype == TORCH[t["dtype"]] and list(tensor.shape) == t["shape"], (t, tensor.dtype)
    header_len = int.from_bytes(got[8:10], "little")
    return (10 + header_len) % 64 == 0 and got[10 + header_len - 65:10 + header_len - 1] == b" " * 64


def main():
    writer, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # The mapping files' own shapes (d2t int64 [N], t2d bool [V]), every type, 0-d and empty arrays.
    tensors = [{"dtype": "I64", "shape": [32000], "seed": 1}, {"dtype": "BOOL", "shape": [128256], "seed": 2},
               {"dtype": "I64", "shape": [1], "seed": 3}, {"dtype": "BOOL", "shape": [0], "seed": 4},
               {"dtype": "I64", "shape": [], "seed": 5}, {"dtype": "I32", "shape": [3, 5], "seed": 6},
               {"dtype": "U8", "shape": [7, 1, 2], "seed": 7}, {"dtype": "F32", "shape": [4, 4], "seed": 8},
               {"dtype": "F16", "shape": [2, 3, 4], "seed": 9}]
    # Header lengths over a whole alignment period: empty arrays of ever longer shapes.
    for ndim in range(2, 12):
        for digits in range(1, 19):
            tensors.append({"dtype": "I64", "shape": [0] + [1] * (ndim - 2) + [10 ** (digits - 1)], "seed": 0})
    full_pad = 0
    for i, t in enumerate(tensors):
        full_pad += check(writer, work, t, f"t{i}.npy")
    assert full_pad > 0, "no shape hit the header length that np.save pads by a whole 64 bytes"
    leftovers = [n for n in os.listdir(work) if not n.endswith(".npy")]
    assert not leftovers, leftovers  # no temporary file left
    # No NumPy type for bf16: refused, nothing written.
    bad = os.path.join(work, "bf16.npy")
    rc, err = writer_spec.write(writer, "npy", {"entries": [{"key": "x", "tensor": {"dtype": "BF16", "shape": [2],
                                                                                   "seed": 1}}]}, bad)
    assert rc != 0 and "no NumPy type" in err and not os.path.exists(bad), (rc, err)
    print(f"npy files are np.save's bytes ({len(tensors)} arrays, numpy {np.__version__})")


if __name__ == "__main__":
    main()
