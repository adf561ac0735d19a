#include "core/dtype.h"

#include <cmath>

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

template <typename T>
void store_at(void* base, size_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(base) + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

void convert_to_float(const void* src, DType from, float* dst, size_t n) {
  switch (from) {
    case DType::F32: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(load_unaligned<uint16_t>(src, i));
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_float(load_unaligned<uint16_t>(src, i));
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

void convert_to_bf16(const void* src, DType from, uint16_t* dst, size_t n) {
  if (from == DType::BF16) {
    std::memcpy(dst, src, n * sizeof(uint16_t));
    return;
  }
  // Through float, a block at a time: the block stays in the L1 cache.
  constexpr size_t kBlock = 1024;
  float block[kBlock];
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t m = n - begin < kBlock ? n - begin : kBlock;
    convert_to_float(static_cast<const uint8_t*>(src) + begin * dtype_size(from), from, block, m);
    for (size_t i = 0; i < m; ++i) dst[begin + i] = float_to_bf16(block[i]);
  }
}

namespace {

// A value is NaN or infinite exactly when all its exponent bits are set.
template <typename Bits>
size_t first_with_exponent(const void* v, size_t n, Bits exponent) {
  return first_flagged<Bits>(v, n, [exponent](Bits b) { return (b & exponent) == exponent; });
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
