"""io::write_torch_dict's files, read back the way the SpecForge and ModelOpt trainers read
them (torch.load), with weights_only=True, with mmap=True where this torch has it, and as a
plain zip: keys, dtypes, shapes and bytes equal what was written; likewise
io::write_torch_tensor's (a tensor not in a dict).

usage: check_torch_save.py TENSOR_FILE_WRITER WORKDIR"""
import inspect
import os
import pickletools
import shutil
import struct
import sys
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import writer_spec  # noqa: E402

TORCH_DTYPE = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I64": torch.int64,
               "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}
# Same-size integer views: the raw bits of any tensor, bf16 included, as numpy reads them.
RAW_VIEW = {"BF16": torch.int16, "F16": torch.int16, "F32": torch.int32}

T, H = 37, 24
SPEC = {"entries": [
    # SpecForge's keys and shapes, then ModelOpt's, then every element type and odd shapes.
    {"key": "input_ids", "tensor": {"dtype": "I64", "shape": [T], "seed": 1}},
    {"key": "loss_mask", "tensor": {"dtype": "I64", "shape": [T], "seed": 2}},
    {"key": "aux_hidden_state", "tensor": {"dtype": "BF16", "shape": [1, T, 3 * H], "seed": 3}},
    {"key": "hidden_state", "tensor": {"dtype": "BF16", "shape": [1, T, H], "seed": 4}},
    {"key": "conversation_id", "string": "conv/../ü-€-𝄞 \"quoted\"\n"},
    {"key": "f32", "tensor": {"dtype": "F32", "shape": [5, 7, 3], "seed": 5}},
    {"key": "empty", "tensor": {"dtype": "I64", "shape": [0], "seed": 6}},
    {"key": "empty_rows", "tensor": {"dtype": "BF16", "shape": [0, 3], "seed": 7}},
    {"key": "f16", "tensor": {"dtype": "F16", "shape": [3, 1, 2, 5], "seed": 8}},
    {"key": "i32", "tensor": {"dtype": "I32", "shape": [11], "seed": 9}},
    {"key": "u8", "tensor": {"dtype": "U8", "shape": [13], "seed": 10}},
    {"key": "bool", "tensor": {"dtype": "BOOL", "shape": [2, 9], "seed": 11}},
    {"key": "big_bf16", "tensor": {"dtype": "BF16", "shape": [300, 1001], "seed": 12}},
    {"key": "zero", "int": 0},
    {"key": "byte", "int": 255},
    {"key": "short", "int": 65535},
    {"key": "neg", "int": -5},
    {"key": "int32_min", "int": -2**31},
    {"key": "int32_max_plus", "int": 2**31},
    {"key": "large", "int": 123456789012},
    {"key": "neg_large", "int": -(2**40) + 1},
    {"key": "int64_min", "int": -2**63},
    {"key": "int64_max", "int": 2**63 - 1},
    {"key": "int_128", "int": 128},
    {"key": "ключ", "string": ""},
]}


def check_loaded(obj, spec, how):
    assert isinstance(obj, dict), (how, type(obj))
    assert list(obj.keys()) == [e["key"] for e in spec["entries"]], (how, list(obj.keys()))
    for e in spec["entries"]:
        v = obj[e["key"]]
        if "tensor" in e:
            t = e["tensor"]
            assert isinstance(v, torch.Tensor), (how, e["key"], type(v))
            assert v.dtype == TORCH_DTYPE[t["dtype"]], (how, e["key"], v.dtype)
            assert list(v.shape) == t["shape"], (how, e["key"], v.shape)
            assert v.is_contiguous() and v.storage_offset() == 0 and not v.requires_grad, (how, e["key"])
            raw = v.view(RAW_VIEW[t["dtype"]]) if t["dtype"] in RAW_VIEW else v
            got = raw.numpy().tobytes()
            assert got == writer_spec.tensor_bytes(t), (how, e["key"], "bytes differ")
        elif "string" in e:
            assert v == e["string"], (how, e["key"], v)
        else:
            assert type(v) is int and v == e["int"], (how, e["key"], v)


def check_zip(path, spec):
    """The archive as any zip reader sees it: every record's CRC, names, 64-byte alignment."""
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None, "a record's CRC-32 is wrong"
        names = z.namelist()
        ntensors = sum("tensor" in e for e in spec["entries"])
        assert names == ["archive/data.pkl", "archive/byteorder"] + \
            [f"archive/data/{i}" for i in range(ntensors)] + ["archive/version"], names
        assert z.read("archive/version") == b"3\n"
        assert z.read("archive/byteorder") == b"little"
        pickletools.dis(z.read("archive/data.pkl"), out=open(os.devnull, "w"))
        with open(path, "rb") as f:
            for info in z.infolist():
                assert info.compress_type == zipfile.ZIP_STORED, info.filename
                f.seek(info.header_offset)
                local = f.read(30)
                assert local[:4] == b"PK\x03\x04"
                crc, csize, usize, nlen, elen = struct.unpack("<IIIHH", local[14:30])
                assert (crc, csize, usize) == (info.CRC, info.compress_size, info.file_size), info.filename
                data_start = info.header_offset + 30 + nlen + elen
                assert data_start % 64 == 0, (info.filename, data_start)


def main():
    writer, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    path = os.path.join(work, "data_0.ckpt")
    rc, err = writer_spec.write(writer, "torch", SPEC, path)
    assert rc == 0, (rc, err)
    assert sorted(os.listdir(work)) == ["data_0.ckpt"], os.listdir(work)  # no temporary left
    check_zip(path, SPEC)
    check_loaded(torch.load(path), SPEC, "torch.load")
    check_loaded(torch.load(path, weights_only=True), SPEC, "weights_only=True")
    check_loaded(torch.load(path, map_location="cpu"), SPEC, "map_location=cpu")
    if "mmap" in inspect.signature(torch.load).parameters:
        check_loaded(torch.load(path, mmap=True, weights_only=True), SPEC, "mmap=True")
    else:
        print(f"torch {torch.__version__} has no torch.load(mmap=...); its alignment is checked above")

    # An empty dict, and a dict without tensors.
    for name, entries in (("empty.pt", []), ("scalars.pt", [{"key": "a", "int": 1}, {"key": "b", "string": "x"}])):
        spec = {"entries": entries}
        p = os.path.join(work, name)
        rc, err = writer_spec.write(writer, "torch", spec, p)
        assert rc == 0, (rc, err)
        check_zip(p, spec)
        check_loaded(torch.load(p, weights_only=True), spec, name)
    # A bare tensor (torch.save(tensor)): ModelOpt's draft vocabulary, loaded as its
    # load_draft_vocab_cache does (torch.load(weights_only=True), then shape and dtype compared).
    for i, t in enumerate(({"dtype": "I64", "shape": [32000], "seed": 13}, {"dtype": "BOOL", "shape": [77], "seed": 14},
                           {"dtype": "BF16", "shape": [3, 5], "seed": 15})):
        spec = {"entries": [{"key": "x", "tensor": t}]}
        p = os.path.join(work, f"tensor{i}.pth")
        rc, err = writer_spec.write(writer, "torch-tensor", spec, p)
        assert rc == 0, (rc, err)
        check_zip(p, spec)
        for how, v in (("torch.load", torch.load(p)), ("weights_only=True", torch.load(p, weights_only=True))):
            assert isinstance(v, torch.Tensor), (how, type(v))
            assert v.dtype == TORCH_DTYPE[t["dtype"]] and list(v.shape) == t["shape"], (how, v.dtype, v.shape)
            raw = v.view(RAW_VIEW[t["dtype"]]) if t["dtype"] in RAW_VIEW else v
            assert raw.numpy().tobytes() == writer_spec.tensor_bytes(t), (how, "bytes differ")
    print("torch.save files check out with torch", torch.__version__)


if __name__ == "__main__":
    main()
