#include "kernels/quant.h"

#include <cmath>
#include <cstring>

#include "kernels/dtype.h"

namespace e3::kernels {
namespace {

// Rounds an fp32 product to the bf16 it is stored as.
float to_bf16_value(float x) { return bf16_to_float(float_to_bf16(x)); }

// Checkpoint bytes are memory-mapped at any offset: no alignment is assumed.
template <typename T>
T load(const void* base, int64_t index) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + index * static_cast<int64_t>(sizeof(T)), sizeof v);
  return v;
}

}  // namespace

float e4m3fn_to_float(uint8_t b) {
  const int sign = b >> 7, exponent = (b >> 3) & 0xF, mantissa = b & 0x7;
  float v;
  if (exponent == 0xF && mantissa == 0x7) return std::nanf("");
  if (exponent == 0) v = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m / 8 * 2^-6
  else v = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return sign ? -v : v;
}

void dequantize_block(const Fp8BlockWeight& w, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float* out) {
  const int64_t scale_cols = (w.C + w.block_cols - 1) / w.block_cols;
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = e4m3fn_to_float(static_cast<uint8_t>(i));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t R = row0 + r;
    const uint8_t* q = w.q + R * w.C;
    const int64_t srow = (R / w.block_rows) * scale_cols;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t C = col0 + c;
      const int64_t si = srow + C / w.block_cols;
      const float s = w.scale_type == ScaleType::F32 ? load<float>(w.scale, si) : bf16_to_float(load<uint16_t>(w.scale, si));
      out[r * cols + c] = to_bf16_value(lut[q[C]] * s);
    }
  }
}

void dequantize_block(const Int4GroupWeight& w, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float* out) {
  const int64_t words = (w.C + 7) / 8, groups = (w.C + w.group - 1) / w.group;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t R = row0 + r;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t C = col0 + c;
      const uint32_t word = load<uint32_t>(w.packed, R * words + C / 8);
      const int nibble = static_cast<int>((word >> (4 * (C % 8))) & 0xFu);
      const float scale = bf16_to_float(load<uint16_t>(w.scale, R * groups + C / w.group));
      out[r * cols + c] = to_bf16_value(static_cast<float>(nibble - 8) * scale);
    }
  }
}

}  // namespace e3::kernels
