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
  if (exponent == 0xF && mantissa == 0x7) return std::copysign(std::nanf(""), sign ? -1.0f : 1.0f);
  if (exponent == 0) v = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m / 8 * 2^-6
  else v = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return sign ? -v : v;
}

void dequantize_block(const Fp8BlockWeight& w, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float* out) {
  const int64_t scale_cols = (w.col_offset + w.C + w.block_cols - 1) / w.block_cols;
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = e4m3fn_to_float(static_cast<uint8_t>(i));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t R = row0 + r;
    const uint8_t* q = w.q + R * w.C;
    const int64_t srow = ((w.row_offset + R) / w.block_rows) * scale_cols;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t C = col0 + c;
      const int64_t si = srow + (w.col_offset + C) / w.block_cols;
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

int64_t QuantStack::scale_rows() const {
  return format == Format::Fp8Block ? (row_offset + rows + block_rows - 1) / block_rows : rows;
}

int64_t QuantStack::scale_cols() const {
  return format == Format::Fp8Block ? (col_offset + cols + block_cols - 1) / block_cols : (cols + group - 1) / group;
}

size_t QuantStack::matrix_q_bytes() const {
  if (format == Format::None) return 0;
  return static_cast<size_t>(rows) * static_cast<size_t>(format == Format::Fp8Block ? cols : (cols + 7) / 8 * 4);
}

size_t QuantStack::matrix_scale_bytes() const {
  if (format == Format::None) return 0;
  const size_t elem = format == Format::Fp8Block && scale_type == ScaleType::F32 ? 4 : 2;
  return static_cast<size_t>(scale_rows() * scale_cols()) * elem;
}

Fp8BlockWeight QuantStack::fp8(int64_t m) const {
  return {static_cast<const uint8_t*>(q) + static_cast<size_t>(m) * matrix_q_bytes(),
          static_cast<const char*>(scale) + static_cast<size_t>(m) * matrix_scale_bytes(), scale_type, rows, cols,
          block_rows, block_cols, row_offset, col_offset};
}

Int4GroupWeight QuantStack::int4(int64_t m) const {
  return {static_cast<const char*>(q) + static_cast<size_t>(m) * matrix_q_bytes(),
          static_cast<const char*>(scale) + static_cast<size_t>(m) * matrix_scale_bytes(), rows, cols, group};
}

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void fill_random_quant_host(const QuantStack& w, uint64_t seed) {
  const size_t q_bytes = static_cast<size_t>(w.count) * w.matrix_q_bytes();
  auto* q = static_cast<uint8_t*>(w.q);
  for (size_t i = 0; i < q_bytes; ++i) {
    const uint64_t h = splitmix(seed * 0x100000001b3ull + i);
    q[i] = w.format == QuantStack::Format::Fp8Block
               ? static_cast<uint8_t>((h & 0x80) | ((4 + (h >> 8) % 5) << 3) | ((h >> 16) & 7))  // exponent 4..8
               : static_cast<uint8_t>(h);
  }
  const float scale = random_quant_scale(w);
  const size_t n = static_cast<size_t>(w.count) * static_cast<size_t>(w.scale_rows() * w.scale_cols());
  for (size_t i = 0; i < n; ++i) {
    const float v = scale * (0.75f + 0.5f * static_cast<float>(splitmix(~seed + i) % 1024) / 1024.0f);
    if (w.format == QuantStack::Format::Fp8Block && w.scale_type == ScaleType::F32) {
      std::memcpy(static_cast<char*>(w.scale) + i * 4, &v, 4);
    } else {
      const uint16_t b = float_to_bf16(v);
      std::memcpy(static_cast<char*>(w.scale) + i * 2, &b, 2);
    }
  }
}

void dequantize_stack(const QuantStack& w, float* out) {
  for (int64_t m = 0; m < w.count; ++m) {
    float* dst = out + m * w.rows * w.cols;
    if (w.format == QuantStack::Format::Fp8Block) dequantize_block(w.fp8(m), 0, w.rows, 0, w.cols, dst);
    else if (w.format == QuantStack::Format::Int4Group) dequantize_block(w.int4(m), 0, w.rows, 0, w.cols, dst);
  }
}

}  // namespace e3::kernels
