#!/usr/bin/python3
"""Compare an export against the eagle3_extract output it was made from, bit for bit.

Usage: check_export.py --format speculators|specforge|modelopt [--draft-vocab-size N] SRC_H5_DIR DEST_DIR

Every sample stored in SRC (in /samples of the shards the manifests list) must be in DEST
exactly once, read back through the reader written from that trainer's own loading code, with
the keys, dtypes and shapes the trainer expects and the states equal to SRC's as bf16 bits:
bf16 stored bits as they are; fp16, fp32 and fp8 (e4m3fn code * scale in float32) rounded to
bf16 to nearest, ties to even. speculators takes the pre-norm final state, SpecForge and
ModelOpt the post-norm one; a SRC without it is refused. ModelOpt's aux states are in ascending
layer order (modelopt_order), the others' in SRC's.

With --draft-vocab-size N, DEST must also hold the trainer's draft-vocabulary file(s), loaded
as the trainer loads them (the readers), equal to what the trainer's own builder makes of
SRC's masked-token counts (recounted here from every sample's input_ids and loss_mask, and
compared with the shards' /token_counts) for N tokens, ties going to the lower id: speculators'
build_vocab_mappings_from_distribution, SpecForge's process_token_dict_to_mappings and
ModelOpt's calibrate_frequent_vocab on a Counter filled in ascending id order (ModelOpt's
refusal of fewer than N distinct ids aside: then the lowest uncounted ids follow, ascending).
SpecForge's own derivation from DEST's .ckpt files (its ties go to the first counted) must
cover as many masked tokens. Exit 0 when all holds; otherwise one line per problem (at most
20 shown) and exit 1.
"""

import argparse
import json
import os
import re
import sys

import numpy as np
import torch

import h5source
import read_modelopt
import read_specforge
import read_speculators
import safetensors_io

MAX_SHOWN = 20
GROUP = 2000  # SpecForge's file_group_size


class Problems:
    def __init__(self):
        self.lines = []

    def add(self, line):
        self.lines.append(line)

    def __bool__(self):
        return bool(self.lines)

    def report(self):
        for line in self.lines[:MAX_SHOWN]:
            print(f"check_export: {line}", file=sys.stderr)
        if len(self.lines) > MAX_SHOWN:
            print(f"check_export: ... and {len(self.lines) - MAX_SHOWN} more problems", file=sys.stderr)


def bits(t):
    """bf16 tensor -> uint16 numpy bits."""
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def first_difference(got, want):
    """'token t, column c: got X, want Y' for two bf16 bit arrays of one shape."""
    where = np.argwhere(got != want)[0]
    g = float(h5source.bf16_bits_to_f32(got[tuple(where)])[0])
    w = float(h5source.bf16_bits_to_f32(want[tuple(where)])[0])
    return f"first at {tuple(int(x) for x in where)}: {g!r} (0x{int(got[tuple(where)]):04x}), " \
           f"want {w!r} (0x{int(want[tuple(where)]):04x}); {int((got != want).sum())} values differ"


def compare_state(problems, where, what, got, want, sample):
    """Report a state that differs, saying which stored state it matches instead if any."""
    if np.array_equal(got, want):
        return
    hint = ""
    others = [("the post-norm final state", sample.postnorm), ("the pre-norm final state", sample.prenorm)]
    others += [(f"capture slot {k}", sample.captures[:, k]) for k in range(sample.captures.shape[1])]
    for name, other in others:
        if other is not None and other.shape == got.shape and np.array_equal(got, other):
            hint = f" (it holds {name})"
            break
    problems.add(f"{where}: {what} differs from SRC sample {sample.index}{hint}: {first_difference(got, want)}")


def check_tensor(problems, where, name, value, dtype, shape):
    """Type, dtype and shape of one stored value; False when the values cannot be compared."""
    if not torch.is_tensor(value):
        problems.add(f"{where}: {name} is a {type(value).__name__}, not a tensor")
        return False
    ok = True
    if value.dtype != dtype:
        problems.add(f"{where}: {name} has dtype {value.dtype}, expected {dtype}")
        ok = False
    if tuple(value.shape) != tuple(shape):
        problems.add(f"{where}: {name} has shape {list(value.shape)}, expected {list(shape)}")
        ok = False
    return ok


def check_ints(problems, where, name, value, want):
    if not np.array_equal(value.numpy() if torch.is_tensor(value) else np.asarray(value), want):
        problems.add(f"{where}: {name} differs from SRC")


def check_keys(problems, where, got, required, optional=()):
    missing = sorted(set(required) - set(got))
    extra = sorted(set(got) - set(required) - set(optional))
    if missing:
        problems.add(f"{where}: missing key(s) {missing}")
    if extra:
        problems.add(f"{where}: unexpected key(s) {extra} (expected {sorted(required)})")
    return not missing


# ---------------------------------------------------------------------------------------------

def check_speculators(src, dest, problems):
    src.require("pre-norm")
    H = src.meta.hidden_size
    try:
        reader = read_speculators.SpeculatorsReader(dest)
    except (read_speculators.ReaderError, OSError) as e:
        problems.add(str(e))
        return 0
    n = len(src)
    if len(reader) != n:
        problems.add(f"{dest}/data.jsonl: {len(reader)} rows, SRC has {n} samples")
    try:
        present = set(os.listdir(reader.hidden_states_path))
    except OSError as e:
        problems.add(f"{reader.hidden_states_path}: {e}")
        return 0
    expected = {f"hs_{i}.safetensors" for i in range(n)}
    for name in sorted(present - expected)[:MAX_SHOWN]:
        problems.add(f"{reader.hidden_states_path}/{name}: not the file of any row 0..{n - 1}")
    for i, sample in enumerate(src):
        path = reader.file_of(i)
        where = f"{path} (row {i})"
        if f"hs_{i}.safetensors" not in present:
            problems.add(f"{path}: missing (row {i} = SRC sample {sample.index})")
            continue
        T = sample.tokens
        if i < len(reader):
            row = reader.rows[i]
            check_ints(problems, f"{dest}/data.jsonl row {i}", "input_ids", row["input_ids"], sample.input_ids)
            check_ints(problems, f"{dest}/data.jsonl row {i}", "loss_mask", row["loss_mask"], sample.loss_mask)
            if row["seq_len"] != T:
                problems.add(f"{dest}/data.jsonl row {i}: seq_len {row['seq_len']}, SRC sample {sample.index} has {T}")
        try:
            dtypes = safetensors_io.dtype_names(path)
            raw = reader.raw(i)
        except (safetensors_io.FormatError, read_speculators.ReaderError, OSError) as e:
            problems.add(str(e))
            continue
        if not check_keys(problems, where, raw, ("hidden_states", "token_ids")):
            continue
        for name, want in (("hidden_states", "BF16"), ("token_ids", "I64")):
            if dtypes.get(name) != want:
                problems.add(f"{where}: {name} is {dtypes.get(name)} in the header, expected {want}")
        ok = check_tensor(problems, where, "hidden_states", raw["hidden_states"], torch.bfloat16, (T, 4, H))
        ok &= check_tensor(problems, where, "token_ids", raw["token_ids"], torch.int64, (T,))
        if not ok:
            continue
        check_ints(problems, where, "token_ids", raw["token_ids"], sample.input_ids)
        got = bits(raw["hidden_states"])
        for k in range(3):
            compare_state(problems, where, f"hidden_states[:, {k}]", got[:, k], sample.captures[:, k], sample)
        compare_state(problems, where, "hidden_states[:, 3] (pre-norm final)", got[:, 3], sample.prenorm, sample)
        if i < len(reader):
            view = reader.view(i, raw)
            if view is None:
                problems.add(f"{where}: the trainer drops it: {reader.dropped[-1][1]}")
            elif tuple(view["hidden_states"].shape) != (T, 3 * H):
                problems.add(f"{where}: the trainer's input is {list(view['hidden_states'].shape)}, not [T, 3H]")
    return n


# ---------------------------------------------------------------------------------------------

SPECFORGE_NAME = re.compile(r"rows_(\d+)-(\d+)/data_(\d+)\.ckpt(\.gz)?")


def specforge_numbering(found, ordinals, indices):
    """Which numbering the data_{i} names use: the export's row (ordinal) or the sample index."""
    keys = set(found)
    if keys == set(ordinals):
        return "ordinal"
    if keys == set(indices):
        return "index"
    return "ordinal" if len(keys & set(ordinals)) >= len(keys & set(indices)) else "index"


def check_specforge(src, dest, problems):
    src.require("post-norm")
    H = src.meta.hidden_size
    reader = read_specforge.SpecForgeReader(dest)
    found = {}
    for path in reader.files:
        rel = os.path.relpath(path, os.path.abspath(dest))
        m = SPECFORGE_NAME.fullmatch(rel)
        if not m:
            problems.add(f"{path}: the trainer reads every .ckpt under DEST; this one is not rows_G-G+2000/data_I.ckpt")
            continue
        g, g_end, i = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if g != GROUP * (i // GROUP) or g_end != g + GROUP:
            problems.add(f"{path}: data_{i} belongs in rows_{GROUP * (i // GROUP)}-{GROUP * (i // GROUP) + GROUP}")
        if i in found:
            problems.add(f"{path}: sample {i} is also in {found[i]}: the trainer would train on it twice")
            continue
        found[i] = path
    indices = [idx for idx, _, _ in src.locations]
    mode = specforge_numbering(found, range(len(src)), indices)
    for ordinal, sample in enumerate(src):
        key = ordinal if mode == "ordinal" else sample.index
        path = found.pop(key, None)
        if path is None:
            problems.add(f"{dest}: no data_{key}.ckpt (SRC sample {sample.index})")
            continue
        where = f"{path} (SRC sample {sample.index})"
        try:
            raw = read_specforge.load_feature_file(path)
        except Exception as e:  # torch.load raises many kinds; each is a broken file here
            problems.add(f"{where}: cannot be loaded: {type(e).__name__}: {e}")
            continue
        try:
            read_specforge.validate(raw, path)
        except read_specforge.ReaderError as e:
            problems.add(f"{where}: {e}")
            continue
        if not check_keys(problems, where, raw, read_specforge.KEYS):
            continue
        T = sample.tokens
        ok = check_tensor(problems, where, "input_ids", raw["input_ids"], torch.int64, (T,))
        ok &= check_tensor(problems, where, "loss_mask", raw["loss_mask"], torch.int64, (T,))
        ok &= check_tensor(problems, where, "aux_hidden_state", raw["aux_hidden_state"], torch.bfloat16, (1, T, 3 * H))
        ok &= check_tensor(problems, where, "hidden_state", raw["hidden_state"], torch.bfloat16, (1, T, H))
        if not ok:
            continue
        check_ints(problems, where, "input_ids", raw["input_ids"], sample.input_ids)
        check_ints(problems, where, "loss_mask", raw["loss_mask"], sample.loss_mask)
        aux = bits(raw["aux_hidden_state"])[0].reshape(T, 3, H)
        for k in range(3):
            compare_state(problems, where, f"aux_hidden_state[0, :, {k}H:{k + 1}H]", aux[:, k], sample.captures[:, k],
                          sample)
        compare_state(problems, where, "hidden_state (post-norm final)", bits(raw["hidden_state"])[0],
                      sample.postnorm, sample)
        read_specforge.normalize(raw, reader.max_len)
    for key, path in sorted(found.items()):
        problems.add(f"{path}: data_{key} is no SRC sample (numbering by {mode})")
    return len(src)


# ---------------------------------------------------------------------------------------------

SAFE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
MODELOPT_KEYS = ("input_ids", "hidden_states", "aux_hidden_states", "conversation_id")


def natural_name(index, sample_id):
    """The file name a sample must have when nothing forces a change: its id, else its index."""
    if sample_id is None:
        return f"{index:08d}.pt"
    # An id of 8 digits would take the name of the sample of that index without an id: renamed.
    if SAFE_ID.fullmatch(sample_id) and not re.fullmatch(r"[0-9]{8}", sample_id) and len(sample_id.encode()) <= 200:
        return sample_id + ".pt"
    return None


def plain_name(name):
    return (name.endswith(".pt") and not name.startswith(".") and "/" not in name
            and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in name) and len(name.encode()) <= 255)


def modelopt_order(layer_ids):
    """The capture slots in ModelOpt's order of aux states: ascending layer ids. Its dump scripts
    sort the ids (`resolve_aux_layers`: sorted(set(...))) and its online training hooks the
    layers in model order (`HFEagleModel.modify`), so aux_hidden_states concatenate them so."""
    return sorted(range(len(layer_ids)), key=lambda k: layer_ids[k])


def check_modelopt(src, dest, problems):
    src.require("post-norm")
    H = src.meta.hidden_size
    order = modelopt_order(src.meta.layer_ids)
    try:
        reader = read_modelopt.ModelOptReader(dest)
    except read_modelopt.ReaderError as e:
        problems.add(str(e))
        return 0
    by_cid = {}
    index_named = {f"{index:08d}.pt" for index, sample_id in src.ids() if sample_id is None}
    ids_present = {sample_id for _, sample_id in src.ids() if sample_id is not None}
    for path in reader.files:
        if os.path.dirname(os.path.abspath(path)) != os.path.abspath(dest):
            problems.add(f"{path}: not directly in DEST (the trainer reads every .pt below it)")
        if not plain_name(os.path.basename(path)):
            problems.add(f"{path}: not a plain file name")
        try:
            raw = torch.load(path, weights_only=True)
        except Exception as e:  # what weights_only refuses, or a broken file
            problems.add(f"{path}: torch.load(weights_only=True) fails: {type(e).__name__}: {e}")
            continue
        if not isinstance(raw, dict):
            problems.add(f"{path}: holds a {type(raw).__name__}, not a dict")
            continue
        cid = raw.get("conversation_id")
        if not isinstance(cid, str):
            problems.add(f"{path}: conversation_id is a {type(cid).__name__}, not a str")
            continue
        # A sample without an id is found by its file name ({index:08d}.pt, conversation_id the
        # same digits), so that an id of 8 digits elsewhere cannot be mistaken for it.
        name = os.path.basename(path)
        key = ("index", name) if name in index_named else ("id", cid)
        if key[0] == "index" and cid != name[:-3]:
            problems.add(f"{path}: conversation_id {cid!r}, expected {name[:-3]!r} (a sample without an id)")
        if key in by_cid:
            problems.add(f"{path}: conversation_id {cid!r} is also in {by_cid[key]}")
            continue
        by_cid[key] = path  # the tensors are read again per sample: one sample in memory
    # Natural names claimed by two samples (an id equal to another sample's index name) cannot
    # both be kept; only uniqueness is required of those.
    natural = {index: natural_name(index, sample_id) for index, sample_id in src.ids()}
    counts = {}
    for name in natural.values():
        counts[name] = counts.get(name, 0) + 1
    for sample in src:
        cid = sample.id if sample.id is not None else f"{sample.index:08d}"
        if sample.id is not None:
            path = by_cid.pop(("id", cid), None)
        else:
            path = by_cid.pop(("index", f"{cid}.pt"), None)
            if path is None and cid not in ids_present:  # misnamed: found by its conversation_id
                path = by_cid.pop(("id", cid), None)
        if path is None:
            problems.add(f"{dest}: no .pt with conversation_id {cid!r} (SRC sample {sample.index})")
            continue
        raw = torch.load(path, weights_only=True)
        where = f"{path} (SRC sample {sample.index})"
        want_name = natural[sample.index]
        if want_name is not None and counts[want_name] == 1 and os.path.basename(path) != want_name:
            problems.add(f"{where}: named {os.path.basename(path)!r}, expected {want_name!r}")
        if not check_keys(problems, where, raw, MODELOPT_KEYS, optional=("loss_mask",)):
            continue
        T = sample.tokens
        ok = check_tensor(problems, where, "input_ids", raw["input_ids"], torch.int64, (T,))
        ok &= check_tensor(problems, where, "hidden_states", raw["hidden_states"], torch.bfloat16, (T, H))
        ok &= check_tensor(problems, where, "aux_hidden_states", raw["aux_hidden_states"], torch.bfloat16, (T, 3 * H))
        if "loss_mask" in raw:
            ok &= check_tensor(problems, where, "loss_mask", raw["loss_mask"], torch.int64, (T,))
        if not ok:
            continue
        check_ints(problems, where, "input_ids", raw["input_ids"], sample.input_ids)
        if "loss_mask" in raw:
            check_ints(problems, where, "loss_mask", raw["loss_mask"], sample.loss_mask)
        aux = bits(raw["aux_hidden_states"]).reshape(T, 3, H)
        for k in range(3):
            compare_state(problems, where, f"aux_hidden_states[:, {k}H:{k + 1}H]", aux[:, k],
                          sample.captures[:, order[k]], sample)
        compare_state(problems, where, "hidden_states (post-norm final)", bits(raw["hidden_states"]), sample.postnorm,
                      sample)
    for (_, cid), path in sorted(by_cid.items()):
        problems.add(f"{path}: conversation_id {cid!r} is no SRC sample")
    return len(src)


# ---------------------------------------------------------------------------------------------

def first_mismatch(got, want):
    """Where two lists of target ids (draft id i -> target id) first differ."""
    i = int(np.flatnonzero(np.asarray(got) != np.asarray(want))[0])
    return f"draft id {i} is target id {int(got[i])}, want {int(want[i])}"


def source_counts(src, problems):
    """SRC's masked-token counts (a recount of its samples) and the target's vocabulary size."""
    counts = src.masked_token_counts()
    stored, vocab_size = src.stored_token_counts()
    if stored is None:
        vocab_size = src.model_vocab_size()  # shards written before eagle3_extract counted tokens
    elif stored != counts:
        differ = sorted(set(stored.items()) ^ set(counts.items()))[:3]
        problems.add(f"{src.dir}: the shards' /token_counts differ from a recount of their samples: {differ}")
    if vocab_size is None:
        raise h5source.SourceError(f"{src.dir}: /token_counts records no vocab_size")
    return counts, vocab_size


def ascending_counter(counts):
    """A Counter filled in ascending id order: its most_common breaks ties by the lower id."""
    from collections import Counter
    c = Counter()
    for token_id in sorted(counts):
        c[token_id] = counts[token_id]
    return c


def check_paired(problems, where, targets, t2d):
    """speculators and SpecForge pair the draft head (the target's lm_head rows where t2d, in
    ascending id order) with draft ids through d2t: draft id i must be the i-th marked id."""
    marked = np.flatnonzero(t2d.numpy())
    if not np.array_equal(targets.numpy(), marked):
        problems.add(f"{where}: arange(N) + d2t does not list the ids t2d marks in ascending order, as the trainer "
                     f"pairs them ({first_mismatch(targets.numpy(), marked) if len(marked) == len(targets) else ''})")


def check_draft_vocab(fmt, src, dest, n, problems):
    counts, V = source_counts(src, problems)
    if fmt == "speculators":
        want_d2t, want_t2d = read_speculators.build_vocab_mappings(counts, n, V)
        try:
            d2t, t2d, targets = read_speculators.load_vocab_mappings(dest, n, V)
        except read_speculators.ReaderError as e:
            problems.add(str(e))
            return
        for name in ("d2t", "t2d"):
            stored = np.load(os.path.join(dest, f"{name}.npy"))
            want = {"d2t": np.int64, "t2d": np.bool_}[name]
            if stored.dtype != want:
                problems.add(f"{dest}/{name}.npy: dtype {stored.dtype}, speculators writes {np.dtype(want)}")
        where = f"{dest}/d2t.npy"
        builder = "speculators' build_vocab_mappings_from_distribution"
    elif fmt == "specforge":
        want_d2t, want_t2d = read_specforge.process_token_dict_to_mappings(ascending_counter(counts), n, V)
        path = os.path.join(dest, "vocab_mapping", "vocab_mapping.pt")
        try:
            d2t, t2d, targets = read_specforge.load_vocab_mapping(path, n, V)
        except read_specforge.ReaderError as e:
            problems.add(str(e))
            return
        raw = torch.load(path, weights_only=True)
        check_tensor(problems, path, "d2t", raw["d2t"], torch.int64, (n,))
        check_tensor(problems, path, "t2d", raw["t2d"], torch.bool, (V,))
        # SpecForge's own derivation from the exported files may break ties otherwise: it must
        # cover as many masked tokens.
        own_d2t, _ = read_specforge.process_token_dict_to_mappings(read_specforge.count_effective_feature_tokens(dest),
                                                                   n, V)
        own = (torch.arange(n) + own_d2t).tolist()
        covered = lambda ids: sum(counts.get(int(i), 0) for i in ids)  # noqa: E731
        if covered(own) != covered(targets.tolist()):
            problems.add(f"{path}: covers {covered(targets.tolist())} masked tokens, SpecForge's own derivation from "
                         f"DEST's files {covered(own)}")
        where = path
        builder = "SpecForge's process_token_dict_to_mappings"
    else:
        c = ascending_counter(counts)
        try:
            want_d2t = read_modelopt.calibrate_frequent_vocab(c, n)
        except read_modelopt.ReaderError:  # too few distinct ids: the lowest uncounted follow
            ranked = [token_id for token_id, _ in c.most_common()]
            ranked += [t for t in range(n) if t not in c][:n - len(ranked)]
            want_d2t = torch.tensor(ranked, dtype=torch.int64) - torch.arange(n)
        want_t2d = None
        path = os.path.join(dest, "d2t.pth")
        try:
            loaded = read_modelopt.load_draft_vocab_cache(path, n, V)
        except read_modelopt.ReaderError as e:
            problems.add(str(e))
            return
        if loaded is None:  # the whole vocabulary: the trainer reads no file, but export writes one
            whole = torch.load(path, weights_only=True)
            loaded = whole, torch.arange(n) + whole
        d2t, targets = loaded
        t2d = None
        where = path
        builder = "ModelOpt's calibrate_frequent_vocab"
        if len(set(targets.tolist())) != n or int(targets.min()) < 0 or int(targets.max()) >= V:
            problems.add(f"{path}: arange(N) + d2t must be {n} distinct ids below {V}")
    if not np.array_equal(d2t.numpy(), want_d2t.numpy()):
        offsets = np.arange(n)
        problems.add(f"{where}: d2t differs from what {builder} makes of SRC's masked tokens for {n} tokens: "
                     f"{first_mismatch(offsets + d2t.numpy(), offsets + want_d2t.numpy())}")
    if want_t2d is not None:
        if not np.array_equal(t2d.numpy(), want_t2d.numpy()):
            problems.add(f"{where}: t2d differs from what {builder} makes of SRC's masked tokens for {n} tokens")
        check_paired(problems, where, targets, t2d)
    export_json = os.path.join(dest, "export.json")
    if os.path.exists(export_json):
        with open(export_json) as fh:
            recorded = json.load(fh).get("draft_vocab") or {}
        if recorded.get("size") != n or recorded.get("target_vocab_size") != V:
            problems.add(f"{export_json}: draft_vocab records size {recorded.get('size')} of "
                         f"{recorded.get('target_vocab_size')}, the files hold {n} of {V}")


CHECKS = {"speculators": check_speculators, "specforge": check_specforge, "modelopt": check_modelopt}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--format", required=True, choices=sorted(CHECKS))
    ap.add_argument("--draft-vocab-size", type=int, default=None)
    ap.add_argument("src")
    ap.add_argument("dest")
    args = ap.parse_args(argv[1:])
    problems = Problems()
    try:
        src = h5source.Source(args.src)
        n = CHECKS[args.format](src, args.dest, problems)
        if args.draft_vocab_size is not None:
            check_draft_vocab(args.format, src, args.dest, args.draft_vocab_size, problems)
    except h5source.SourceError as e:
        print(f"check_export: {e}", file=sys.stderr)
        return 1
    if problems:
        problems.report()
        return 1
    if n == 0:
        print(f"check_export: SRC {args.src} stores no samples", file=sys.stderr)
        return 1
    vocab = "" if args.draft_vocab_size is None else \
        f"; draft vocabulary of {args.draft_vocab_size} as the trainer builds and loads it"
    print(f"ok: {args.format}: {n} samples, each exactly once, keys/dtypes/shapes as the trainer reads them, "
          f"states bit-equal to SRC ({src.meta.dtype} -> bf16){vocab}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
