"""open_dataset refuses manifests that verify refuses: each case edits a copy of a good run's
manifest(s) and expects a DatasetError naming the file and saying what is wrong.

    check_refusals.py SINGLE_RUN_DIR TWO_PART_RUN_DIR WORK_DIR
"""

import json
import os
import shutil
import sys

import eagle3_extract as e3


def first_shard(m):
    return m["shards"][0]


CASES_SINGLE = [
    ("format", lambda m: m.update(format="something-else"), "not an eagle3_extract manifest"),
    ("missing field", lambda m: m.pop("num_samples"), 'missing "num_samples"'),
    ("wrong type", lambda m: m.update(complete="yes"), '"complete" has the wrong type'),
    ("bad part", lambda m: m.update(part_index=3, part_count=2), "bad part 3/2"),
    ("named as another part", lambda m: m.update(part_index=1, part_count=2),
     "says it is part 1/2, whose manifest is manifest.part-0001-of-0002.json"),
    ("num_samples", lambda m: m.update(num_samples=0), "num_samples is 0"),
    ("sample outside the input", lambda m: first_shard(m)["samples"].append(99),
     "holds sample 99, but the input has 8 samples"),
    ("listed twice", lambda m: m["shards"].append(dict(first_shard(m))), "lists shard-000000.h5 twice"),
    ("wrong name", lambda m: first_shard(m).update(file="shard-000007.h5"),
     "shard-000007.h5 has shard_index 0, which is the index of shard-000000.h5"),
    ("sample in another shard's range", lambda m: m["shards"][1]["samples"].append(
        m["shards"][0]["samples"].pop()), "which belongs in shard-000000.h5"),
    ("skipped twice", lambda m: m["skipped"].append(dict(m["skipped"][0])), "is listed as skipped twice"),
    ("skipped and stored", lambda m: m["skipped"].append({"index": 0, "line": 1, "reason": "x"}),
     "sample 00000000 is listed as skipped (the top-level skipped list) but is stored in shard-000000.h5"),
    ("starts", lambda m: m.update(shard_starts=[0, 5, 4]), "shard_starts[2] is 4: the starts must rise"),
    ("num_shards", lambda m: m.update(num_shards=5), "num_shards is 5, but the plan of 8 samples makes 3 shards"),
    ("complete with a gap", lambda m: first_shard(m)["samples"].pop(),
     "says complete, but sample 00000002 is neither stored nor listed as skipped"),
    ("format_version", lambda m: m.update(format_version=2), "manifest format_version 2, this reader knows 1"),
]

CASES_PARTS = [
    ("settings", lambda m: m["fingerprint"].update(dtype="fp32"), "come from runs with other settings: dtype: bf16 vs fp32"),
    ("data", lambda m: m.update(data_fingerprint="0"), "were made from different input data"),
    ("part count", lambda m: m.update(part_count=3, num_shards=1), "manifest.part-0001-of-0003.json"),
]


def expect_refused(directory, pattern, what):
    try:
        e3.open_dataset(directory)
    except e3.DatasetError as e:
        if pattern not in str(e):
            sys.exit(f"FAIL: {what}: refused, but the message lacks {pattern!r}: {e}")
        print(f"refused ({what}): {e}")
        return
    sys.exit(f"FAIL: {what}: not refused")


def run(source, manifest_name, cases, work):
    for what, change, pattern in cases:
        d = os.path.join(work, what.replace(" ", "_"))
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(source, d)
        path = os.path.join(d, manifest_name)
        m = json.load(open(path))
        change(m)
        json.dump(m, open(path, "w"))
        expect_refused(d, pattern, what)


def main():
    single, parts, work = sys.argv[1:4]
    e3.open_dataset(single)  # the sources themselves are fine
    e3.open_dataset(parts)
    run(single, "manifest.json", CASES_SINGLE, work)
    run(parts, "manifest.part-0001-of-0002.json", CASES_PARTS, work)
    # A shard file no manifest lists, in a complete run (verify: stray).
    d = os.path.join(work, "unlisted")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(single, d)
    shutil.copy(os.path.join(d, "shard-000000.h5"), os.path.join(d, "shard-000009.h5"))
    expect_refused(d, "shard-000009.h5: a shard file that no manifest lists, in a complete run", "unlisted shard")
    # A shard name that is a directory, not a file.
    d = os.path.join(work, "directory_shard")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(single, d)
    os.remove(os.path.join(d, "shard-000001.h5"))
    os.mkdir(os.path.join(d, "shard-000001.h5"))
    expect_refused(d, "shard-000001.h5: not a regular file", "directory under a shard's name")


if __name__ == "__main__":
    main()
