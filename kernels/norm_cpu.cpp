#include <cmath>

#include "core/error.h"
#include "kernels/ops_cpu.h"

namespace e3::kernels::cpu {

void rmsnorm(Tensor x, Tensor weight, float eps, Tensor out) {
  require_f32(x, "rmsnorm x");
  require_f32(weight, "rmsnorm weight");
  require_f32(out, "rmsnorm out");
  require_same_shape(x, out, "rmsnorm");
  E3_REQUIRE(weight.numel() == x.cols, ErrorKind::Internal, "rmsnorm weight {} for x {}",
             weight.shape_str(), x.shape_str());
  const float* w = weight.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* in = x.as<float>() + r * x.stride;
    float* o = out.as<float>() + r * out.stride;
    double sum_sq = 0.0;
    for (int64_t c = 0; c < x.cols; ++c) sum_sq += static_cast<double>(in[c]) * in[c];
    // As HF does: the variance in fp32, then x * rsqrt(var + eps), then times the weight.
    const float inv = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(x.cols)) + eps);
    for (int64_t c = 0; c < x.cols; ++c) o[c] = w[c] * (in[c] * inv);
  }
}

void add_rmsnorm(Tensor residual, Tensor x, Tensor weight, float eps, Tensor out, Tensor out_f32) {
  add_inplace(residual, x);
  rmsnorm(residual, weight, eps, out);
  if (out_f32.data) copy(out, out_f32);
}

void rmsnorm_heads(Tensor x, int head_dim, Tensor weight, float eps) {
  require_f32(x, "rmsnorm_heads x");
  E3_REQUIRE(head_dim > 0 && x.cols % head_dim == 0 && weight.numel() == head_dim, ErrorKind::Internal,
             "rmsnorm_heads: x {} head_dim {} weight {}", x.shape_str(), head_dim, weight.shape_str());
  const int64_t heads = x.cols / head_dim;
  // Each head of each row is one row of a [rows * heads, head_dim] view with stride head_dim,
  // except that rows are x.stride apart: normalise row by row.
  for (int64_t r = 0; r < x.rows; ++r) {
    Tensor row(static_cast<float*>(x.data) + r * x.stride, DType::F32, heads, head_dim);
    rmsnorm(row, weight, eps, row);
  }
}

}  // namespace e3::kernels::cpu
