#!/usr/bin/python3
"""TEST HELPER: make a `--final both` output directory from two runs that differ only in --final.

Until extraction writes `--final both` itself (issue 13, on main), the tests build one from a
`--final pre-norm` run and a `--final post-norm` run of the same input: a copy of the pre-norm
run whose samples get the post-norm `last_hidden_state` and keep the pre-norm one as
`last_hidden_state_prenorm` (with its `_scale` under fp8), and whose files get the issue-13
attributes (final = "both", hidden_states_hf_index, last_hidden_state_norm, slots).

Usage: synth_final_both.py PRE_DIR POST_DIR OUT_DIR
"""

import json
import os
import shutil
import sys

import h5py
import numpy as np

import h5source


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    pre_dir, post_dir, out = argv[1:]
    shutil.copytree(pre_dir, out)
    for path in h5source.shard_paths(out):
        name = os.path.basename(path)
        with h5py.File(path, "r+") as f, h5py.File(os.path.join(post_dir, name), "r") as post:
            if h5source.text(f.attrs["final"]) != "pre-norm" or h5source.text(post.attrs["final"]) != "post-norm":
                raise SystemExit(f"synth_final_both: {name}: need a pre-norm and a post-norm run")
            layers = [int(x) for x in f.attrs["layer_ids"]]
            L = int(f.attrs["num_hidden_layers"])
            for key, group in f["samples"].items():
                for suffix in ("", "_scale"):
                    if "last_hidden_state" + suffix in group:
                        group.move("last_hidden_state" + suffix, "last_hidden_state_prenorm" + suffix)
                        post.copy(post["samples"][key]["last_hidden_state" + suffix], group, "last_hidden_state" + suffix)
            f.attrs["final"] = np.bytes_("both")
            f.attrs["hidden_states_hf_index"] = np.array(layers, dtype=np.int32)
            f.attrs["last_hidden_state_norm"] = np.bytes_("post-norm")
            slots = [f"hidden_states[:, {k}] = output_hidden_states[{i}] (output of decoder layer {i - 1})"
                     if i > 0 else f"hidden_states[:, {k}] = output_hidden_states[0] (the embedding output)"
                     for k, i in enumerate(layers)]
            slots.append(f"last_hidden_state = output_hidden_states[{L}] (after the final norm)")
            slots.append(f"last_hidden_state_prenorm = output of decoder layer {L - 1} before the final norm "
                         f"(vLLM id {L})")
            f.attrs["slots"] = np.array([np.bytes_(s) for s in slots])
    for manifest in os.listdir(out):
        if manifest.startswith("manifest") and manifest.endswith(".json"):
            p = os.path.join(out, manifest)
            with open(p) as fh:
                doc = json.load(fh)
            if "fingerprint" in doc:
                doc["fingerprint"]["final"] = "both"
            with open(p, "w") as fh:
                json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
