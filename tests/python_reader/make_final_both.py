"""Test stand-in for `--final both` output (issue 13 schema), made from a --final post-norm run.

    make_final_both.py DIR

Rewrites DIR in place the way the issue 13 writer lays out a `--final both` run: each sample gets
`last_hidden_state_prenorm` (here a copy of its last capture, stored bits unchanged, with its
`_scale` for fp8), each shard the attributes final = "both", hidden_states_hf_index,
last_hidden_state_norm and slots; the manifests say final "both" and the new file sizes.
Until this branch's extraction writes that schema, this is how the reader's handling of it is
tested; the reader must give the same answers on the real files.
"""

import glob
import json
import os
import sys

import h5py
import numpy as np


def copy_raw(group, src_name, dst_name, column):
    src = group[src_name]
    tid = src.id.get_type()
    bits = np.empty(src.shape, {1: np.uint8, 2: np.uint16, 4: np.uint32}[tid.get_size()])
    src.id.read(h5py.h5s.ALL, h5py.h5s.ALL, bits, mtype=tid)
    part = np.ascontiguousarray(bits[:, column] if column is not None else bits)
    dst = h5py.h5d.create(group.id, dst_name.encode(), tid, h5py.h5s.create_simple(part.shape))
    dst.write(h5py.h5s.ALL, h5py.h5s.ALL, part, mtype=tid)
    for key, value in src.attrs.items():
        group[dst_name].attrs[key] = value


def main(directory):
    for path in sorted(glob.glob(os.path.join(directory, "shard-*.h5"))):
        with h5py.File(path, "r+") as f:
            assert f.attrs["final"] == b"post-norm", path
            layer_ids = [int(v) for v in f.attrs["layer_ids"]]
            L = int(f.attrs["num_hidden_layers"])
            fp8 = f.attrs["dtype"] == b"fp8"
            for g in f["samples"].values():
                copy_raw(g, "hidden_states", "last_hidden_state_prenorm", len(layer_ids) - 1)
                if fp8:
                    copy_raw(g, "hidden_states_scale", "last_hidden_state_prenorm_scale", len(layer_ids) - 1)
            f.attrs["final"] = np.bytes_("both")
            f.attrs["hidden_states_hf_index"] = np.array(layer_ids, np.int32)
            f.attrs["last_hidden_state_norm"] = np.bytes_("post-norm")
            slots = [f"hidden_states[:, {k}] = output_hidden_states[{i}] (output of decoder layer {i - 1})"
                     for k, i in enumerate(layer_ids)]
            slots += [f"last_hidden_state = output_hidden_states[{L}] (after the final norm)",
                      f"last_hidden_state_prenorm = output of decoder layer {L - 1} before the final norm "
                      f"(vLLM id {L})"]
            f.attrs["slots"] = np.array(slots, dtype=h5py.string_dtype())
    for path in glob.glob(os.path.join(directory, "manifest*.json")):
        m = json.load(open(path))
        m["fingerprint"]["final"] = "both"
        for shard in m["shards"]:
            shard["bytes"] = os.path.getsize(os.path.join(directory, shard["file"]))
            shard.pop("checksum", None)
        json.dump(m, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
