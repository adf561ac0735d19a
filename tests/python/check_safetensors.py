"""io::write_safetensors's files, parsed by hand the way the format is specified (struct, json,
numpy) and, when the `safetensors` package is importable, with it: header rules, dtypes,
shapes, metadata and bytes equal what was written.

usage: check_safetensors.py TENSOR_FILE_WRITER WORKDIR"""
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import writer_spec  # noqa: E402

# numpy has no bfloat16: its bits are read as uint16.
NUMPY_DTYPE = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "I64": np.int64, "I32": np.int32,
               "U8": np.uint8, "BOOL": np.bool_}

T, H = 37, 24
SPEC = {
    "entries": [
        # speculators' keys and shapes, then every element type and odd shapes.
        {"key": "hidden_states", "tensor": {"dtype": "BF16", "shape": [T, 4, H], "seed": 1}},
        {"key": "token_ids", "tensor": {"dtype": "I64", "shape": [T], "seed": 2}},
        {"key": "f32", "tensor": {"dtype": "F32", "shape": [3, 5], "seed": 3}},
        {"key": "empty", "tensor": {"dtype": "I64", "shape": [0], "seed": 4}},
        {"key": "odd", "tensor": {"dtype": "U8", "shape": [7], "seed": 5}},
        {"key": "f16", "tensor": {"dtype": "F16", "shape": [1, 3], "seed": 6}},
        {"key": "i32", "tensor": {"dtype": "I32", "shape": [2, 2, 2], "seed": 7}},
        {"key": "bool", "tensor": {"dtype": "BOOL", "shape": [5], "seed": 8}},
        {"key": "empty_rows", "tensor": {"dtype": "BF16", "shape": [0, 4], "seed": 9}},
        {"key": "scalar", "tensor": {"dtype": "F32", "shape": [], "seed": 10}},
    ],
    "metadata": {"format": "pt", "source": "eagle3_extract \"test\" ü"},
}


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys in the header: {keys}"
    return dict(pairs)


def parse_by_hand(path):
    """(ordered header entries, metadata or None, data bytes), checking the format's rules."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    assert 8 + n <= len(blob) and n <= 100_000_000
    text = blob[8:8 + n].decode("utf-8")
    assert text.startswith("{"), text[:20]
    assert text.rstrip(" ") == text.rstrip(), "the header is padded with something other than spaces"
    assert len(text) - len(text.rstrip(" ")) < 8, "more padding than alignment needs"
    pairs = json.loads(text, object_pairs_hook=lambda p: p)  # keeps order and duplicates
    no_duplicates(pairs)
    metadata = None
    entries = []
    for key, value in pairs:
        if key == "__metadata__":
            metadata = no_duplicates(value)
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()), metadata
        else:
            info = no_duplicates(value)
            assert set(info) == {"dtype", "shape", "data_offsets"}, info
            entries.append((key, info))
    data = blob[8 + n:]
    # Offsets relative to the data's start, in file order, with no holes or overlaps, covering it all.
    at = 0
    for key, info in sorted(entries, key=lambda e: tuple(e[1]["data_offsets"])):
        begin, end = info["data_offsets"]
        assert begin == at and end >= begin, (key, info, at)
        size = writer_spec.ELEMENT_SIZE[info["dtype"]] * int(np.prod(info["shape"], dtype=np.int64))
        assert end - begin == size, (key, info)
        at = end
    assert at == len(data), f"data holds {len(data)} bytes, the header accounts for {at}"
    return entries, metadata, data


def check(path, spec):
    entries, metadata, data = parse_by_hand(path)
    want = spec["entries"]
    assert [k for k, _ in entries] == [e["key"] for e in want], [k for k, _ in entries]
    assert metadata == (spec.get("metadata") or None), metadata
    for (key, info), e in zip(entries, want):
        t = e["tensor"]
        assert info["dtype"] == t["dtype"] and info["shape"] == t["shape"], (key, info)
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        assert raw == writer_spec.tensor_bytes(t), (key, "bytes differ")
        array = np.frombuffer(raw, dtype=NUMPY_DTYPE[t["dtype"]]).reshape(t["shape"])
        assert array.shape == tuple(t["shape"])
    try:
        from safetensors import safe_open
    except ImportError:
        return "hand parse only (the safetensors package is not installed)"
    framework = "numpy"
    try:
        import torch  # noqa: F401
        framework = "pt"
    except ImportError:
        pass
    with safe_open(path, framework=framework) as f:
        assert set(f.keys()) == {e["key"] for e in want}, f.keys()
        assert (f.metadata() or None) == (spec.get("metadata") or None)
        for e in want:
            t = e["tensor"]
            if framework == "numpy" and t["dtype"] == "BF16":
                continue
            v = f.get_tensor(e["key"])
            assert list(v.shape) == t["shape"], e["key"]
            if framework == "pt":
                import torch
                v = v.view(torch.int16) if t["dtype"] == "BF16" else v
                v = v.numpy()
            assert v.tobytes() == writer_spec.tensor_bytes(t), e["key"]
    return "hand parse and the safetensors package"


def main():
    writer, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    path = os.path.join(work, "hs_0.safetensors")
    rc, err = writer_spec.write(writer, "safetensors", SPEC, path)
    assert rc == 0, (rc, err)
    assert sorted(os.listdir(work)) == ["hs_0.safetensors"], os.listdir(work)  # no temporary left
    how = check(path, SPEC)
    # Without metadata there is no "__metadata__"; without tensors the header is "{}" padded.
    for name, spec in (("plain.safetensors", {"entries": SPEC["entries"][:2]}),
                       ("none.safetensors", {"entries": []})):
        p = os.path.join(work, name)
        rc, err = writer_spec.write(writer, "safetensors", spec, p)
        assert rc == 0, (rc, err)
        check(p, spec)
        assert b"__metadata__" not in open(p, "rb").read()
    print("safetensors files check out:", how)


if __name__ == "__main__":
    main()
