#include "kernels/buffer.h"

#include "core/error.h"

namespace e3::kernels {

Tensor DeviceBuffer::view(DType dtype, int64_t rows, int64_t cols, size_t offset) const {
  const size_t need = static_cast<size_t>(rows * cols) * dtype_size(dtype);
  E3_REQUIRE(offset + need <= bytes_, ErrorKind::Internal,
             "view [{}, {}] {} at offset {} does not fit a buffer of {} bytes", rows, cols,
             dtype_name(dtype), offset, bytes_);
  // A planning backend hands out buffers with no memory; their views stay null.
  return Tensor(data_ ? static_cast<char*>(data_) + offset : nullptr, dtype, rows, cols);
}

}  // namespace e3::kernels
