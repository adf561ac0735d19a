#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/ops_cpu.h"

namespace e3::kernels::cpu {

void require_f32(const Tensor& t, const char* what) {
  E3_REQUIRE(t.dtype == DType::F32, ErrorKind::Internal, "{}: CPU op needs fp32, got {}", what,
             t.shape_str());
}

void require_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  E3_REQUIRE(a.rows == b.rows && a.cols == b.cols, ErrorKind::Internal, "{}: shapes differ, {} vs {}",
             what, a.shape_str(), b.shape_str());
}

void embedding(Tensor ids, Tensor table, Tensor out) {
  require_f32(table, "embedding table");
  require_f32(out, "embedding out");
  E3_REQUIRE(ids.dtype == DType::I32 && ids.numel() == out.rows && table.cols == out.cols,
             ErrorKind::Internal, "embedding: ids {} table {} out {}", ids.shape_str(),
             table.shape_str(), out.shape_str());
  const int32_t* id = ids.as<int32_t>();
  // Checked before the parallel loop: an exception must not leave an OpenMP region.
  for (int64_t i = 0; i < out.rows; ++i)
    E3_REQUIRE(id[i] >= 0 && id[i] < table.rows, ErrorKind::Internal,
               "token id {} outside table of {}", id[i], table.rows);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < out.rows; ++i) {
    const int32_t row = id[i];
    const float* src = table.as<float>() + row * table.stride;
    float* dst = out.as<float>() + i * out.stride;
    for (int64_t c = 0; c < out.cols; ++c) dst[c] = src[c];
  }
}

void copy(Tensor src, Tensor dst) {
  E3_REQUIRE(src.rows == dst.rows && src.cols == dst.cols, ErrorKind::Internal, "copy {} to {}", src.shape_str(),
             dst.shape_str());
  if (src.dtype != dst.dtype) {  // through float, row by row
    std::vector<float> row(static_cast<size_t>(src.cols));
    for (int64_t r = 0; r < src.rows; ++r) {
      convert_to_float(static_cast<const char*>(src.data) + static_cast<size_t>(r * src.stride) * dtype_size(src.dtype),
                       src.dtype, row.data(), row.size());
      convert_from_float(row.data(), dst.dtype,
                         static_cast<char*>(dst.data) + static_cast<size_t>(r * dst.stride) * dtype_size(dst.dtype),
                         row.size());
    }
    return;
  }
  const size_t row_bytes = static_cast<size_t>(src.cols) * dtype_size(src.dtype);
  for (int64_t r = 0; r < src.rows; ++r)
    std::memcpy(static_cast<char*>(dst.data) + static_cast<size_t>(r * dst.stride) * dtype_size(dst.dtype),
                static_cast<const char*>(src.data) + static_cast<size_t>(r * src.stride) * dtype_size(src.dtype),
                row_bytes);
}

void fill_random(Tensor t, uint64_t seed, float scale) {
  require_f32(t, "fill_random");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t c = 0; c < t.cols; ++c) t.as<float>()[r * t.stride + c] = normal(rng) * scale;
}

void add_inplace(Tensor acc, Tensor x) {
  require_f32(acc, "add acc");
  require_f32(x, "add x");
  require_same_shape(acc, x, "add");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < acc.rows; ++r) {
    float* a = acc.as<float>() + r * acc.stride;
    const float* b = x.as<float>() + r * x.stride;
    for (int64_t c = 0; c < acc.cols; ++c) a[c] += b[c];
  }
}

void add_bias(Tensor acc, Tensor bias) {
  require_f32(acc, "bias acc");
  require_f32(bias, "bias");
  E3_REQUIRE(bias.numel() == acc.cols, ErrorKind::Internal, "bias {} for {}", bias.shape_str(),
             acc.shape_str());
  const float* b = bias.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < acc.rows; ++r) {
    float* a = acc.as<float>() + r * acc.stride;
    for (int64_t c = 0; c < acc.cols; ++c) a[c] += b[c];
  }
}

void silu_mul(Tensor gate, Tensor up, Tensor out) {
  require_f32(gate, "silu gate");
  require_f32(up, "silu up");
  require_f32(out, "silu out");
  require_same_shape(gate, up, "silu_mul");
  require_same_shape(gate, out, "silu_mul");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < out.rows; ++r) {
    const float* g = gate.as<float>() + r * gate.stride;
    const float* u = up.as<float>() + r * up.stride;
    float* o = out.as<float>() + r * out.stride;
    for (int64_t c = 0; c < out.cols; ++c) o[c] = g[c] / (1.0f + std::exp(-g[c])) * u[c];
  }
}

}  // namespace e3::kernels::cpu
