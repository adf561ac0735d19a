"""A strict reader (and a writer, for the test oracle) of the safetensors file format.

The `safetensors` package is not among the Debian packages the tests use, so the format is
parsed here: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and [begin, end) byte range in the data that follows. The checks are those the
package makes before it hands a tensor out: the ranges tile the data exactly, each range has
the byte size its dtype and shape imply, and nothing trails the last tensor.
"""

import json
import struct

import numpy as np
import torch

MAX_HEADER = 100_000_000

# safetensors dtype name -> (numpy dtype of the raw items, torch dtype they are viewed as)
DTYPES = {
    "BF16": (np.int16, torch.bfloat16),
    "F16": (np.float16, torch.float16),
    "F32": (np.float32, torch.float32),
    "F64": (np.float64, torch.float64),
    "I64": (np.int64, torch.int64),
    "I32": (np.int32, torch.int32),
    "I16": (np.int16, torch.int16),
    "I8": (np.int8, torch.int8),
    "U8": (np.uint8, torch.uint8),
    "BOOL": (np.bool_, torch.bool),
}
NAMES = {torch_dtype: name for name, (_, torch_dtype) in DTYPES.items()}


class FormatError(Exception):
    pass


def parse_header(blob, where):
    """(header dict without __metadata__, metadata or None, data offset) of a file's bytes."""
    if len(blob) < 8:
        raise FormatError(f"{where}: {len(blob)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER or 8 + n > len(blob):
        raise FormatError(f"{where}: header length {n} does not fit the file of {len(blob)} bytes")
    raw = blob[8:8 + n]
    if not raw.startswith(b"{"):
        raise FormatError(f"{where}: the header does not start with '{{'")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"{where}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{where}: header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise FormatError(f"{where}: __metadata__ is not a string-to-string map")
    return header, metadata, 8 + n


def load(path):
    """{name: torch tensor} of a safetensors file, like safetensors.torch.load_file."""
    with open(path, "rb") as fh:
        blob = fh.read()
    header, _, start = parse_header(blob, path)
    data = memoryview(blob)[start:]
    spans = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise FormatError(f"{path}: tensor {name!r}: entry must hold exactly dtype, shape, data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPES:
            raise FormatError(f"{path}: tensor {name!r}: unsupported dtype {dtype!r}")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise FormatError(f"{path}: tensor {name!r}: bad shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise FormatError(f"{path}: tensor {name!r}: bad data_offsets {offsets!r}")
        item = np.dtype(DTYPES[dtype][0]).itemsize
        if offsets[1] - offsets[0] != int(np.prod(shape, dtype=np.int64)) * item:
            raise FormatError(f"{path}: tensor {name!r}: {offsets[1] - offsets[0]} bytes for {dtype} {shape}")
        spans.append((offsets[0], offsets[1], name))
    spans.sort()
    end = 0
    for begin, stop, name in spans:
        if begin != end:
            raise FormatError(f"{path}: tensor {name!r} starts at {begin}, not at {end} (gap or overlap)")
        end = stop
    if end != len(data):
        raise FormatError(f"{path}: tensors end at byte {end} of {len(data)} data bytes")
    out = {}
    for begin, stop, name in spans:
        np_dtype, torch_dtype = DTYPES[header[name]["dtype"]]
        arr = np.frombuffer(data[begin:stop], dtype=np.dtype(np_dtype).newbyteorder("<")).copy()
        t = torch.from_numpy(arr.reshape(header[name]["shape"]))
        out[name] = t.view(torch.bfloat16) if torch_dtype == torch.bfloat16 else t
    return out


def dtype_names(path):
    """{name: safetensors dtype string} as the file's header states them."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        (n,) = struct.unpack("<Q", head) if len(head) == 8 else (0,)
        blob = head + fh.read(min(n, MAX_HEADER))
    header, _, _ = parse_header(blob, path)
    return {name: entry.get("dtype") for name, entry in header.items() if isinstance(entry, dict)}


def save(tensors, path):
    """Write {name: contiguous torch tensor} (the oracle's writer; header padded to 8 bytes)."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        for c in chunks:
            fh.write(c)


def _no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key in the header")
    return dict(pairs)
