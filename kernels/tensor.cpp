#include "kernels/tensor.h"

#include <fmt/format.h>

#include "core/error.h"

namespace e3::kernels {

Tensor Tensor::row_slice(int64_t begin, int64_t count) const {
  E3_REQUIRE(begin >= 0 && count >= 0 && begin + count <= rows, ErrorKind::Internal,
             "row slice [{}, {}) outside {}", begin, begin + count, shape_str());
  char* base = static_cast<char*>(data) + static_cast<size_t>(begin * stride) * dtype_size(dtype);
  return Tensor(base, dtype, count, cols, stride);
}

Tensor Tensor::col_slice(int64_t begin, int64_t count) const {
  E3_REQUIRE(begin >= 0 && count >= 0 && begin + count <= cols, ErrorKind::Internal,
             "column slice [{}, {}) outside {}", begin, begin + count, shape_str());
  char* base = static_cast<char*>(data) + static_cast<size_t>(begin) * dtype_size(dtype);
  return Tensor(base, dtype, rows, count, stride);
}

Tensor Tensor::reshaped(int64_t new_cols) const {
  E3_REQUIRE(contiguous() && new_cols > 0 && numel() % new_cols == 0, ErrorKind::Internal,
             "cannot view {} with {} columns", shape_str(), new_cols);
  return Tensor(data, dtype, numel() / new_cols, new_cols);
}

std::string Tensor::shape_str() const {
  if (contiguous()) return fmt::format("[{}, {}] {}", rows, cols, dtype_name(dtype));
  return fmt::format("[{}, {}] {} stride {}", rows, cols, dtype_name(dtype), stride);
}

}  // namespace e3::kernels
