// Owning, move-only memory of a backend (host memory for the CPU backend, device memory for CUDA).
#pragma once

#include <cstddef>
#include <utility>

#include "kernels/tensor.h"

namespace e3::kernels {

class DeviceBuffer {
 public:
  using Deleter = void (*)(void*);

  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t bytes, Deleter deleter) : data_(data), bytes_(bytes), deleter_(deleter) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      deleter_ = std::exchange(other.deleter_, nullptr);
    }
    return *this;
  }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // The buffer (from byte `offset`) as a [rows, cols] tensor; throws if it does not fit.
  Tensor view(DType dtype, int64_t rows, int64_t cols, size_t offset = 0) const;

 private:
  void reset() {
    if (data_ && deleter_) deleter_(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Deleter deleter_ = nullptr;
};

}  // namespace e3::kernels
