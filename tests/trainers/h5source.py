"""Our HDF5 output as the ground truth an export is compared against.

Reads the stored bits with h5py directly (no HDF5 float conversion) and turns every state into
the bf16 bits an export must hold: bf16 as stored; fp16, fp32 and fp8 (e4m3fn code * scale,
multiplied in float32) rounded to bf16 to nearest, ties to even.

Shards both with and without the issue-13 schema additions are accepted: without them the HF
index of each slot is `layer_ids` and the final state's norm is the `final` attribute.
"""

import glob
import json
import os

import h5py
import numpy as np

TRAINER_CAPTURES = 3  # every supported trainer concatenates exactly three captured states

_b = np.arange(256)
_exp, _man = (_b >> 3) & 0xF, (_b & 0x7).astype(np.float64)
_mag = np.where(_exp == 0, _man / 8 * 2.0**-6, (1 + _man / 8) * 2.0 ** (_exp - 7))
E4M3FN = (np.where(_b & 0x80, -1, 1) * np.where((_b & 0x7F) == 0x7F, np.nan, _mag)).astype(np.float32)


class SourceError(Exception):
    """The source directory cannot serve the requested format; the message says why."""


def text(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray) and value.shape == ():
        return text(value[()])
    return str(value)


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bf16 bits, rounded to nearest even; NaN stays a quiet NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((bits >> 16).astype(np.uint16) | np.uint16(0x0040)), rounded).astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (np.atleast_1d(np.asarray(bits, dtype=np.uint16)).astype(np.uint32) << 16).view(np.float32)


def _raw(ds):
    stored = ds.id.get_type()
    raw = np.empty(ds.shape, dtype=f"<u{stored.get_size()}")
    if raw.size:
        ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=stored)
    return raw


def _as_bf16_bits(group, name, dtype):
    """A stored state dataset as the bf16 bits an export must carry."""
    raw = _raw(group[name])
    if dtype == "bf16":
        return raw.astype(np.uint16)
    if dtype == "fp16":
        return f32_to_bf16_bits(raw.view(np.float16).astype(np.float32))
    if dtype == "fp32":
        return f32_to_bf16_bits(raw.view(np.float32))
    if dtype == "fp8":
        scale = group[name + "_scale"][...].astype(np.float32)
        return f32_to_bf16_bits(E4M3FN[raw] * scale[..., None])
    raise SourceError(f"{group.file.filename}: unknown dtype attribute {dtype!r}")


class ShardMeta:
    """File attributes of one shard, with the issue-13 values derived where absent."""

    def __init__(self, f):
        path = f.filename
        a = f.attrs
        for key in ("layer_ids", "final", "dtype", "hidden_size", "num_hidden_layers"):
            if key not in a:
                raise SourceError(f"{path}: file attribute {key!r} is missing")
        self.path = path
        self.layer_ids = [int(x) for x in np.asarray(a["layer_ids"]).reshape(-1)]
        self.final = text(a["final"])
        self.dtype = text(a["dtype"])
        self.hidden_size = int(a["hidden_size"])
        self.num_hidden_layers = int(a["num_hidden_layers"])
        if "hidden_states_hf_index" in a:
            self.hf_index = [int(x) for x in np.asarray(a["hidden_states_hf_index"]).reshape(-1)]
        else:
            self.hf_index = list(self.layer_ids)
        if self.hf_index != self.layer_ids:
            raise SourceError(f"{path}: hidden_states_hf_index {self.hf_index} differs from layer_ids {self.layer_ids}")
        if self.final not in ("pre-norm", "post-norm", "both", "none"):
            raise SourceError(f"{path}: unknown final attribute {self.final!r}")
        norm = text(a["last_hidden_state_norm"]) if "last_hidden_state_norm" in a else None
        expected_norm = {"pre-norm": "pre-norm", "post-norm": "post-norm", "both": "post-norm", "none": None}[self.final]
        if norm is not None and norm != expected_norm:
            raise SourceError(f"{path}: last_hidden_state_norm {norm!r} contradicts final {self.final!r}")

    def key(self):
        return (tuple(self.layer_ids), self.final, self.dtype, self.hidden_size, self.num_hidden_layers)

    def prenorm_dataset(self):
        """Name of the dataset holding the pre-norm final state, or None."""
        return {"both": "last_hidden_state_prenorm", "pre-norm": "last_hidden_state"}.get(self.final)

    def postnorm_dataset(self):
        return "last_hidden_state" if self.final in ("post-norm", "both") else None


def _manifests(src):
    paths = sorted(p for p in glob.glob(os.path.join(src, "manifest*.json"))
                   if os.path.basename(p) == "manifest.json"
                   or (os.path.basename(p).startswith("manifest.part-") and p.endswith(".json")))
    if not paths:
        raise SourceError(f"{src}: no manifest.json (not an eagle3_extract output directory)")
    return paths


def shard_paths(src):
    """The shard files the manifest(s) list, each once."""
    out = []
    for m in _manifests(src):
        with open(m) as fh:
            doc = json.load(fh)
        for s in doc.get("shards", []):
            name = s["file"]
            if "/" in name or name in ("", ".", ".."):
                raise SourceError(f"{m}: shard file {name!r} is not a plain file name")
            out.append(os.path.join(src, name))
    if len(set(out)) != len(out):
        raise SourceError(f"{src}: a shard is listed twice by the manifests")
    return sorted(out)


class Sample:
    """One stored sample: token data and the states as bf16 bits (uint16)."""

    def __init__(self, index, sample_id, input_ids, loss_mask, captures, prenorm, postnorm):
        self.index = index
        self.id = sample_id
        self.input_ids = input_ids  # int64 [T]
        self.loss_mask = loss_mask  # int64 [T]
        self.captures = captures  # uint16 [T, K, H]
        self.prenorm = prenorm  # uint16 [T, H] or None
        self.postnorm = postnorm  # uint16 [T, H] or None

    @property
    def tokens(self):
        return int(self.input_ids.shape[0])


class Source:
    """An eagle3_extract output directory, iterated in sample-index order, one sample in memory."""

    def __init__(self, src):
        self.dir = src
        self.shards = shard_paths(src)
        self.meta = None
        self.locations = []  # (sample index, shard path, group name)
        for path in self.shards:
            with h5py.File(path, "r") as f:
                meta = ShardMeta(f)
                if self.meta is None:
                    self.meta = meta
                elif meta.key() != self.meta.key():
                    raise SourceError(f"{path}: attributes differ from {self.meta.path}")
                if "samples" in f:
                    for name in f["samples"]:
                        self.locations.append((int(name), path, name))
        if self.meta is None:
            raise SourceError(f"{src}: the manifests list no shards")
        self.locations.sort()
        indices = [i for i, _, _ in self.locations]
        if len(set(indices)) != len(indices):
            raise SourceError(f"{src}: a sample index is stored in two shards")

    def __len__(self):
        return len(self.locations)

    def require(self, need_final):
        """Refuse a source that lacks what a format needs (need_final: 'pre-norm'|'post-norm')."""
        m = self.meta
        if len(m.layer_ids) != TRAINER_CAPTURES:
            raise SourceError(f"{m.path}: {len(m.layer_ids)} capture ids {m.layer_ids}; the trainers need exactly "
                              f"{TRAINER_CAPTURES} (rerun with --layers a,b,c)")
        have = m.prenorm_dataset() if need_final == "pre-norm" else m.postnorm_dataset()
        if have is None:
            raise SourceError(f"{m.path}: final={m.final!r} stores no {need_final} final state "
                              f"(rerun with --final {need_final} or --final both)")

    def ids(self):
        """(sample index, id or None) of every sample, in index order, without reading states."""
        out, handles = [], {}
        try:
            for index, path, name in self.locations:
                if path not in handles:
                    handles[path] = h5py.File(path, "r")
                attrs = handles[path]["samples"][name].attrs
                out.append((index, text(attrs["id"]) if "id" in attrs else None))
        finally:
            for f in handles.values():
                f.close()
        return out

    def masked_token_counts(self):
        """{token id: count} of input_ids where loss_mask is 1, over every stored sample, ids
        ascending (the states are not read)."""
        counts = {}
        handles = {}
        try:
            for _, path, name in self.locations:
                if path not in handles:
                    handles[path] = h5py.File(path, "r")
                g = handles[path]["samples"][name]
                ids = g["input_ids"][...].astype(np.int64)
                mask = g["loss_mask"][...]
                for token_id, n in zip(*np.unique(ids[mask != 0], return_counts=True)):
                    counts[int(token_id)] = counts.get(int(token_id), 0) + int(n)
        finally:
            for f in handles.values():
                f.close()
        return dict(sorted(counts.items()))

    def stored_token_counts(self):
        """(the sum of the shards' /token_counts as {id: count}, the vocab_size they record), or
        (None, None) when a shard has no table (written before eagle3_extract counted tokens)."""
        counts, vocab_size = {}, None
        for path in self.shards:
            with h5py.File(path, "r") as f:
                if "token_counts" not in f:
                    return None, None
                ds = f["token_counts"]
                if "vocab_size" in ds.attrs:
                    vocab_size = int(ds.attrs["vocab_size"])
                for token_id, n in ds[...].reshape(-1, 2).tolist():
                    counts[token_id] = counts.get(token_id, 0) + n
        return dict(sorted(counts.items())), vocab_size

    def model_vocab_size(self):
        """vocab_size of the config.json of the model the shards name (attribute `model`)."""
        with h5py.File(self.shards[0], "r") as f:
            model = text(f.attrs["model"])
        with open(os.path.join(model, "config.json")) as fh:
            return int(json.load(fh)["vocab_size"])

    def __iter__(self):
        m = self.meta
        open_path, f = None, None
        try:
            for index, path, name in self.locations:
                if path != open_path:
                    if f is not None:
                        f.close()
                    f, open_path = h5py.File(path, "r"), path
                g = f["samples"][name]
                ids = g["input_ids"][...].astype(np.int64)
                mask = g["loss_mask"][...].astype(np.int64)
                sample_id = text(g.attrs["id"]) if "id" in g.attrs else None
                pre, post = m.prenorm_dataset(), m.postnorm_dataset()
                yield Sample(index, sample_id, ids, mask,
                             _as_bf16_bits(g, "hidden_states", m.dtype),
                             _as_bf16_bits(g, pre, m.dtype) if pre else None,
                             _as_bf16_bits(g, post, m.dtype) if post else None)
        finally:
            if f is not None:
                f.close()
