#include "core/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace e3 {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::U8: return 1;
    case DType::F8E4M3: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::I32: return "int32";
    case DType::U8: return "uint8";
    case DType::F8E4M3: return "fp8";
  }
  return "?";
}

size_t storage_row_bytes(DType t, int64_t hidden) {
  const auto h = static_cast<size_t>(hidden);
  return t == DType::F8E4M3 ? h + sizeof(float) : h * dtype_size(t);
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float value;
  if (exp == 0) {
    value = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    value = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    value = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -value : value;
}

uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;                   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;                  // rounds past 65504: inf
  if (abs < 0x38800000u) {                                        // fp16 subnormal or zero
    // value = abs_float; subnormal unit is 2^-24. Rounding to nearest even via float math is exact
    // here because the scaled value is below 2^10 and representable.
    float a;
    std::memcpy(&a, &abs, sizeof a);
    const float scaled = a * 16777216.0f;  // 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  uint32_t rebased = abs - (112u << 23);
  rebased += 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>(rebased >> 13);
}

namespace {

// Element i of a buffer that need not be aligned for T: safetensors allows a header of any
// length, so a tensor's bytes may start at an odd address. The memcpy compiles to one load.
template <typename T>
T load_at(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void store_at(void* base, size_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(base) + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

void convert_to_float(const void* src, DType from, float* dst, size_t n) {
  switch (from) {
    case DType::F32: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(load_at<uint16_t>(src, i));
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_float(load_at<uint16_t>(src, i));
      return;
    case DType::I32:
    case DType::U8:
    case DType::F8E4M3: break;
  }
  E3_THROW(ErrorKind::Internal, "cannot convert {} to float", dtype_name(from));
}

void convert_from_float(const float* src, DType to, void* dst, size_t n) {
  switch (to) {
    case DType::F32: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) store_at(dst, i, float_to_bf16(src[i]));
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) store_at(dst, i, float_to_fp16(src[i]));
      return;
    case DType::I32:
    case DType::U8:
    case DType::F8E4M3: break;
  }
  E3_THROW(ErrorKind::Internal, "cannot convert float to {}", dtype_name(to));
}

}  // namespace e3

namespace e3 {
namespace {

// A value is NaN or infinite exactly when all its exponent bits are set. Blocks are scanned
// with a branch-free OR so the compiler vectorises the common, all-finite case.
template <typename Bits>
size_t first_with_exponent(const void* v, size_t n, Bits exponent) {
  constexpr size_t kBlock = 4096;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = std::min(n, begin + kBlock);
    Bits hit = 0;
    for (size_t i = begin; i < end; ++i) hit |= static_cast<Bits>((load_at<Bits>(v, i) & exponent) == exponent);
    if (!hit) continue;
    for (size_t i = begin; i < end; ++i)
      if ((load_at<Bits>(v, i) & exponent) == exponent) return i;
  }
  return n;
}

}  // namespace

size_t first_nonfinite(const void* data, DType t, size_t n) {
  switch (t) {
    case DType::F32: return first_with_exponent(data, n, uint32_t{0x7f800000u});
    case DType::BF16: return first_with_exponent(data, n, uint16_t{0x7f80u});
    case DType::F16: return first_with_exponent(data, n, uint16_t{0x7c00u});
    case DType::I32:
    case DType::U8:
    case DType::F8E4M3: break;
  }
  E3_THROW(ErrorKind::Internal, "first_nonfinite: {} is not a float type", dtype_name(t));
}

}  // namespace e3
