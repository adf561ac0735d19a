#!/usr/bin/python3
"""TEST ORACLE: a small reference exporter, used only to test check_export.py and the readers.

Not the product's export (that is `eagle3_extract export`, C++). It writes the layouts the
lead specified, from an eagle3_extract output directory, and can break them on purpose
(--break) so that the tests can show check_export.py refuses each kind of broken export.

Usage: oracle_export.py --format speculators|specforge|modelopt [--draft-vocab-size N] SRC DEST [--break KIND]
KIND: wrong-key, wrong-norm, missing-sample, extra-sample, wrong-dtype, swap-slots,
      truncate (round toward zero to bf16), cut-file (the first file loses its last 2 bytes),
      token-mismatch (speculators), bad-name (modelopt),
      no-loss-mask (modelopt: a valid export without the optional loss_mask);
      with --draft-vocab-size: vocab-ties (ties go to the higher id), vocab-order (speculators and
      SpecForge: d2t in frequency order; ModelOpt: ascending), vocab-dtype (d2t int32),
      vocab-size (t2d one short; ModelOpt: d2t one short), vocab-rare (the least frequent ids)
With --draft-vocab-size N it also writes the format's draft-vocabulary file(s): the N ids most
often masked in SRC (ties: the lower id; too few: the lowest ids not masked).
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import sys

import numpy as np
import torch

import h5source
import safetensors_io

BREAKS = ("wrong-key", "wrong-norm", "missing-sample", "extra-sample", "wrong-dtype", "swap-slots", "truncate",
          "cut-file", "token-mismatch", "bad-name", "no-loss-mask", "vocab-ties", "vocab-order", "vocab-dtype",
          "vocab-size", "vocab-rare")


def bf16(bits_u16):
    return torch.from_numpy(np.ascontiguousarray(bits_u16).view(np.int16)).view(torch.bfloat16)


def final_bits(sample, norm, broken):
    """The final state a format wants (norm 'pre'|'post'), or the other one when breaking it."""
    if broken == "wrong-norm":
        norm = "post" if norm == "pre" else "pre"
    state = sample.prenorm if norm == "pre" else sample.postnorm
    if state is None:
        raise SystemExit(f"oracle_export: SRC has no {norm}-norm final state")
    return state


def captures(sample, broken):
    c = sample.captures
    return c[:, ::-1] if broken == "swap-slots" else c


def truncated(src_dir):
    """Re-read every sample rounding toward zero, to show the checker wants ties-to-even RNE."""
    original = h5source.f32_to_bf16_bits
    h5source.f32_to_bf16_bits = lambda x: (np.ascontiguousarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    try:
        return list(h5source.Source(src_dir))
    finally:
        h5source.f32_to_bf16_bits = original


def samples(src, args):
    items = truncated(args.src) if args.broken == "truncate" else src
    out = list(items)
    if args.broken == "missing-sample":
        out.pop(len(out) // 2)
    return out


def export_speculators(src, args):
    hs_dir = os.path.join(args.dest, "hidden_states")
    os.makedirs(hs_dir)
    all_samples = samples(src, args)
    with open(os.path.join(args.dest, "data.jsonl"), "w") as rows:
        for i, s in enumerate(all_samples):
            states = np.concatenate([captures(s, args.broken), final_bits(s, "pre", args.broken)[:, None, :]], axis=1)
            hs = bf16(states)
            ids = torch.from_numpy(s.input_ids.copy())
            if args.broken == "wrong-dtype":
                ids = ids.to(torch.int32)
            if args.broken == "token-mismatch" and i == 0:
                ids = ids.clone()
                ids[0] += 1
            key = "hidden_state" if args.broken == "wrong-key" else "hidden_states"
            safetensors_io.save({key: hs, "token_ids": ids}, os.path.join(hs_dir, f"hs_{i}.safetensors"))
            rows.write(json.dumps({"input_ids": s.input_ids.tolist(), "loss_mask": s.loss_mask.tolist(),
                                   "seq_len": s.tokens}) + "\n")
    if args.broken == "extra-sample":
        shutil.copy(os.path.join(hs_dir, "hs_0.safetensors"), os.path.join(hs_dir, f"hs_{len(all_samples)}.safetensors"))


def specforge_path(dest, i):
    g = 2000 * (i // 2000)
    return os.path.join(dest, f"rows_{g}-{g + 2000}", f"data_{i}.ckpt")


def export_specforge(src, args):
    all_samples = samples(src, args)
    for i, s in enumerate(all_samples):
        T = s.tokens
        aux = bf16(captures(s, args.broken).reshape(T, -1)).unsqueeze(0)
        final = bf16(final_bits(s, "post", args.broken)).unsqueeze(0)
        if args.broken == "wrong-dtype":
            aux = aux.float()
        record = {"input_ids": torch.from_numpy(s.input_ids.copy()), "loss_mask": torch.from_numpy(s.loss_mask.copy()),
                  "aux_hidden_states" if args.broken == "wrong-key" else "aux_hidden_state": aux,
                  "hidden_state": final}
        path = specforge_path(args.dest, i)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(record, path)
    if args.broken == "extra-sample":
        shutil.copy(specforge_path(args.dest, 0), specforge_path(args.dest, 0) + ".copy.ckpt")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def modelopt_name(sample):
    """An id kept when it is already a plain name; otherwise made one, with a hash against collisions."""
    if sample.id is None:
        return f"{sample.index:08d}"
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", sample.id) and ".." not in sample.id:
        return sample.id
    digest = hashlib.sha256(sample.id.encode()).hexdigest()[:12]
    return "id_" + _UNSAFE.sub("_", sample.id).replace("..", "__")[:64] + "_" + digest


def export_modelopt(src, args):
    os.makedirs(args.dest)
    order = sorted(range(len(src.meta.layer_ids)), key=lambda k: src.meta.layer_ids[k])  # ModelOpt sorts its ids
    for s in samples(src, args):
        T = s.tokens
        record = {"input_ids": torch.from_numpy(s.input_ids.copy()),
                  "hidden_states": bf16(final_bits(s, "post", args.broken)),
                  "aux_hidden_states": bf16(captures(s, args.broken)[:, order].reshape(T, -1)),
                  "conversation_id": s.id if s.id is not None else f"{s.index:08d}"}
        if args.broken != "no-loss-mask":
            record["loss_mask"] = torch.from_numpy(s.loss_mask.copy())
        if args.broken == "wrong-key":
            record["hidden_state"] = record.pop("hidden_states")
        if args.broken == "wrong-dtype":
            record["input_ids"] = record["input_ids"].to(torch.int32)
        name = modelopt_name(s)
        if args.broken == "bad-name" and s.id is None:
            name = str(s.index)
        torch.save(record, os.path.join(args.dest, name + ".pt"))
    if args.broken == "extra-sample":
        first = sorted(os.listdir(args.dest))[0]
        record = torch.load(os.path.join(args.dest, first))
        record["conversation_id"] = "not-a-sample"
        torch.save(record, os.path.join(args.dest, "not-a-sample.pt"))


EXPORTS = {"speculators": export_speculators, "specforge": export_specforge, "modelopt": export_modelopt}


def export_draft_vocab(src, args):
    counts = src.masked_token_counts()
    stored, V = src.stored_token_counts()
    if V is None:
        V = src.model_vocab_size()
    n, broken = args.draft_vocab_size, args.broken
    sign = 1 if broken == "vocab-ties" else -1
    by_frequency = sorted(counts, key=lambda t: (-counts[t], sign * -t))[:n]
    if broken == "vocab-rare":
        by_frequency = sorted(counts, key=lambda t: (counts[t], t))[:n]
    by_frequency += [t for t in range(n) if t not in counts][:n - len(by_frequency)]
    ascending = sorted(by_frequency)
    if args.format == "modelopt":
        ids = ascending if broken == "vocab-order" else by_frequency
    else:
        ids = by_frequency if broken == "vocab-order" else ascending
    d2t = np.asarray(ids, np.int64) - np.arange(n, dtype=np.int64)
    if broken == "vocab-dtype":
        d2t = d2t.astype(np.int32)
    t2d = np.zeros(V - 1 if broken == "vocab-size" else V, np.bool_)
    t2d[[t for t in ascending if t < len(t2d)]] = True
    if args.format == "speculators":
        np.save(os.path.join(args.dest, "d2t.npy"), d2t)
        np.save(os.path.join(args.dest, "t2d.npy"), t2d)
    elif args.format == "specforge":
        os.makedirs(os.path.join(args.dest, "vocab_mapping"))
        torch.save({"d2t": torch.from_numpy(d2t), "t2d": torch.from_numpy(t2d)},
                   os.path.join(args.dest, "vocab_mapping", "vocab_mapping.pt"))
    else:
        torch.save(torch.from_numpy(d2t[:-1] if broken == "vocab-size" else d2t), os.path.join(args.dest, "d2t.pth"))


def main(argv):
    ap = argparse.ArgumentParser(description="TEST ORACLE exporter (see the module docstring)")
    ap.add_argument("--format", required=True, choices=sorted(EXPORTS))
    ap.add_argument("--break", dest="broken", choices=BREAKS)
    ap.add_argument("--draft-vocab-size", type=int, default=None)
    ap.add_argument("src")
    ap.add_argument("dest")
    args = ap.parse_args(argv[1:])
    if os.path.exists(args.dest):
        raise SystemExit(f"oracle_export: {args.dest} exists")
    src = h5source.Source(args.src)
    EXPORTS[args.format](src, args)
    if args.draft_vocab_size is not None:
        export_draft_vocab(src, args)
    if args.broken == "cut-file":
        first = sorted(os.path.join(root, n) for root, _, names in os.walk(args.dest) for n in names
                       if n.endswith((".safetensors", ".ckpt", ".pt")))[0]
        os.truncate(first, os.path.getsize(first) - 2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
