"""Checks eagle3_extract.open_dataset (and torch_dataset) on an output directory against reads
of the same HDF5 files made here without the package.

    check_reader.py DIR [--parts P]

The reference reads: h5py for ids, masks and attributes; the bf16/fp16 states' bits straight
from the file at each dataset's offset (contiguous storage), and HDF5's own (slow) conversion
for their float values; fp32 as h5py reads it; fp8 codes times scales through a decode table
written here from the e4m3fn definition. Exits non-zero naming the first difference.
"""

import argparse
import glob
import json
import os
import sys

import h5py
import numpy as np

import eagle3_extract as e3


def e4m3fn(code):
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 7
    if (e, m) == (15, 7):
        return float("nan")
    return sign * (m * 2.0**-9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


TABLE = np.array([e4m3fn(c) for c in range(256)], np.float32)


def bf16_rne(x):
    """float32 -> bf16 bits, nearest even (the values here are finite)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def bits_at_offset(path, dset, np_dtype):
    offset = dset.id.get_offset()
    assert offset is not None, f"{path} {dset.name}: not contiguous"
    return np.fromfile(path, dtype=np_dtype, count=int(np.prod(dset.shape)), offset=offset).reshape(dset.shape)


def reference(directory):
    """index -> the sample's data, read without the package; plus the first shard's attributes."""
    samples, attrs = {}, None
    for path in sorted(glob.glob(os.path.join(directory, "shard-*.h5"))):
        with h5py.File(path, "r") as f:
            if attrs is None:
                attrs = {k: f.attrs[k] for k in f.attrs}
            dtype = text(f.attrs["dtype"])
            for key, g in f["samples"].items():
                index = int(key)
                assert index not in samples, f"sample {index} in two shards"
                s = {"input_ids": g["input_ids"][()], "loss_mask": g["loss_mask"][()],
                     "id": text(g.attrs["id"]) if "id" in g.attrs else None}
                for name in ("hidden_states", "last_hidden_state", "last_hidden_state_prenorm"):
                    if name not in g:
                        continue
                    d = g[name]
                    if dtype == "fp8":
                        codes, scale = d[()], g[name + "_scale"][()]
                        assert codes.dtype == np.uint8
                        s[name] = TABLE[codes] * scale[..., None]
                        s[name + ":stored"] = (codes, scale)
                    elif dtype == "fp32":
                        s[name] = d[()]
                        assert s[name].dtype == np.float32
                        s[name + ":stored"] = s[name]
                    else:
                        s[name] = d.astype("f4")[()]  # HDF5's conversion: exact, slow
                        s[name + ":stored"] = bits_at_offset(path, d, np.uint16)
                    bits = s[name + ":stored"]
                    s[name + ":bf16"] = bits if dtype == "bf16" else bf16_rne(s[name])
                samples[index] = s
    return samples, attrs


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def check_meta(ds, attrs, directory, parts):
    m = ds.meta
    manifests = sorted(glob.glob(os.path.join(directory, "manifest*.json")))
    first = json.load(open(manifests[0]))
    assert m.layer_ids == [int(v) for v in attrs["layer_ids"]], m.layer_ids
    want_hf = [int(v) for v in attrs.get("hidden_states_hf_index", attrs["layer_ids"])]
    assert m.hf_index == want_hf, (m.hf_index, want_hf)
    assert m.final == text(attrs["final"]) == first["fingerprint"]["final"], m.final
    assert m.dtype == text(attrs["dtype"]), m.dtype
    assert m.hidden_size == int(attrs["hidden_size"]) and m.num_hidden_layers == int(attrs["num_hidden_layers"])
    assert m.model_type == text(attrs["model_type"]) and m.tp == int(attrs["tp"]) and m.model == text(attrs["model"])
    assert m.part_count == parts == m.parts_present and m.complete, (m.part_count, m.parts_present, m.complete)
    L = m.num_hidden_layers
    norm, pre, post = {"post-norm": ("post-norm", None, "last_hidden_state"),
                       "pre-norm": ("pre-norm", "last_hidden_state", None),
                       "both": ("post-norm", "last_hidden_state_prenorm", "last_hidden_state"),
                       "none": (None, None, None)}[m.final]
    assert (m.last_hidden_state_norm, m.pre_norm_key, m.post_norm_key) == (norm, pre, post), m
    assert len(m.slots) == m.num_captures + (m.final != "none") + (m.final == "both"), m.slots
    for k, i in enumerate(m.hf_index):
        assert m.slots[k].startswith(f"hidden_states[:, {k}] = output_hidden_states[{i}]"), m.slots[k]
    if norm == "post-norm":
        assert f"output_hidden_states[{L}] (after the final norm)" in m.slots[m.num_captures], m.slots
    if norm == "pre-norm":
        assert "before the final norm" in m.slots[m.num_captures], m.slots
    skipped = sorted(s["index"] for s in m.skipped)
    listed = sorted([s["index"] for j in manifests for s in json.load(open(j))["skipped"]] +
                    [s["index"] for j in manifests for sh in json.load(open(j))["shards"] for s in sh.get("skipped", [])])
    assert skipped == listed, (skipped, listed)


def check_samples(directory, ref):
    order = sorted(ref)
    for dtype in e3.OUTPUT_DTYPES:
        ds = e3.open_dataset(directory, dtype=dtype)
        assert len(ds) == len(order) and ds.indices == order, (ds.indices, order)
        seen = []
        for position, s in enumerate(ds):
            seen.append(s["index"])
            r = ref[s["index"]]
            assert s["id"] == r["id"], (s["id"], r["id"])
            assert s["input_ids"].dtype == np.int64 and np.array_equal(s["input_ids"], r["input_ids"])
            assert s["loss_mask"].dtype == np.uint8 and np.array_equal(s["loss_mask"], r["loss_mask"])
            names = [n for n in ("hidden_states", "last_hidden_state", "last_hidden_state_prenorm") if n in r]
            assert sorted(n for n in s if n.startswith(("hidden", "last"))) == sorted(
                names + ([n + "_scale" for n in names] if dtype == "stored" and ds.meta.dtype == "fp8" else [])), s.keys()
            for n in names:
                if dtype == "float32":
                    assert s[n].dtype == np.float32 and same(s[n], r[n]), (dtype, s["index"], n)
                elif dtype == "bfloat16-bits":
                    assert same(s[n], r[n + ":bf16"]), (dtype, s["index"], n)
                elif ds.meta.dtype == "fp8":
                    assert same(s[n], r[n + ":stored"][0]) and same(s[n + "_scale"], r[n + ":stored"][1]), n
                else:
                    assert same(s[n], r[n + ":stored"]), (dtype, s["index"], n)
            if dtype == "float32":
                assert np.abs(s["hidden_states"]).max() > 0, s["index"]
                again, by_index = ds[position], ds.by_index(s["index"])
                for other in (again, by_index):
                    assert other["index"] == s["index"] and all(same(other[n], s[n]) for n in names)
        assert seen == order, (seen, order)
        assert ds[-1]["index"] == order[-1]
        ds.close()
    return len(order)


def check_torch(directory, ref, meta):
    try:
        import torch
    except ImportError:
        print("torch not importable: torch_dataset not checked")
        return
    for keys, needed in (("speculators", meta.pre_norm_key), ("specforge", meta.post_norm_key)):
        if needed is None:
            try:
                e3.torch_dataset(directory, keys=keys)
            except e3.DatasetError as e:
                flag = "pre-norm" if keys == "speculators" else "post-norm"
                assert f"--final {flag}" in str(e) and "--final both" in str(e), str(e)
                continue
            raise AssertionError(f"torch_dataset(keys={keys}) accepted a run with --final {meta.final}")
        tds = e3.torch_dataset(directory, keys=keys)
        assert isinstance(tds, torch.utils.data.Dataset) and len(tds) == len(ref)
        for position, index in enumerate(sorted(ref)):
            t, r = tds[position], ref[index]
            T, K, H = r["hidden_states"].shape
            want = {"input_ids": (torch.int64, (T,)), "loss_mask": (torch.int64, (T,))}
            if keys == "speculators":
                want["hidden_states"] = (torch.bfloat16, (T, K + 1, H))
            else:
                want.update(aux_hidden_state=(torch.bfloat16, (T, K * H)), hidden_state=(torch.bfloat16, (T, H)))
            assert {k: (v.dtype, tuple(v.shape)) for k, v in t.items()} == want, (keys, t.keys())
            assert np.array_equal(t["input_ids"].numpy(), r["input_ids"])
            assert np.array_equal(t["loss_mask"].numpy(), r["loss_mask"])
            bits = lambda x: x.view(torch.int16).numpy().view(np.uint16)  # noqa: E731
            final = r[needed + ":bf16"]
            if keys == "speculators":
                assert same(bits(t["hidden_states"][:, :K]), r["hidden_states:bf16"])
                assert same(bits(t["hidden_states"][:, K]), final)
            else:
                assert same(bits(t["aux_hidden_state"]), r["hidden_states:bf16"].reshape(T, K * H))
                assert same(bits(t["hidden_state"]), final)
        loader = torch.utils.data.DataLoader(tds, batch_size=None, num_workers=2)
        assert sorted(int(b["input_ids"].shape[0]) for b in loader) == sorted(len(r["input_ids"]) for r in ref.values())


def check_token_counts(ds, ref):
    """The masked-token counts: the shards' tables, summed, are a count of the samples."""
    want = {}
    for s in ref.values():
        for token_id in s["input_ids"][s["loss_mask"] != 0].tolist():
            want[int(token_id)] = want.get(int(token_id), 0) + 1
    got = ds.token_counts()
    assert got == dict(sorted(want.items())), "token_counts() differs from a count of the samples' masked tokens"
    assert list(got) == sorted(got) and got, "token_counts(): ids not ascending, or none"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("directory")
    p.add_argument("--parts", type=int, default=1)
    args = p.parse_args()
    ref, attrs = reference(args.directory)
    assert ref, "no samples in the reference read"
    ds = e3.open_dataset(args.directory)
    check_meta(ds, attrs, args.directory, args.parts)
    n = check_samples(args.directory, ref)
    check_torch(args.directory, ref, ds.meta)
    check_token_counts(ds, ref)
    print(f"{args.directory}: {n} samples, {ds.meta.dtype}, final {ds.meta.final}: reader equals the reference")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        import traceback
        traceback.print_exc()
        sys.exit(f"FAIL: {e}")
