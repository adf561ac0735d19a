"""Storage error of --dtype bf16 and --dtype fp8 against --dtype fp32 of the same run (the
README's "fp8 output" numbers). Reads the stored bits itself (no HDF5 type conversion): bf16 as
the upper half of an fp32, fp8 through a 256-entry e4m3fn table times the *_scale datasets.
Prints, per case and format, the per-token relative error (L2 over the H values of one token
and one capture) over every row (token and capture id, the final state too): median, 99th
percentile and maximum.

  /usr/bin/python3 fp8_vs_bf16.py CASE FP32_DIR BF16_DIR FP8_DIR [CASE FP32_DIR BF16_DIR FP8_DIR ...]
"""
import glob
import os
import sys

import h5py
import numpy as np


def e4m3fn_table():
    t = np.zeros(256, np.float32)
    for b in range(256):
        e, m = (b >> 3) & 0xF, b & 7
        if e == 0xF and m == 7:
            v = np.nan
        elif e == 0:
            v = m / 8.0 * 2.0**-6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = -v if b & 0x80 else v
    return t


E4M3 = e4m3fn_table()


def raw(ds, dtype):
    """The dataset's stored bytes as `dtype`, read from its contiguous extent in the file."""
    off = ds.id.get_offset()
    n = int(np.prod(ds.shape))
    with open(ds.file.filename, "rb") as f:
        f.seek(off)
        return np.frombuffer(f.read(n * np.dtype(dtype).itemsize), dtype).reshape(ds.shape)


def states(group, name, fmt):
    ds = group[name]
    if fmt == "fp32":
        return raw(ds, "<f4")
    if fmt == "bf16":
        return (raw(ds, "<u2").astype(np.uint32) << 16).view(np.float32)
    assert ds.attrs["encoding"] in (b"float8_e4m3fn", "float8_e4m3fn"), ds.attrs["encoding"]
    scale = raw(group[name + "_scale"], "<f4")
    return E4M3[raw(ds, "u1")] * scale[..., None]


def load(out_dir, fmt):
    """{sample index: [tokens * rows, H] float32}, every capture and the final state as rows."""
    out = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "*.h5"))):
        with h5py.File(path, "r") as f:
            for idx, g in f["samples"].items():
                rows = [states(g, "hidden_states", fmt).reshape(-1, g["hidden_states"].shape[-1])]
                if "last_hidden_state" in g:
                    rows.append(states(g, "last_hidden_state", fmt))
                out[int(idx)] = np.concatenate(rows).astype(np.float64)
    return out


def main(argv):
    if len(argv) % 4 != 0 or not argv:
        sys.exit(__doc__)
    print(f"{'case':<14} {'format':<6} {'rows':>7} {'median':>9} {'p99':>9} {'max':>9}")
    for i in range(0, len(argv), 4):
        case, truth_dir = argv[i], argv[i + 1]
        truth = load(truth_dir, "fp32")
        for fmt, d in (("bf16", argv[i + 2]), ("fp8", argv[i + 3])):
            got = load(d, fmt)
            assert got.keys() == truth.keys(), f"{d}: other samples than {truth_dir}"
            errs = []
            for k, want in truth.items():
                num = np.linalg.norm(got[k] - want, axis=1)
                den = np.maximum(np.linalg.norm(want, axis=1), 1e-30)
                errs.append(num / den)
            e = np.concatenate(errs)
            print(f"{case:<14} {fmt:<6} {e.size:>7} {np.median(e):>9.2e} {np.percentile(e, 99):>9.2e} {e.max():>9.2e}")


if __name__ == "__main__":
    main(sys.argv[1:])
