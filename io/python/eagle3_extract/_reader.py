"""open_dataset: the samples of an eagle3_extract output directory, in input order."""

import os
import stat
import threading
from dataclasses import dataclass, field
from typing import List, Optional

import h5py
import numpy as np

from . import _decode
from ._manifest import DatasetError, read_manifests

FORMAT_NAME = "eagle3-hidden-states"
FORMAT_VERSION = 1
FP8_ENCODING = "float8_e4m3fn"
STATE_DTYPES = ("bf16", "fp16", "fp32", "fp8")
# What a sample's arrays of states are returned as (open_dataset's dtype=).
OUTPUT_DTYPES = ("float32", "bfloat16-bits", "stored")
_CHECKS = ("full", "lazy")
# The file attributes every shard of one run shares.
# tp and model (the path) may differ: a rerun may use other ranks or a moved copy of the checkpoint.
_RUN_ATTRIBUTES = ("model_type", "hidden_size", "num_hidden_layers", "config_fingerprint", "run_fingerprint",
                   "tool_version")
# Added by issue 13: compared where both shards have them.
_LAYER_ATTRIBUTES = ("hidden_states_hf_index", "last_hidden_state_norm", "slots")
# What h5py and numpy raise on a damaged file (h5py maps HDF5's errors to all of these, a bare
# RuntimeError included; a damaged shape asks numpy for an impossible array): each becomes a
# DatasetError naming the file.
_DAMAGE = (KeyError, TypeError, ValueError, OSError, RuntimeError, IndexError, OverflowError, MemoryError)


def _damaged(where, e):
    return DatasetError(f"{where}: {type(e).__name__}: {e}")


def _text(value):
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    raise TypeError(f"not a string: {value!r}")


def _texts(value):
    return [_text(v) for v in np.atleast_1d(value)]


def _ints(value):
    return [int(v) for v in np.atleast_1d(value)]


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


def _stored_dtype(dset):
    """'bf16', 'fp16', 'fp32' or 'fp8' from a dataset's HDF5 type (io/hdf5.cpp storage_dtype_of), else None."""
    t = dset.id.get_type()
    cls, size = t.get_class(), t.get_size()
    if cls == h5py.h5t.INTEGER and size == 1 and t.get_sign() == h5py.h5t.SGN_NONE:
        return "fp8"  # only with the encoding attribute, checked by the caller
    if cls != h5py.h5t.FLOAT:
        return None
    if size == 4:
        return "fp32"
    if size != 2:
        return None
    _spos, _epos, esize, _mpos, msize = t.get_fields()
    if (esize, msize, t.get_ebias()) == (8, 7, 127):
        return "bf16"
    if (esize, msize, t.get_ebias()) == (5, 10, 15):
        return "fp16"
    return None


@dataclass
class Meta:
    """What the run stored, from the shards' file attributes and the manifests.

    hf_index[k] is the HuggingFace ``output_hidden_states`` index of ``hidden_states[:, k]``
    (index 0 is the embeddings, index i + 1 the output of decoder layer i). The final state:
    ``pre_norm_key`` / ``post_norm_key`` name the dataset holding the last decoder layer's output
    before / after the model's final norm, or are None when the run did not store it.
    """

    directory: str
    dtype: str  # storage: bf16 | fp16 | fp32 | fp8
    layer_ids: List[int]
    hf_index: List[int]
    final: str  # the --final of the run: post-norm | pre-norm | both | none
    last_hidden_state_norm: Optional[str]  # what last_hidden_state holds: post-norm | pre-norm | None
    pre_norm_key: Optional[str]
    post_norm_key: Optional[str]
    slots: List[str]  # one line per stored state saying what it is
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    tp: int
    model: str  # the checkpoint path of the run
    tool_version: str
    num_input_samples: int  # samples in the input, stored or not
    part_count: int
    parts_present: int
    complete: bool
    skipped: List[dict] = field(default_factory=list)  # {"index", "line", "reason"} of samples not stored

    @property
    def num_captures(self):
        return len(self.layer_ids)


def _slot_lines(hf_index, final, norm_of_last, num_layers):
    """The `slots` attribute's lines, for shards written before it existed."""
    lines = []
    for k, i in enumerate(hf_index):
        what = "the embeddings" if i == 0 else f"output of decoder layer {i - 1}"
        lines.append(f"hidden_states[:, {k}] = output_hidden_states[{i}] ({what})")
    pre = f"output of decoder layer {num_layers - 1} before the final norm (vLLM id {num_layers})"
    post = f"output_hidden_states[{num_layers}] (after the final norm)"
    if norm_of_last == "post-norm":
        lines.append(f"last_hidden_state = {post}")
    elif norm_of_last == "pre-norm":
        lines.append(f"last_hidden_state = {pre}")
    if final == "both":
        lines.append(f"last_hidden_state_prenorm = {pre}")
    return lines


class _SampleChecker:
    """A sample group's datasets against the run's attributes (verify's per-sample checks)."""

    def __init__(self, dtype, num_captures, hidden_size, final):
        self.dtype, self.K, self.H, self.final = dtype, num_captures, hidden_size, final
        self.finals = {"none": (), "both": ("last_hidden_state", "last_hidden_state_prenorm")}.get(
            final, ("last_hidden_state",))

    def check(self, group, where):
        """Returns the sample's token count; raises DatasetError naming WHERE."""

        def dataset(name):
            obj = group.get(name)
            if not isinstance(obj, h5py.Dataset):
                raise DatasetError(f"{where}: dataset '{name}' is missing")
            return obj

        ids = dataset("input_ids")
        if len(ids.shape) != 1 or ids.shape[0] == 0 or ids.dtype.kind not in "iu":
            raise DatasetError(f"{where}: input_ids must be a non-empty 1-D integer dataset")
        T = ids.shape[0]
        tokens = group.attrs.get("num_tokens")
        if tokens is None or int(np.asarray(tokens)) != T:
            raise DatasetError(f"{where}: num_tokens attribute is not {T}")
        mask = dataset("loss_mask")
        if mask.shape != (T,) or mask.dtype.kind not in "iu":
            raise DatasetError(f"{where}: loss_mask must be [{T}] integers")
        self._states(dataset, "hidden_states", (T, self.K, self.H), where)
        for name in ("last_hidden_state", "last_hidden_state_prenorm"):
            present = name in group
            wanted = name in self.finals
            if present != wanted:
                raise DatasetError(f"{where}: {name} is {'present' if present else 'absent'} but --final is "
                                   f"{self.final}")
            if present:
                self._states(dataset, name, (T, self.H), where)
        return T

    def _states(self, dataset, name, shape, where):
        d = dataset(name)
        if d.shape != shape:
            raise DatasetError(f"{where}: {name} has shape {list(d.shape)}, expected {list(shape)}")
        stored = _stored_dtype(d)
        if self.dtype == "fp8":
            encoding = d.attrs.get("encoding")
            if stored != "fp8" or encoding is None or _text(encoding) != FP8_ENCODING:
                raise DatasetError(f'{where}: {name} is not stored as fp8 (uint8 with attribute encoding = '
                                   f'"{FP8_ENCODING}")')
            scale = dataset(name + "_scale")
            if scale.shape != shape[:-1] or _stored_dtype(scale) != "fp32":
                raise DatasetError(f"{where}: {name}_scale must be float32 of shape {list(shape[:-1])}, it is "
                                   f"{list(scale.shape)}")
        elif stored != self.dtype:
            raise DatasetError(f"{where}: {name} is not stored as {self.dtype}")


class _Shard:
    def __init__(self, path, record):
        self.path = path
        self.record = record
        self.samples = sorted(record.samples)


class Dataset:
    """The stored samples of an output directory, in input (sample-index) order.

    ``len(ds)``; ``ds[i]``: the i-th stored sample; ``ds.by_index(n)``: the sample of input
    index n (a skipped sample is absent: KeyError); iterating opens each shard file once and
    walks its samples. A sample is a dict of numpy arrays:

    - ``input_ids``: int64 [T]
    - ``loss_mask``: uint8 [T], 0 or 1, as stored
    - ``hidden_states``: [T, K, H], K = len(meta.layer_ids), slot k = meta.hf_index[k]
    - ``last_hidden_state``: [T, H] (absent with --final none; meta.last_hidden_state_norm says
      whether it is before or after the final norm)
    - ``last_hidden_state_prenorm``: [T, H] (--final both only: before the final norm)
    - ``index``: int, the sample's index in the input; ``id``: str, or None without one

    States are float32 with dtype="float32"; uint16 bf16 bits with dtype="bfloat16-bits" (bf16
    storage is returned as stored, other storage rounded to nearest even from its float32 value);
    with dtype="stored" the stored bits as they are (uint16 for bf16/fp16, float32, or uint8 fp8
    codes plus the float32 ``*_scale`` arrays of their rows).
    """

    def __init__(self, directory, dtype, meta, shards, checker, check_on_read):
        self.directory = directory
        self.dtype = dtype
        self.meta = meta
        self._shards = shards
        self._checker = checker
        self._check_on_read = check_on_read
        # Per thread: the file of the last random access, and the buffer stored bits are read
        # into before decoding. Threads sharing either would close or overwrite each other's.
        self._local = threading.local()
        self._order = [(idx, shard) for shard in shards for idx in shard.samples]
        self._position = {idx: i for i, (idx, _) in enumerate(self._order)}

    # -- the sequence -----------------------------------------------------------------------
    def __len__(self):
        return len(self._order)

    @property
    def indices(self):
        """The input indices of the stored samples, in order."""
        return [idx for idx, _ in self._order]

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        position = int(position)
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(f"{self.directory}: position {position} of {len(self)} stored samples")
        index, shard = self._order[position]
        return self._read(self._file(shard), shard, index)

    def by_index(self, sample_index):
        """The sample of input index SAMPLE_INDEX; KeyError if it is not stored (skipped)."""
        position = self._position.get(int(sample_index))
        if position is None:
            why = next((s["reason"] for s in self.meta.skipped if s["index"] == sample_index), None)
            raise KeyError(f"{self.directory}: sample {sample_index} is not stored"
                           + (f" (skipped: {why})" if why else ""))
        return self[position]

    def __iter__(self):
        for shard in self._shards:
            with self._open_file(shard) as f:
                for index in shard.samples:
                    yield self._read(f, shard, index)

    def token_counts(self):
        """How often each token id is masked (loss_mask 1) in the stored samples, as a dict
        {id: count} with ids ascending: the counts a draft model's reduced vocabulary is chosen
        from. Summed over the shards' /token_counts; a shard written before eagle3_extract counted
        tokens has none, and its samples' input_ids and loss_mask are counted instead."""
        counts = {}

        def add(token_ids, ns):
            for token_id, n in zip(token_ids.tolist(), ns.tolist()):
                counts[token_id] = counts.get(token_id, 0) + n

        for shard in self._shards:
            with self._open_file(shard) as f:
                try:
                    if "token_counts" in f:
                        rows = f["token_counts"][()]
                        if rows.ndim != 2 or rows.shape[1] != 2 or rows.dtype.kind != "i":
                            raise DatasetError(f"{shard.path}: /token_counts must be int64 [n, 2], it is "
                                               f"{rows.dtype} {list(rows.shape)}")
                        add(rows[:, 0], rows[:, 1])
                        continue
                    for index in shard.samples:
                        g = f["samples"][f"{index:08d}"]
                        ids = g["input_ids"][()]
                        add(*np.unique(ids[g["loss_mask"][()] != 0], return_counts=True))
                except DatasetError:
                    raise
                except _DAMAGE as e:  # changed or damaged since it was opened
                    raise _damaged(shard.path, e) from None
        return dict(sorted(counts.items()))

    def close(self):
        """Closes the file this thread kept open for random access (iteration closes its own)."""
        held = getattr(self._local, "open", None)
        if held is not None:
            self._local.open = None
            if held[0] == os.getpid():
                held[2].close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getstate__(self):  # for DataLoader workers: each process opens its own files
        state = dict(self.__dict__)
        del state["_local"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local = threading.local()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- reading ------------------------------------------------------------------------------
    def _open_file(self, shard):
        try:
            return h5py.File(shard.path, "r")
        except _DAMAGE as e:
            raise DatasetError(f"{shard.path}: not a readable HDF5 file: {e}") from None

    def _file(self, shard):
        # A handle opened before a fork (DataLoader workers) must not be used by the child.
        pid = os.getpid()
        held = getattr(self._local, "open", None)
        if held is not None and (held[0] != pid or held[1] is not shard):
            self.close()
            held = None
        if held is None:
            held = self._local.open = (pid, shard, self._open_file(shard))
        return held[2]

    def _read(self, f, shard, index):
        # The low-level h5py calls: the high-level lookups cost milliseconds per sample.
        key = f"{index:08d}"
        where = f"{shard.path} sample {key}"
        try:
            try:
                gid = h5py.h5g.open(f.id, f"samples/{key}".encode())
            except KeyError:
                raise DatasetError(f"{where}: missing") from None
            group = h5py.Group(gid)
            if self._check_on_read:
                self._checker.check(group, where)
            sample_id = group.attrs.get("id")
            out = {"index": index, "id": None if sample_id is None else _text(sample_id)}
            out["input_ids"] = self._dataset(gid, "input_ids", np.int64, convert=True)
            out["loss_mask"] = self._dataset(gid, "loss_mask", np.uint8, convert=True)
            for name in ("hidden_states", "last_hidden_state", "last_hidden_state_prenorm"):
                if name.encode() in gid:
                    out.update(self._states(gid, name))
        except DatasetError:
            raise
        except _DAMAGE as e:  # changed or damaged since it was opened
            raise _damaged(where, e) from None
        return out

    def _dataset(self, gid, name, np_dtype, convert=False, scratch=False):
        """A dataset's values: converted by HDF5 to np_dtype (integers: fast), or its stored bits
        as np_dtype, in this Dataset's scratch buffer when they are decoded right away (a fresh
        buffer per sample would cost page faults)."""
        dsid = h5py.h5d.open(gid, name.encode())
        shape = dsid.shape
        if scratch:
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(np_dtype).itemsize
            buf = getattr(self._local, "scratch", None)
            if buf is None or buf.size < nbytes:
                buf = self._local.scratch = np.empty(max(nbytes, 0 if buf is None else 2 * buf.size), np.uint8)
            out = buf[:nbytes].view(np_dtype).reshape(shape)
        else:
            out = np.empty(shape, np_dtype)
        if out.size:
            if convert:
                dsid.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
            else:
                dsid.read(h5py.h5s.ALL, h5py.h5s.ALL, out, mtype=dsid.get_type())
        return out

    def _states(self, gid, name):
        storage, want = self.meta.dtype, self.dtype
        if storage == "fp8":
            codes = self._dataset(gid, name, np.uint8, scratch=want != "stored")
            scale = self._dataset(gid, name + "_scale", np.float32)
            if want == "stored":
                return {name: codes, name + "_scale": scale}
            values = _decode.fp8_bits_to_float32(codes, scale)
        elif storage == "fp32":
            values = self._dataset(gid, name, np.float32, scratch=want == "bfloat16-bits")
            if want != "bfloat16-bits":
                return {name: values}
        else:
            passed_through = want == "stored" or (want == "bfloat16-bits" and storage == "bf16")
            bits = self._dataset(gid, name, np.uint16, scratch=not passed_through)
            if passed_through:
                return {name: bits}
            decode = _decode.bf16_bits_to_float32 if storage == "bf16" else _decode.fp16_bits_to_float32
            values = decode(bits)
        if want == "bfloat16-bits":
            return {name: _decode.float32_to_bf16_bits(values)}
        return {name: values}


def _check_file(path, record):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise DatasetError(f"{path}: listed in the manifest but missing") from None
    except OSError as e:
        raise DatasetError(f"{path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DatasetError(f"{path}: not a regular file (a shard must be a plain file, not a link, FIFO or directory)")
    if st.st_size != record.num_bytes:
        raise DatasetError(f"{path}: {st.st_size} bytes, the manifest says {record.num_bytes} (truncated or rewritten)")


def _shard_attributes(f, path, record, manifest):
    """The checks of one shard's file attributes; returns them as Python values."""
    attrs = {}
    for key in f.attrs:
        attrs[key] = f.attrs[key]
    try:
        fmt = _text(attrs.get("format", b""))
    except TypeError:
        fmt = None
    if fmt != FORMAT_NAME:
        raise DatasetError(f"{path}: attribute format is not '{FORMAT_NAME}' (not an eagle3_extract shard)")
    if "format_version" not in attrs or int(np.asarray(attrs["format_version"])) != FORMAT_VERSION:
        raise DatasetError(f"{path}: unexpected format_version (this reader knows {FORMAT_VERSION})")
    fp = manifest.fingerprint
    layer_ids = _ints(attrs["layer_ids"]) if "layer_ids" in attrs else None
    if layer_ids != fp["layer_ids"]:
        raise DatasetError(f"{path}: layer_ids {layer_ids} differ from the manifest's {fp['layer_ids']}")
    for key, want in (("final", fp["final"]), ("dtype", fp["dtype"])):
        got = _text(attrs[key]) if key in attrs else None
        if got != want:
            raise DatasetError(f"{path}: attribute {key} is {got!r}, the manifest says {want!r}")
    if "shard_index" not in attrs or int(np.asarray(attrs["shard_index"])) != record.shard_index:
        raise DatasetError(f"{path}: shard_index differs from the manifest's {record.shard_index}")
    if "hidden_size" not in attrs or int(np.asarray(attrs["hidden_size"])) <= 0:
        raise DatasetError(f"{path}: missing hidden_size")
    run_fp = _text(attrs["run_fingerprint"]) if "run_fingerprint" in attrs else None
    if manifest.run_fingerprint is not None and run_fp != manifest.run_fingerprint:
        raise DatasetError(f"{path}: run_fingerprint {run_fp} differs from {manifest.path}'s "
                           f"{manifest.run_fingerprint} (a shard of another run)")
    return attrs


def _check_shard(f, shard, attrs, checker, full):
    path, record = shard.path, shard.record
    samples = f.get("samples")
    if not isinstance(samples, h5py.Group):
        raise DatasetError(f"{path}: no /samples group")
    expected = {f"{i:08d}" for i in record.samples}
    names = set(samples.keys())
    for name in sorted(names - expected):
        raise DatasetError(f"{path}: sample {name} is in the file but not in the manifest")
    for name in sorted(expected - names):
        raise DatasetError(f"{path} sample {name}: missing")
    if full:
        tokens = sum(checker.check(samples[n], f"{path} sample {n}") for n in sorted(expected))
        if tokens != record.num_tokens:
            raise DatasetError(f"{path}: {tokens} tokens, the manifest says {record.num_tokens}")
    in_file = sorted(f["skipped"].keys()) if isinstance(f.get("skipped"), h5py.Group) else []
    in_manifest = sorted(f"{sk.index:08d}" for sk in record.skipped)
    if in_file != in_manifest:
        raise DatasetError(f"{path}: /skipped holds {in_file}, the manifest lists {in_manifest}")


def _meta(directory, manifests, attrs, complete, parts_present):
    fp = manifests[0].fingerprint
    final = fp["final"]
    layer_ids = list(fp["layer_ids"])
    L = int(np.asarray(attrs["num_hidden_layers"]))
    hf_index = _ints(attrs["hidden_states_hf_index"]) if "hidden_states_hf_index" in attrs else list(layer_ids)
    if "last_hidden_state_norm" in attrs:
        norm = _text(attrs["last_hidden_state_norm"])
    else:  # shards from before the attribute: --final said it
        norm = {"post-norm": "post-norm", "pre-norm": "pre-norm", "both": "post-norm"}.get(final)
    pre_key = {"both": "last_hidden_state_prenorm"}.get(final, "last_hidden_state" if norm == "pre-norm" else None)
    post_key = "last_hidden_state" if norm == "post-norm" else None
    # The layer attributes must agree with layer_ids and --final: never guess which one is right.
    where = f"{directory}: the shards' attributes"
    if hf_index != layer_ids:
        raise DatasetError(f"{where}: hidden_states_hf_index {hf_index} differs from layer_ids {layer_ids}")
    want_norm = {"post-norm": "post-norm", "pre-norm": "pre-norm", "both": "post-norm"}.get(final)
    if final != "none" and norm != want_norm:
        raise DatasetError(f"{where}: last_hidden_state_norm is {norm!r}, but --final {final} stores {want_norm} "
                           "in last_hidden_state")
    slots = _texts(attrs["slots"]) if "slots" in attrs else _slot_lines(hf_index, final, norm, L)
    skipped = [{"index": s.index, "line": s.line, "reason": s.reason}
               for m in manifests for s in list(m.skipped) + [sk for r in m.shards for sk in r.skipped]]
    return Meta(directory=directory, dtype=fp["dtype"], layer_ids=layer_ids, hf_index=hf_index, final=final,
                last_hidden_state_norm=norm, pre_norm_key=pre_key, post_norm_key=post_key, slots=slots,
                model_type=_text(attrs.get("model_type", b"")), hidden_size=int(np.asarray(attrs["hidden_size"])),
                num_hidden_layers=L, tp=int(np.asarray(attrs.get("tp", 0))),
                model=_text(attrs.get("model", manifests[0].model_path.encode())),
                tool_version=_text(attrs.get("tool_version", fp["tool_version"].encode())),
                num_input_samples=manifests[0].num_samples, part_count=manifests[0].part_count,
                parts_present=parts_present, complete=complete, skipped=sorted(skipped, key=lambda s: s["index"]))


def open_dataset(directory, dtype="float32", allow_incomplete=False, check="full"):
    """Opens the --out directory of an eagle3_extract run for reading (see Dataset).

    Refuses (DatasetError, naming the file and the problem) a directory that fails the
    structural checks of ``eagle3_extract verify``: the manifests (``manifest.json``, or
    ``manifest.part-I-of-P.json`` of every part, read as one dataset) present, parseable and
    consistent with each other; every listed shard a plain file in DIR of the listed size, with
    the run's attributes and fingerprint, holding exactly its listed samples; every sample's
    datasets of the shapes and stored types the attributes say. A run that is not complete
    (shards or parts missing) is refused unless allow_incomplete=True, which reads the samples
    the manifests list. Checksums and finiteness are not checked (they read every byte): run
    ``eagle3_extract verify DIR`` for those.

    check="full" checks every sample's datasets when opening; check="lazy" checks a sample's
    when it is read (opening a large directory then reads only the shards' sample lists).
    """
    if dtype not in OUTPUT_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(OUTPUT_DTYPES)}, not {dtype!r}")
    if check not in _CHECKS:
        raise ValueError(f"check must be one of {', '.join(_CHECKS)}, not {check!r}")
    directory = os.fspath(directory)
    manifests = read_manifests(directory)
    fp = manifests[0].fingerprint
    if fp["dtype"] not in STATE_DTYPES:
        raise DatasetError(f"{manifests[0].path}: unknown dtype {fp['dtype']!r}")
    part_count = manifests[0].part_count
    complete = len(manifests) == part_count and all(m.complete for m in manifests)
    stored = sum(len(r.samples) for m in manifests for r in m.shards)
    skipped = sum(len(m.skipped) + sum(len(r.skipped) for r in m.shards) for m in manifests)
    listed = {r.file for m in manifests for r in m.shards}
    unlisted = sorted(n for n in os.listdir(directory) if n.endswith(".h5") and n not in listed)
    if complete and unlisted:
        raise DatasetError(f"{os.path.join(directory, unlisted[0])}: a shard file that no manifest lists, in a "
                           "complete run")
    if complete and stored + skipped != manifests[0].num_samples:
        raise DatasetError(f"{directory}: the manifests say complete, but {stored} stored + {skipped} skipped != "
                           f"{manifests[0].num_samples} input samples")
    if not complete and not allow_incomplete:
        parts = "" if part_count == 1 else f", {len(manifests)} of {part_count} parts present"
        raise DatasetError(
            f"{directory}: the run is not complete: {stored + skipped} of {manifests[0].num_samples} input samples "
            f"accounted for ({stored} stored, {skipped} skipped){parts}; rerun "
            f"{'the same command' if part_count == 1 else 'the command of every part'} to finish it, or pass "
            "allow_incomplete=True to read the samples that are there")
    records = sorted(((m, r) for m in manifests for r in m.shards), key=lambda mr: mr[1].shard_index)
    shards, first_attrs, checker = [], None, None
    for manifest, record in records:
        shard = _Shard(os.path.join(directory, record.file), record)
        _check_file(shard.path, record)
        try:
            f = h5py.File(shard.path, "r")
        except _DAMAGE as e:
            raise DatasetError(f"{shard.path}: not a readable HDF5 file: {e}") from None
        try:
            with f:
                attrs = _shard_attributes(f, shard.path, record, manifest)
                if first_attrs is None:
                    first_attrs = attrs
                    checker = _SampleChecker(fp["dtype"], len(fp["layer_ids"]), int(np.asarray(attrs["hidden_size"])),
                                             fp["final"])
                for key in _RUN_ATTRIBUTES + _LAYER_ATTRIBUTES:
                    both = key in attrs and key in first_attrs
                    one = (key in attrs) != (key in first_attrs) and key in _RUN_ATTRIBUTES
                    if one or (both and not _same(attrs[key], first_attrs[key])):
                        raise DatasetError(f"{shard.path}: attribute {key} differs from {shards[0].path}'s (shards of "
                                           "different runs)")
                _check_shard(f, shard, attrs, checker, check == "full")
        except DatasetError:
            raise
        except _DAMAGE as e:  # an attribute of the wrong kind, a damaged file
            raise _damaged(shard.path, e) from None
        shards.append(shard)
    if first_attrs is None:  # nothing stored yet: the attributes come from the manifest alone
        first_attrs = {"num_hidden_layers": 0, "hidden_size": 0}
        checker = _SampleChecker(fp["dtype"], len(fp["layer_ids"]), 0, fp["final"])
    try:
        meta = _meta(directory, manifests, first_attrs, complete, len(manifests))
    except DatasetError:
        raise
    except _DAMAGE as e:
        raise DatasetError(f"{shards[0].path}: {type(e).__name__} in its attributes: {e}") from None
    return Dataset(directory, dtype, meta, shards, checker, check == "lazy")
