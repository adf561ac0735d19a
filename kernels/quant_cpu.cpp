#include "kernels/quant.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"

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

void fill_random_quant_host(const QuantStack& w, uint64_t seed) {
  const size_t q_bytes = static_cast<size_t>(w.count) * w.matrix_q_bytes();
  auto* q = static_cast<uint8_t*>(w.q);
  for (size_t i = 0; i < q_bytes; ++i) q[i] = random_quant_byte(w.format == QuantStack::Format::Fp8Block, seed, i);
  const float scale = random_quant_scale(w);
  const size_t n = static_cast<size_t>(w.count) * static_cast<size_t>(w.scale_rows() * w.scale_cols());
  for (size_t i = 0; i < n; ++i) {
    const float v = random_quant_scale_value(scale, seed, i);
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
