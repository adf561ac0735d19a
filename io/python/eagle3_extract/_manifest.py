"""The manifests of an output directory: parsed and checked as `eagle3_extract verify` does.

The checks mirror io/manifest.cpp (parse_manifest) and io/verify.cpp (check_manifest_structure
and the checks across manifests), so that a directory the reader opens is one verify would
not refuse for its structure.
"""

import bisect
import json
import os
import re
from dataclasses import dataclass, field
from typing import List, Optional

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "eagle3-hidden-states-manifest"
_PART_NAME = re.compile(r"^manifest\.part-(\d+)-of-(\d+)\.json$")


class DatasetError(ValueError):
    """An output directory (or one of its files) that the reader refuses; the message names the file."""


@dataclass
class Skipped:
    index: int
    line: int
    reason: str


@dataclass
class ShardRecord:
    file: str
    shard_index: int
    samples: List[int]
    num_tokens: int
    num_bytes: int
    skipped: List[Skipped] = field(default_factory=list)


@dataclass
class Manifest:
    path: str
    fingerprint: dict
    run_fingerprint: Optional[str]
    part_index: int
    part_count: int
    model_path: str
    data_fingerprint: str
    num_samples: int
    num_shards: int
    shard_starts: List[int]
    complete: bool
    shards: List[ShardRecord]
    skipped: List[Skipped]


def shard_file_name(index):
    return f"shard-{index:06d}.h5"


def manifest_name(part_index, part_count):
    if part_count == 1:
        return MANIFEST_NAME
    return f"manifest.part-{part_index:04d}-of-{part_count:04d}.json"


def is_plain_file_name(name):
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def list_manifests(directory):
    names = [n for n in os.listdir(directory) if n == MANIFEST_NAME or _PART_NAME.match(n)]
    return [os.path.join(directory, n) for n in sorted(names)]


def _field(obj, key, kind, where):
    if not isinstance(obj, dict) or key not in obj:
        raise DatasetError(f'{where}: missing "{key}"')
    value = obj[key]
    # bool is an int in Python; JSON true is not a count.
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise DatasetError(f'{where}: "{key}" has the wrong type ({type(value).__name__})')
    return value


def _int_list(obj, key, where):
    values = _field(obj, key, list, where)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise DatasetError(f'{where}: "{key}" must be a list of integers')
    return values


def _skipped_list(values, where):
    if not isinstance(values, list):
        raise DatasetError(f"{where}: a skipped list is not a list")
    return [Skipped(_field(s, "index", int, where), _field(s, "line", int, where), _field(s, "reason", str, where))
            for s in values]


def read_manifest(path):
    """Parses one manifest file, raising DatasetError naming it when it is not a manifest."""
    try:
        with open(path, "rb") as f:
            j = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"{path}: not a readable JSON manifest: {e}") from None
    if not isinstance(j, dict) or j.get("format") != MANIFEST_FORMAT:
        raise DatasetError(f"{path}: not an eagle3_extract manifest (format is not {MANIFEST_FORMAT!r})")
    if j.get("format_version", 1) != 1:
        raise DatasetError(f"{path}: manifest format_version {j.get('format_version')!r}, this reader knows 1")
    fp = _field(j, "fingerprint", dict, path)
    for key, kind in (("model_fingerprint", str), ("final", str), ("dtype", str), ("max_seq_len", int),
                      ("on_long", str), ("samples_per_shard", int), ("tool_version", str)):
        _field(fp, key, kind, path)
    _int_list(fp, "layer_ids", path)
    part_index = _field(j, "part_index", int, path) if "part_index" in j else 0
    part_count = _field(j, "part_count", int, path) if "part_count" in j else 1
    if not (part_count >= 1 and 0 <= part_index < part_count):
        raise DatasetError(f"{path}: bad part {part_index}/{part_count}")
    if os.path.basename(path) != manifest_name(part_index, part_count):
        raise DatasetError(f"{path}: says it is part {part_index}/{part_count}, "
                           f"whose manifest is {manifest_name(part_index, part_count)}")
    shards = []
    for s in _field(j, "shards", list, path):
        name = _field(s, "file", str, path)
        if not is_plain_file_name(name):
            raise DatasetError(f'{path}: shard entry {len(shards)} has "file": {name!r}, which is not a file name '
                               "in the output directory (no '/' or '..')")
        shards.append(ShardRecord(name, _field(s, "shard_index", int, path), _int_list(s, "samples", path),
                                  _field(s, "num_tokens", int, path), _field(s, "bytes", int, path),
                                  _skipped_list(s.get("skipped", []), path)))
    return Manifest(
        path=path, fingerprint=fp,
        run_fingerprint=j.get("run_fingerprint") if isinstance(j.get("run_fingerprint"), str) else None,
        part_index=part_index, part_count=part_count,
        model_path=_field(j, "model_path", str, path),
        data_fingerprint=_field(j, "data_fingerprint", str, path),
        num_samples=_field(j, "num_samples", int, path),
        num_shards=_field(j, "num_shards", int, path),
        shard_starts=_int_list(j, "shard_starts", path) if "shard_starts" in j else [],
        complete=_field(j, "complete", bool, path),
        shards=shards,
        skipped=_skipped_list(_field(j, "skipped", list, path), path))


class _Bounds:
    """Which samples each shard of the plan holds: from shard_starts, or (older manifests)
    samples_per_shard in order."""

    def __init__(self, m, fail):
        n = m.num_samples
        self.n = n
        if m.shard_starts:
            s = m.shard_starts
            if s[0] != 0:
                fail(f"shard_starts begins at sample {s[0]}, not 0")
            for i in range(1, len(s)):
                if s[i] <= s[i - 1] or s[i] >= n:
                    fail(f"shard_starts[{i}] is {s[i]}: the starts must rise and stay below {n} samples")
            self.starts = list(s)
        else:
            per = m.fingerprint["samples_per_shard"]
            if per <= 0:
                fail(f"samples_per_shard is {per} and there is no shard_starts")
            self.starts = list(range(0, n, per))

    def count(self):
        return len(self.starts)

    def range(self, i):
        return self.starts[i], self.starts[i + 1] if i + 1 < len(self.starts) else self.n

    def shard_of(self, sample):
        return bisect.bisect_right(self.starts, sample) - 1


def check_structure(m):
    """What one manifest says about itself (verify's check_manifest_structure)."""

    def fail(problem):
        raise DatasetError(f"{m.path}: {problem}")

    n = m.num_samples
    if n <= 0:
        fail(f"num_samples is {n}")
    stored, skipped, files, indices = {}, {}, set(), set()

    def note_skipped(sk, where):
        if not 0 <= sk.index < n:
            fail(f"skipped sample {sk.index} is outside the input ({n} samples)")
        if sk.index in skipped:
            fail(f"sample {sk.index:08d} is listed as skipped twice: in {skipped[sk.index]} and {where}")
        skipped[sk.index] = where

    for sk in m.skipped:
        note_skipped(sk, "the top-level skipped list")
    for s in m.shards:
        if s.shard_index % m.part_count != m.part_index:
            fail(f"lists {s.file}, which belongs to another part")
        if s.file in files:
            fail(f"lists {s.file} twice")
        if s.shard_index in indices:
            fail(f"lists shard_index {s.shard_index} twice")
        files.add(s.file)
        indices.add(s.shard_index)
        for idx in s.samples:
            if not 0 <= idx < n:
                fail(f"{s.file} holds sample {idx}, but the input has {n} samples")
            if idx in stored:
                fail(f"sample {idx:08d} appears twice: in {stored[idx]} and {s.file}")
            stored[idx] = s.file
        for sk in s.skipped:
            note_skipped(sk, s.file)
    for idx, where in skipped.items():
        if idx in stored:
            fail(f"sample {idx:08d} is listed as skipped ({where}) but is stored in {stored[idx]}")

    bounds = _Bounds(m, fail)
    count = bounds.count()
    for s in m.shards:
        if not 0 <= s.shard_index < count:
            fail(f"{s.file} has shard_index {s.shard_index}, but the plan of {n} samples has shards 0 to {count - 1}")
        if s.file != shard_file_name(s.shard_index):
            fail(f"{s.file} has shard_index {s.shard_index}, which is the index of {shard_file_name(s.shard_index)}")
        first, end = bounds.range(s.shard_index)
        for idx in list(s.samples) + [sk.index for sk in s.skipped]:
            if not first <= idx < end:
                fail(f"{s.file} (samples {first} to {end - 1}) lists sample {idx:08d}, which belongs in "
                     f"{shard_file_name(bounds.shard_of(idx))}")
    for sk in m.skipped:
        if bounds.shard_of(sk.index) % m.part_count != m.part_index:
            fail(f"skipped sample {sk.index:08d} belongs to {shard_file_name(bounds.shard_of(sk.index))}, "
                 "another part's shard")
    part_shards = len(range(m.part_index, count, m.part_count))
    if m.num_shards != part_shards:
        fail(f"num_shards is {m.num_shards}, but the plan of {n} samples makes {part_shards} shards for part "
             f"{m.part_index}/{m.part_count}")
    if m.complete:
        for i in range(m.part_index, count, m.part_count):
            first, end = bounds.range(i)
            for idx in range(first, end):
                if idx not in stored and idx not in skipped:
                    fail(f"says complete, but sample {idx:08d} is neither stored nor listed as skipped")


_FINGERPRINT_NAMES = (("model_fingerprint", "model"), ("layer_ids", "layers"), ("final", "final"),
                      ("dtype", "dtype"), ("max_seq_len", "max-seq-len"), ("on_long", "on-long"),
                      ("samples_per_shard", "samples-per-shard"), ("shard_size", "shard-size"),
                      ("plan_groups", "plan groups"), ("tool_version", "tool version"))


def read_manifests(directory):
    """Every manifest of DIR, each checked, and checked against each other."""
    if not os.path.isdir(directory):
        raise DatasetError(f"{directory} is not a directory")
    paths = list_manifests(directory)
    if not paths:
        if any(n.startswith("shard-") for n in os.listdir(directory)):
            raise DatasetError(f"{directory}: no {MANIFEST_NAME} beside its shard files (the run did not finish "
                               "its first commit)")
        raise DatasetError(f"{directory} is not an eagle3_extract output directory: no {MANIFEST_NAME} and no "
                           "shard-*.h5 files (give the --out directory of a run)")
    manifests = [read_manifest(p) for p in paths]
    first = manifests[0]
    for m in manifests:
        a, b = os.path.basename(first.path), os.path.basename(m.path)
        if m.part_count != first.part_count:
            raise DatasetError(f"{directory}: {a} and {b} cut the dataset into different numbers of parts")
        diffs = [f"{label}: {first.fingerprint.get(key)} vs {m.fingerprint.get(key)}"
                 for key, label in _FINGERPRINT_NAMES if first.fingerprint.get(key) != m.fingerprint.get(key)]
        if diffs:
            raise DatasetError(f"{directory}: {a} and {b} come from runs with other settings: {'; '.join(diffs)}")
        if m.data_fingerprint != first.data_fingerprint or m.num_samples != first.num_samples:
            raise DatasetError(f"{directory}: {a} and {b} were made from different input data")
        check_structure(m)
    seen_files, stored, skipped = {}, {}, {}
    for m in manifests:
        name = os.path.basename(m.path)
        for sk in m.skipped:
            if sk.index in skipped:
                raise DatasetError(f"{directory}: sample {sk.index:08d} is listed as skipped twice: in "
                                   f"{skipped[sk.index]} and {name}")
            skipped[sk.index] = name
        for s in m.shards:
            if s.file in seen_files:
                raise DatasetError(f"{os.path.join(directory, s.file)}: listed by two manifests")
            seen_files[s.file] = name
            for idx in s.samples:
                if idx in stored:
                    raise DatasetError(f"{directory}: sample {idx:08d} appears twice: in {stored[idx]} and {s.file}")
                stored[idx] = s.file
            for sk in s.skipped:
                if sk.index in skipped:
                    raise DatasetError(f"{directory}: sample {sk.index:08d} is listed as skipped twice: in "
                                       f"{skipped[sk.index]} and {s.file}")
                skipped[sk.index] = s.file
    for idx, where in skipped.items():
        if idx in stored:
            raise DatasetError(f"{directory}: sample {idx:08d} is listed as skipped ({where}) but is stored in "
                               f"{stored[idx]}")
    return manifests
