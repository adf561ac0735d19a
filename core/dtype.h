// Element types of tensors held by a backend, and host conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/named_enum.h"

namespace e3 {

// U8: raw bytes (quantized weights). F8E4M3: the --dtype fp8 storage of captured states, e4m3fn
// codes with a float32 scale per row (core/e4m3.h, core/storage_codec.h); never a compute dtype.
enum class DType { F32, BF16, F16, I32, U8, F8E4M3 };

// The storage dtypes of captured states, by their --dtype names (the same as dtype_name's);
// I32 and U8 are no storage dtype, so name_table leaves them out.
inline constexpr NamedValue<DType> kStorageDTypeNames[] = {
    {DType::BF16, "bf16"}, {DType::F16, "fp16"}, {DType::F32, "fp32"}, {DType::F8E4M3, "fp8"}};
constexpr const auto& name_table(DType) { return kStorageDTypeNames; }

size_t dtype_size(DType t);
const char* dtype_name(DType t);

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

// Exact, NaN payloads included (as the hardware conversions do).
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // infinity or NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);  // rebias 15 -> 127
  } else {
    const float sub = static_cast<float>(man) * 5.9604644775390625e-8f;  // man * 2^-24, exact
    std::memcpy(&u, &sub, sizeof u);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Round to nearest, ties to even, with overflow to infinity and gradual underflow.
uint16_t float_to_fp16(float f);

// Element i of a buffer that need not be aligned for T: safetensors allows a header of any
// length, so a tensor's bytes may start at an odd address. The memcpy compiles to one load.
template <typename T>
T load_unaligned(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}

// Converts n elements of `src` (of type `from`) to float.
void convert_to_float(const void* src, DType from, float* dst, size_t n);
// Converts n floats to `to` (F32, BF16 or F16).
void convert_from_float(const float* src, DType to, void* dst, size_t n);
// Converts n elements of `src` (F32, BF16 or F16) to bf16 bits: a copy from bf16, else
// float_to_bf16 of the float value.
void convert_to_bf16(const void* src, DType from, uint16_t* dst, size_t n);

// The index of the first of n elements of type T at `data` (any alignment) that `flagged`
// holds for, or n. Each block is first scanned with a branch-free OR, which the compiler
// vectorises: the common case, nothing flagged, runs at memory speed.
template <typename T, typename Flagged>
size_t first_flagged(const void* data, size_t n, Flagged flagged) {
  using Hits = std::conditional_t<sizeof(T) == 1, uint8_t, std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>>;
  constexpr size_t kBlock = 4096;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = n - begin < kBlock ? n : begin + kBlock;
    Hits hit = 0;
    for (size_t i = begin; i < end; ++i) hit |= static_cast<Hits>(flagged(load_unaligned<T>(data, i)));
    if (!hit) continue;
    for (size_t i = begin; i < end; ++i)
      if (flagged(load_unaligned<T>(data, i))) return i;
  }
  return n;
}

// The index of the first NaN or infinity among n elements of a float type, or n if all are
// finite. Runs at memory speed on finite data (it reads exponent bits only).
size_t first_nonfinite(const void* data, DType t, size_t n);

}  // namespace e3
