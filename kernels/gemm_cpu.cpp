#include <cblas.h>

#include "kernels/error.h"
#include "kernels/ops_cpu.h"

namespace e3::kernels::cpu {

void linear(Tensor x, Tensor w, const Tensor* bias, Tensor y) {
  require_f32(x, "linear x");
  require_f32(w, "linear w");
  require_f32(y, "linear y");
  E3_REQUIRE(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows, ErrorKind::Internal,
             "linear: x {} w {} y {}", x.shape_str(), w.shape_str(), y.shape_str());
  if (x.rows == 0) return;
  float beta = 0.0f;
  if (bias) {
    require_f32(*bias, "linear bias");
    E3_REQUIRE(bias->numel() == y.cols, ErrorKind::Internal, "linear bias {} for y {}",
               bias->shape_str(), y.shape_str());
    const float* b = bias->as<float>();
    for (int64_t r = 0; r < y.rows; ++r) {
      float* row = y.as<float>() + r * y.stride;
      for (int64_t c = 0; c < y.cols; ++c) row[c] = b[c];
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(x.rows),
              static_cast<int>(w.rows), static_cast<int>(x.cols), 1.0f, x.as<float>(),
              static_cast<int>(x.stride), w.as<float>(), static_cast<int>(w.stride), beta,
              y.as<float>(), static_cast<int>(y.stride));
}

}  // namespace e3::kernels::cpu
