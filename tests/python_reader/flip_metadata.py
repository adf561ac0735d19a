"""open_dataset on shards with one flipped metadata bit: never a crash, never a wrong answer.

    flip_metadata.py RUN_DIR WORK_DIR [FLIPS]

Flips one bit at a time (a fixed seed) of the first shard's metadata: every byte that is not a
dataset's stored values. Each open runs in a forked child, so that a segfault in HDF5 is seen as
the child's death. Each flip must either be refused with a DatasetError naming the shard file,
or read back exactly what the undamaged directory holds.
"""

import os
import random
import shutil
import signal
import sys

import h5py
import numpy as np

import eagle3_extract as e3

SEED = 20
CHILD_TIMEOUT_S = 60


def read_all(directory):
    ds = e3.open_dataset(directory)
    samples = [{k: v.copy() if isinstance(v, np.ndarray) else v for k, v in s.items()} for s in ds]
    return samples, ds.token_counts(), ds.meta.layer_ids


def same(a, b):
    (sa, ca, la), (sb, cb, lb) = a, b
    if ca != cb or la != lb or len(sa) != len(sb):
        return False
    for x, y in zip(sa, sb):
        if x.keys() != y.keys():
            return False
        for k in x:
            if isinstance(x[k], np.ndarray):
                if not np.array_equal(x[k], y[k], equal_nan=True):
                    return False
            elif x[k] != y[k]:
                return False
    return True


def data_regions(path):
    """[start, end) of every dataset's stored values in the file."""
    regions = []

    def visit(_name, obj):
        if isinstance(obj, h5py.Dataset):
            offset = obj.id.get_offset()
            if offset is not None:
                regions.append((offset, offset + obj.id.get_storage_size()))

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return sorted(regions)


def metadata_bytes(path):
    size = os.path.getsize(path)
    inside = np.zeros(size, bool)
    for start, end in data_regions(path):
        inside[start:end] = True
    return np.flatnonzero(~inside).tolist()


def in_child(directory, want):
    """What opening and reading DIRECTORY gives, as one line; runs in a forked child."""
    try:
        got = read_all(directory)
    except e3.DatasetError as e:
        return f"refused {e}"
    except BaseException as e:  # noqa: B036 - anything else is the failure this test looks for
        return f"raised {type(e).__name__}: {e}"
    return "read same" if same(got, want) else "read different"


def run_forked(directory, want):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        signal.alarm(CHILD_TIMEOUT_S)
        try:
            text = in_child(directory, want)
        except BaseException as e:  # noqa: B036
            text = f"raised {type(e).__name__}: {e}"
        os.write(w, text.encode("utf-8", "replace"))
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"crashed: signal {os.WTERMSIG(status)}"
    return b"".join(chunks).decode("utf-8", "replace") or f"exited {os.WEXITSTATUS(status)} saying nothing"


def main():
    source, work = sys.argv[1], sys.argv[2]
    flips = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    want = read_all(source)
    directory = os.path.join(work, "flipped")
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(source, directory)
    shard = os.path.join(directory, "shard-000000.h5")
    original = bytearray(open(shard, "rb").read())
    offsets = metadata_bytes(shard)
    rng = random.Random(SEED)
    picks = [(rng.choice(offsets), rng.randrange(8)) for _ in range(flips)]
    tally, failures = {}, []
    for offset, bit in picks:
        damaged = bytearray(original)
        damaged[offset] ^= 1 << bit
        with open(shard, "wb") as f:
            f.write(damaged)
        outcome = run_forked(directory, want)
        kind = outcome.split(" ", 1)[0]
        tally[kind] = tally.get(kind, 0) + 1
        if kind == "refused" and shard not in outcome:
            failures.append(f"byte {offset} bit {bit}: refused without naming {shard}: {outcome}")
        elif kind not in ("refused", "read") or outcome == "read different":
            failures.append(f"byte {offset} bit {bit}: {outcome}")
    with open(shard, "wb") as f:
        f.write(original)
    print(f"{flips} flips of {len(offsets)} metadata bytes of {len(original)}: "
          + ", ".join(f"{k} {n}" for k, n in sorted(tally.items())))
    for line in failures[:20]:
        print("FAIL:", line)
    if failures:
        sys.exit(f"{len(failures)} of {flips} flips crashed, raised something other than DatasetError, or read "
                 "other values than the undamaged shard")


if __name__ == "__main__":
    main()
