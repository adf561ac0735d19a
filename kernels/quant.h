// Dequantization of the weight formats Hub checkpoints ship, to the bf16 values a model
// computes with: each weight is bf16(q * scale), the product taken in fp32 and rounded once
// to bf16, nearest even (what the reference implementations do).
//
// - FP8 block-scaled (DeepSeek-V3/R1, Qwen3-FP8): e4m3 weights [R, C], one scale per
//   block_rows x block_cols block, scale [ceil(R / block_rows), ceil(C / block_cols)] in F32
//   (DeepSeek) or BF16 (Qwen3).
// - INT4 pack-quantized (compressed-tensors, Kimi-K2-Thinking / K2.5): symmetric int4 in
//   offset binary (stored nibble u, value u - 8), eight per int32 word with element 8 w + i in
//   bits [4 i, 4 i + 4) of word w; packed [R, ceil(C / 8)], scale BF16 [R, ceil(C / group)].
//
// Every function takes a block [row0, row0 + rows) x [col0, col0 + cols) of the full matrix,
// so a rank dequantizes only its tensor-parallel slice, aligned to blocks and groups or not.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/hash.h"

namespace e3::kernels {

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

enum class ScaleType { F32, BF16 };

struct Fp8BlockWeight {
  const uint8_t* q;   // [R, C] e4m3
  const void* scale;  // [ceil((row_offset + R) / block_rows), ceil((col_offset + C) / block_cols)]; any alignment
  ScaleType scale_type;
  int64_t R, C, block_rows, block_cols;
  // A slice of a larger weight starts inside a block: element (r, c) has the scale of block
  // ((row_offset + r) / block_rows, (col_offset + c) / block_cols) of the stored scales.
  int64_t row_offset, col_offset;
};

struct Int4GroupWeight {
  const void* packed;  // int32 [R, ceil(C / 8)]
  const void* scale;   // bf16 [R, ceil(C / group)]
  int64_t R, C, group;
};

// out[r * cols + c] = weight[row0 + r, col0 + c] as a float holding a bf16 value.
void dequantize_block(const Fp8BlockWeight& w, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float* out);
void dequantize_block(const Int4GroupWeight& w, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float* out);

// Whole matrices kept in a backend's memory in their checkpoint form: `count` matrices of
// [rows, cols] back to back, each with its own scales (so blocks restart at every matrix).
struct QuantStack {
  enum class Format { None, Fp8Block, Int4Group };
  Format format = Format::None;
  int64_t count = 0, rows = 0, cols = 0;
  int64_t block_rows = 128, block_cols = 128;  // Fp8Block
  int64_t group = 32;                          // Int4Group
  ScaleType scale_type = ScaleType::BF16;      // Fp8Block: F32 or BF16; Int4Group: BF16
  int64_t row_offset = 0, col_offset = 0;      // Fp8Block: a slice's start inside its first block
  // Fp8Block: e4m3 [count * rows, cols]; Int4Group: int32 [count * rows, ceil(cols / 8)].
  void* q = nullptr;
  // Fp8Block: [count * scale_rows(), scale_cols()] (blocks counted from the offsets);
  // Int4Group: bf16 [count * rows, ceil(cols / group)].
  void* scale = nullptr;

  bool quantized() const { return format != Format::None; }
  int64_t scale_rows() const;  // per matrix
  int64_t scale_cols() const;
  size_t matrix_q_bytes() const;
  size_t matrix_scale_bytes() const;
  size_t bytes() const { return static_cast<size_t>(count) * (matrix_q_bytes() + matrix_scale_bytes()); }
  // Matrix m as the one-matrix views above.
  Fp8BlockWeight fp8(int64_t m) const;
  Int4GroupWeight int4(int64_t m) const;
};

// out = every matrix of w dequantized, stacked: [count * rows, cols] row-major (host memory).
void dequantize_stack(const QuantStack& w, float* out);

// Element i of a random quantized stack (fill_random_quant on both backends): an FP8 byte of
// exponent 4..8 (never NaN) or any INT4 word byte, and a scale of base * [0.75, 1.25).
E3_HOST_DEVICE inline uint8_t random_quant_byte(bool fp8, uint64_t seed, uint64_t i) {
  const uint64_t h = splitmix64(seed * 0x100000001b3ull + i);
  return fp8 ? static_cast<uint8_t>((h & 0x80) | ((4 + (h >> 8) % 5) << 3) | ((h >> 16) & 7)) : static_cast<uint8_t>(h);
}
E3_HOST_DEVICE inline float random_quant_scale_value(float base, uint64_t seed, uint64_t i) {
  return base * (0.75f + 0.5f * static_cast<float>(splitmix64(~seed + i) % 1024) / 1024.0f);
}

// Benchmark weights in quantized form (host memory; the CUDA backend fills device memory):
// FP8 values of magnitude 1/8..3.75 (never NaN), INT4 nibbles uniform, and scales that make
// the dequantized weights about 1/sqrt(cols) in size.
void fill_random_quant_host(const QuantStack& w, uint64_t seed);
inline float random_quant_scale(const QuantStack& w) {
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(w.cols));
  return w.format == QuantStack::Format::Int4Group ? 0.22f * inv_sqrt : inv_sqrt;
}

}  // namespace e3::kernels
