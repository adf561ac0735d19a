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

#include <cstdint>

namespace e3::kernels {

// e4m3 "fn" (no infinities; S.1111.111 is NaN), exactly.
float e4m3fn_to_float(uint8_t b);

enum class ScaleType { F32, BF16 };

struct Fp8BlockWeight {
  const uint8_t* q;   // [R, C] e4m3
  const void* scale;  // [ceil(R / block_rows), ceil(C / block_cols)]; any alignment
  ScaleType scale_type;
  int64_t R, C, block_rows, block_cols;
};

struct Int4GroupWeight {
  const void* packed;  // int32 [R, ceil(C / 8)]
  const void* scale;   // bf16 [R, ceil(C / group)]
  int64_t R, C, group;
};

// out[r * cols + c] = weight[row0 + r, col0 + c] as a float holding a bf16 value.
void dequantize_block(const Fp8BlockWeight& w, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float* out);
void dequantize_block(const Int4GroupWeight& w, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float* out);

}  // namespace e3::kernels
