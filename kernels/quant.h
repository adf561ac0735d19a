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

#include "core/e4m3.h"
#include "core/hash.h"

namespace e3::kernels {

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
