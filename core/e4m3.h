// float8 e4m3fn, the code of --dtype fp8 storage and of FP8 checkpoints: the scalar
// conversions (one definition for host code and CUDA kernels, so that both round alike) and
// the stored row layout of captured states.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace e3 {

// e4m3 "fn" (no infinities; S.1111.111 is NaN), exactly. One definition for the CPU code and
// the GPU kernels, so that both backends dequantize to the same values.
E3_HOST_DEVICE inline float e4m3fn_to_float(uint8_t b) {
  const uint32_t exponent = (b >> 3) & 0xFu, mantissa = b & 0x7u;
  uint32_t bits;
  if (exponent == 0xF && mantissa == 0x7) {
    bits = 0x7fc00000u;  // quiet NaN
  } else if (exponent == 0) {
    const float v = static_cast<float>(mantissa) * 0.001953125f;  // subnormal: m / 8 * 2^-6
    std::memcpy(&bits, &v, 4);
  } else {
    bits = ((exponent + 120u) << 23) | (mantissa << 20);  // (1 + m / 8) * 2^(e - 7)
  }
  bits |= static_cast<uint32_t>(b & 0x80) << 24;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// The inverse, for --dtype fp8 storage: v rounded to the nearest e4m3fn value, ties to even,
// saturating at +-448 (so a finite v never gives the NaN code). Integer arithmetic on the bits
// plus one exact rintf, so that the CPU and the GPU round identically.
E3_HOST_DEVICE inline uint8_t float_to_e4m3fn_sat(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  uint32_t code;
  if (abs >= 0x43e00000u) {  // |v| >= 448 (or not finite)
    code = 0x7e;
  } else if (abs < 0x3c800000u) {  // below 2^-6: subnormal codes m * 2^-9, m = 0..8 (8 is 2^-6)
    float a;
    std::memcpy(&a, &abs, 4);
    code = static_cast<uint32_t>(rintf(a * 512.0f));  // exact product; rintf rounds ties to even
  } else {  // round the 23 mantissa bits to 3, ties to even, then rebias the exponent (127 -> 7)
    code = ((abs + 0x7ffffu + ((abs >> 20) & 1u)) >> 20) - (120u << 3);
  }
  return static_cast<uint8_t>(sign | code);
}

// IEEE division, rounded to nearest, on both sides (the GPU's `/` may be approximate under
// some flags): the scale and every x / scale must be bit-identical on CPU and GPU.
E3_HOST_DEVICE inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// --dtype fp8 rows. A row of H values x becomes H e4m3fn codes q followed by a float32 scale
// (H + 4 bytes, the scale's bytes little-endian at any alignment) with x ~ e4m3(q) * scale:
// scale = amax / 448, amax = max |x|, q = float_to_e4m3fn_sat(x / scale).
// - amax = 0, or so small that amax / 448 underflows to 0: scale 0, every code 0.
// - A row with a NaN or an infinity cannot be stored: its scale says which its first non-finite
//   value was (+inf, or the quiet NaN 0x7fc00000), its first four code bytes hold that value's column as an
//   int32 and the rest are 0, so that the writer's non-finite check (which runs on these rows,
//   before anything is written) can name the value and column as it does for bf16.
inline constexpr float kE4m3Max = 448.0f;

// The scale of a row whose first non-finite value is v: +inf, or the one quiet NaN 0x7fc00000
// (fabs would keep a NaN's payload, which the CPU and the GPU do not produce alike).
E3_HOST_DEVICE inline float e4m3_bad_row_scale(float v) {
  const uint32_t bits = v == v ? 0x7f800000u : 0x7fc00000u;
  float s;
  std::memcpy(&s, &bits, 4);
  return s;
}

// The scale of a row of finite values whose largest magnitude is amax.
E3_HOST_DEVICE inline float e4m3_row_scale(float amax) { return div_rn(amax, kE4m3Max); }

// Encodes one row (host). x: H floats; out: H + 4 bytes.
void encode_e4m3_row(const float* x, int64_t H, uint8_t* out);
// Decodes one encoded row (H + 4 bytes) to H floats: e4m3fn_to_float(q) * scale.
void decode_e4m3_row(const uint8_t* row, int64_t H, float* out);
// The scale of an encoded row (H + 4 bytes).
inline float e4m3_row_scale_of(const uint8_t* row, int64_t H) {
  float s;
  std::memcpy(&s, row + H, 4);
  return s;
}
// The column an encoded row of non-finite input names (see above).
inline int64_t e4m3_row_bad_column(const uint8_t* row, int64_t H) {
  int32_t c = 0;
  std::memcpy(&c, row, static_cast<size_t>(H < 4 ? H : 4));
  return c;
}

}  // namespace e3
