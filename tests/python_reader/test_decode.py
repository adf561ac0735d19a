"""The reader's decoders against their definitions, code by code (no output directory needed).

Run: PYTHONPATH=io/python /usr/bin/python3 tests/python_reader/test_decode.py
"""

import unittest

import numpy as np

import eagle3_extract as e3


def e4m3fn_reference(code):
    """One e4m3fn byte as a Python float, from the format's definition (bias 7, no infinity)."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return float("nan")
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def same_bits(a, b):
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))


class Decode(unittest.TestCase):
    def test_e4m3fn_table(self):
        want = np.array([e4m3fn_reference(c) for c in range(256)], np.float32)
        self.assertEqual(e3.E4M3FN.dtype, np.float32)
        np.testing.assert_array_equal(e3.E4M3FN, want)  # NaN where NaN
        self.assertEqual(e3.E4M3FN[0x7E], 448.0)
        self.assertEqual(e3.E4M3FN[0x01], 2.0**-9)

    def test_fp8_every_code_times_scales(self):
        # Every code in every column, with scales from zero and subnormal up to large ones.
        scales = np.array([0.0, 1.0, 0.5, 3.0e-3, 1e-40, 2.5e5, 7.1e33, 1 / 448], np.float32)
        codes = np.tile(np.arange(256, dtype=np.uint8).reshape(1, 256), (len(scales), 1))
        finite = codes.copy()
        finite[(finite & 0x7F) == 0x7F] = 0x7E  # the fast path: no NaN code in the chunk
        for c in (codes, finite):
            got = e3.fp8_bits_to_float32(c, scales)
            want = np.array([[np.float32(e4m3fn_reference(int(q))) * s for q in row] for row, s in zip(c, scales)],
                            np.float32)
            np.testing.assert_array_equal(got, want)

    def test_fp8_shapes_and_chunks(self):
        rng = np.random.default_rng(1)
        codes = rng.integers(0, 256, (37, 3, 4099), dtype=np.uint8)
        codes[(codes & 0x7F) == 0x7F] = 0  # ~2 % NaN codes would send every chunk to the table path
        scale = rng.random((37, 3), dtype=np.float32)
        got = e3.fp8_bits_to_float32(codes, scale)
        self.assertEqual(got.shape, codes.shape)
        self.assertTrue(same_bits(got, e3.E4M3FN[codes] * scale[..., None]))
        with self.assertRaises(ValueError):
            e3.fp8_bits_to_float32(codes, scale[:, :2])

    def test_fp16_every_code(self):
        bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
        want = bits.view(np.float16).astype(np.float32)
        finite = bits[(bits & 0x7C00) != 0x7C00]
        self.assertTrue(same_bits(e3.fp16_bits_to_float32(finite), finite.view(np.float16).astype(np.float32)))
        got = e3.fp16_bits_to_float32(bits)  # with inf and NaN: numpy's conversion
        np.testing.assert_array_equal(got, want)

    def test_bf16(self):
        bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
        got = e3.bf16_bits_to_float32(bits)
        self.assertTrue(np.array_equal(got.view(np.uint32), bits.astype(np.uint32) << 16))

    def test_float32_to_bf16_rounds_to_nearest_even(self):
        u = np.array([0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x7F7FFFFF, 0xFF800000,
                      0x7FC00001, 0x7F800001, 0x00000001, 0x80000000], np.uint32)
        want = np.array([0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x3F80, 0x7F80, 0xFF80, 0x7FC0, 0x7FC0, 0x0000, 0x8000],
                        np.uint16)
        np.testing.assert_array_equal(e3.float32_to_bf16_bits(u.view(np.float32)), want)
        rng = np.random.default_rng(2)
        x = rng.standard_normal(300001).astype(np.float32)  # more than one chunk
        ref = ((x.view(np.uint32).astype(np.uint64) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16)
        np.testing.assert_array_equal(e3.float32_to_bf16_bits(x), ref.astype(np.uint16))


if __name__ == "__main__":
    unittest.main()
