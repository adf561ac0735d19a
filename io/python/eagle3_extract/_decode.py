"""Stored bits to numbers, in numpy.

Each decoder works in chunks of about a megabyte so that its temporaries stay in the CPU's
cache: the whole-array form of the same arithmetic is bound by memory traffic and reaches
only about half the speed. The bit manipulations give exactly the values of the reference
definitions (``E4M3FN`` table times scale, numpy's float16), which the tests check code by code.
"""

import numpy as np

# Elements per chunk: 256 K elements is 1 MiB of float32 output, small enough for the cache and
# large enough that numpy's per-call overhead does not show.
_CHUNK = 1 << 18


def _e4m3fn_table():
    code = np.arange(256)
    exponent = (code >> 3) & 0xF
    mantissa = (code & 0x7).astype(np.float64)
    magnitude = np.where(exponent == 0, mantissa / 8 * 2.0**-6, (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    magnitude = np.where((code & 0x7F) == 0x7F, np.nan, magnitude)  # the only NaN; no infinity
    return (np.where(code & 0x80, -1.0, 1.0) * magnitude).astype(np.float32)


# float8 e4m3fn by byte value: the reference definition of the fp8 codes.
E4M3FN = _e4m3fn_table()
E4M3FN.setflags(write=False)

# An e4m3fn code (sign-extended, shifted left by 20) read as float32 has the code's bits in
# float32's sign, exponent and top mantissa bits: it is the code's value times 2^-120, subnormal
# codes included. Multiplying by 2^120 (exact: a power of two) gives the value.
_FP8_MASK = np.int32(0x87F00000 - (1 << 32))
_FP8_UNBIAS = np.float32(2.0**120)
# The same for IEEE half: sign plus 15 bits shifted left by 13, times 2^112.
_FP16_MASK = np.int32(0x8FFFE000 - (1 << 32))
_FP16_UNBIAS = np.float32(2.0**112)


def bf16_bits_to_float32(bits, out=None):
    """uint16 bf16 bits -> float32 (exact: bf16 is the upper half of a float32)."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    if out is None:
        out = np.empty(bits.shape, np.float32)
    np.left_shift(bits, 16, out=out.view(np.uint32), dtype=np.uint32)
    return out


def fp16_bits_to_float32(bits, out=None):
    """uint16 IEEE half bits -> float32, exactly numpy's float16 conversion."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    if out is None:
        out = np.empty(bits.shape, np.float32)
    flat_in, flat_out = bits.reshape(-1), out.reshape(-1)
    as_int = flat_out.view(np.int32)
    magnitude = np.empty(min(_CHUNK, flat_in.size), np.uint16)
    for i in range(0, flat_in.size, _CHUNK):
        src, dst = flat_in[i:i + _CHUNK], flat_out[i:i + _CHUNK]
        mag = magnitude[:src.size]
        np.bitwise_and(src, 0x7FFF, out=mag)
        if mag.max() >= 0x7C00:  # infinity or NaN: rare, and the shift trick would make them finite
            np.copyto(dst, src.view(np.float16))
            continue
        ints = as_int[i:i + _CHUNK]
        np.left_shift(src.view(np.int16), 13, out=ints, dtype=np.int32)
        np.bitwise_and(ints, _FP16_MASK, out=ints)
        np.multiply(dst, _FP16_UNBIAS, out=dst)
    return out


def fp8_bits_to_float32(codes, scale, out=None):
    """uint8 e4m3fn codes [..., H] and float32 row scales [...] -> E4M3FN[codes] * scale."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    scale = np.ascontiguousarray(scale, dtype=np.float32)
    if codes.shape[:-1] != scale.shape:
        raise ValueError(f"fp8 codes of shape {codes.shape} need scales of shape {codes.shape[:-1]}, got {scale.shape}")
    if out is None:
        out = np.empty(codes.shape, np.float32)
    row = codes.shape[-1] if codes.ndim else 1
    if codes.size == 0:
        return out
    flat_in, flat_out, flat_scale = codes.reshape(-1), out.reshape(-1), scale.reshape(-1)
    as_int = flat_out.view(np.int32)
    rows_per_chunk = max(1, _CHUNK // row)
    low7 = np.empty(min(rows_per_chunk * row, flat_in.size), np.uint8)
    for r in range(0, flat_scale.size, rows_per_chunk):
        i, j = r * row, min(flat_in.size, (r + rows_per_chunk) * row)
        src, dst, ints = flat_in[i:j], flat_out[i:j], as_int[i:j]
        s = flat_scale[r:r + rows_per_chunk][:, None]
        rows = dst.reshape(-1, row)
        np.bitwise_and(src, 0x7F, out=low7[:src.size])
        if low7[:src.size].max() == 0x7F:  # a NaN code: the table has it right
            np.take(E4M3FN, src, out=dst)
            np.multiply(rows, s, out=rows)
            continue
        np.left_shift(src.view(np.int8), 20, out=ints, dtype=np.int32)
        np.bitwise_and(ints, _FP8_MASK, out=ints)
        np.multiply(dst, _FP8_UNBIAS, out=dst)
        np.multiply(rows, s, out=rows)
    return out


def float32_to_bf16_bits(values, out=None):
    """float32 -> uint16 bf16 bits, rounded to nearest, ties to even (NaN stays a quiet NaN)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if out is None:
        out = np.empty(values.shape, np.uint16)
    flat_in, flat_out = values.reshape(-1).view(np.uint32), out.reshape(-1)
    tmp = np.empty(min(_CHUNK, flat_in.size), np.uint32)
    for i in range(0, flat_in.size, _CHUNK):
        u, t = flat_in[i:i + _CHUNK], tmp[:min(_CHUNK, flat_in.size - i)]
        # u + 0x7FFF + (bit 16 of u): carries into the upper half exactly when rounding up.
        np.right_shift(u, 16, out=t)
        np.bitwise_and(t, 1, out=t)
        np.add(t, 0x7FFF, out=t)
        np.add(t, u, out=t)
        np.right_shift(t, 16, out=t)
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        if nan.any():
            t[nan] = (u[nan] >> 16) | 0x0040
        flat_out[i:i + _CHUNK] = t
    return out
