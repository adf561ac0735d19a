#!/usr/bin/env python3
"""Sums ncu's per-instruction warp stall samples (ncu_stalls' SASS csv, tests/gpu/lib.sh) by reason, then lists
the instructions with the most samples, each with its share of all samples.

usage: ncu_stall_summary.py NCU_SASS_CSV [TOP (30)]"""
import csv
import sys


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    header_at = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if header_at is None:
        sys.exit(f"ncu_stall_summary.py: no SASS table (a row starting with Address) in {sys.argv[1]}: did ncu run?")
    header = rows[header_at]
    data = [r for r in rows[header_at + 1:] if len(r) == len(header)]
    samples = header.index("Warp Stall Sampling (All Samples)")
    total = sum(int(r[samples]) for r in data)
    print(f"{total} samples over {len(data)} instructions")
    for i, name in enumerate(header):
        if not name.startswith("stall_") or name.endswith("(Not Issued)"):
            continue
        count = sum(int(r[i]) for r in data if r[i] not in ("", "-"))
        if count:
            print(f"  {name:24s} {count:9d} {100 * count / total:5.1f}%")
    print("busiest instructions (samples, share, address, SASS):")
    for r in sorted(data, key=lambda r: -int(r[samples]))[:top]:
        print(f"  {int(r[samples]):8d} {100 * int(r[samples]) / total:5.1f}% {r[0]} {r[1].strip()}")


if __name__ == "__main__":
    main()
