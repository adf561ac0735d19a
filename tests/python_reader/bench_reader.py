"""How fast the Python reader decodes (not a test: nothing here asserts a speed).

    PYTHONPATH=io/python /usr/bin/python3 tests/python_reader/bench_reader.py [--mb 256] [DIR ...]

First the decoders alone on --mb MB of float32 output made from random stored bits (bf16,
fp16, fp8 with H = 7168 row scales), against the plain numpy forms they replace; then, for
each DIR (an eagle3_extract output directory), one pass of `for s in open_dataset(DIR)` over
every sample, counted as the float32 bytes of the states it returns. Each number is the best
of --repeat runs, from memory / the page cache (run a DIR twice to have it cached).
"""

import argparse
import time

import numpy as np

import eagle3_extract as e3


def best_rate(fn, out_bytes, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return out_bytes / best / 1e9


def decoders(mb, repeat):
    n = mb * (1 << 20) // 4
    H = 7168
    n -= n % H
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    bf16 = bits & 0xBFFF  # finite bf16 of moderate size
    fp16 = bits & 0xBBFF  # finite fp16
    codes = (bits & 0xFE).astype(np.uint8)  # no NaN code
    scale = rng.random(n // H, dtype=np.float32)
    out = np.empty(n, np.float32)
    rows = [
        ("bf16 -> float32 (eagle3_extract)", lambda: e3.bf16_bits_to_float32(bf16, out)),
        ("bf16 -> float32 (astype, shift)", lambda: (bf16.astype(np.uint32) << 16).view(np.float32)),
        ("fp16 -> float32 (eagle3_extract)", lambda: e3.fp16_bits_to_float32(fp16, out)),
        ("fp16 -> float32 (numpy astype)", lambda: fp16.view(np.float16).astype(np.float32)),
        ("fp8 -> float32 (eagle3_extract)", lambda: e3.fp8_bits_to_float32(codes.reshape(-1, H), scale,
                                                                          out.reshape(-1, H))),
        ("fp8 -> float32 (table[codes] * scale)", lambda: e3.E4M3FN[codes.reshape(-1, H)] * scale[:, None]),
        ("float32 -> bf16 bits (eagle3_extract)", lambda: e3.float32_to_bf16_bits(out)),
    ]
    print(f"decoders, {n * 4 / 1e6:.0f} MB of float32 output, best of {repeat}:")
    for name, fn in rows:
        print(f"  {name:40s} {best_rate(fn, n * 4, repeat):6.2f} GB/s")


def read_directory(directory, repeat):
    ds = e3.open_dataset(directory)
    state_names = ("hidden_states", "last_hidden_state", "last_hidden_state_prenorm")

    def one_pass():
        total = 0
        for s in ds:
            total += sum(s[n].nbytes for n in state_names if n in s)
        return total

    t0 = time.perf_counter()
    total = one_pass()
    first = time.perf_counter() - t0
    rate = best_rate(one_pass, total, repeat)
    print(f"{directory}: {len(ds)} samples, {ds.meta.dtype}, {total / 1e6:.0f} MB float32: {total / first / 1e9:.2f} "
          f"GB/s first pass, {rate:.2f} GB/s best of {repeat}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="*")
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    decoders(args.mb, args.repeat)
    for d in args.dirs:
        read_directory(d, args.repeat)


if __name__ == "__main__":
    main()
