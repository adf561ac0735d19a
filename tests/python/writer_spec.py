"""Shared by the checks of the C++ file writers: runs tests/tools/tensor_file_writer on a spec
and recomputes the bytes it gives each tensor."""
import json
import os
import subprocess

import numpy as np

ELEMENT_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}


def pattern(seed, nbytes, dtype):
    """The bytes tensor_file_writer fills a tensor with (see pattern_byte there)."""
    k = np.arange(nbytes, dtype=np.uint64)
    b = ((k * np.uint64(2654435761) + np.uint64(seed * 97)) >> np.uint64(11)).astype(np.uint8)
    return (b & 1) if dtype == "BOOL" else b


def tensor_bytes(t):
    n = ELEMENT_SIZE[t["dtype"]]
    for d in t["shape"]:
        n *= d
    return pattern(t["seed"], n, t["dtype"]).tobytes()


def write(writer, fmt, spec, out):
    """Runs the writer; returns (exit code, stderr)."""
    spec_path = out + ".spec.json"
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    r = subprocess.run([writer, fmt, spec_path, out], capture_output=True, text=True)
    os.remove(spec_path)
    return r.returncode, r.stderr
