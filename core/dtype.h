// Element types of tensors held by a backend, and host conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/named_enum.h"

namespace e3 {

// U8: raw bytes (quantized weights). F8E4M3: the --dtype fp8 storage of captured states, e4m3fn
// codes with a float32 scale per row (kernels/quant.h, encode_e4m3_row); never a compute dtype.
enum class DType { F32, BF16, F16, I32, U8, F8E4M3 };

// The storage dtypes of captured states, by their --dtype names (the same as dtype_name's);
// I32 and U8 are no storage dtype, so name_table leaves them out.
inline constexpr NamedValue<DType> kStorageDTypeNames[] = {
    {DType::BF16, "bf16"}, {DType::F16, "fp16"}, {DType::F32, "fp32"}, {DType::F8E4M3, "fp8"}};
constexpr const auto& name_table(DType) { return kStorageDTypeNames; }

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Bytes one captured row of `hidden` values takes in a storage dtype: the staging buffers, the
// writer and every size estimate use this one formula. fp8 rows are the hidden e4m3fn codes
// followed by the row's float32 scale.
size_t storage_row_bytes(DType t, int64_t hidden);

inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest, ties to even; NaN stays NaN (quiet).
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float fp16_to_float(uint16_t h);
// Round to nearest, ties to even, with overflow to infinity and gradual underflow.
uint16_t float_to_fp16(float f);

// Converts n elements of `src` (of type `from`) to float.
void convert_to_float(const void* src, DType from, float* dst, size_t n);
// Converts n floats to `to` (F32, BF16 or F16).
void convert_from_float(const float* src, DType to, void* dst, size_t n);

// The index of the first NaN or infinity among n elements of a float type, or n if all are
// finite. Runs at memory speed on finite data (it reads exponent bits only).
size_t first_nonfinite(const void* data, DType t, size_t n);

}  // namespace e3
