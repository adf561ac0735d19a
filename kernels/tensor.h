// A non-owning view of a 2-D row-major tensor in a backend's memory. 1-D tensors have rows = 1.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace e3::kernels {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements between consecutive rows; equals cols when contiguous

  Tensor() = default;
  Tensor(void* d, DType t, int64_t r, int64_t c) : data(d), dtype(t), rows(r), cols(c), stride(c) {}
  Tensor(void* d, DType t, int64_t r, int64_t c, int64_t s) : data(d), dtype(t), rows(r), cols(c), stride(s) {}

  bool contiguous() const { return stride == cols || rows <= 1; }
  int64_t numel() const { return rows * cols; }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }

  template <typename T>
  T* as() const { return static_cast<T*>(data); }

  // Rows [begin, begin + count) as a view.
  Tensor row_slice(int64_t begin, int64_t count) const;
  // Columns [begin, begin + count) of every row, as a strided view.
  Tensor col_slice(int64_t begin, int64_t count) const;
  // The same contiguous memory seen as [rows * cols / new_cols, new_cols].
  Tensor reshaped(int64_t new_cols) const;

  std::string shape_str() const;
};

}  // namespace e3::kernels
