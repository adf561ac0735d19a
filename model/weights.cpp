#include "model/weights.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/error.h"

namespace e3::model {

WeightSpec WeightSpec::replicated(std::string name, std::vector<int64_t> shape) {
  WeightSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  return s;
}

WeightSpec WeightSpec::row_block(std::string name, std::vector<int64_t> shape, int64_t begin, int64_t count) {
  WeightSpec s = replicated(std::move(name), std::move(shape));
  if (s.shape.size() == 1) {  // a 1-D bias: its elements are the rows of the weight it belongs to
    s.col_begin = begin;
    s.cols = count;
  } else {
    s.row_begin = begin;
    s.rows = count;
  }
  return s;
}

WeightSpec WeightSpec::col_block(std::string name, std::vector<int64_t> shape, int64_t begin, int64_t count) {
  WeightSpec s = replicated(std::move(name), std::move(shape));
  s.col_begin = begin;
  s.cols = count;
  return s;
}

int64_t WeightSpec::full_rows() const { return shape.size() == 2 ? shape[0] : 1; }
int64_t WeightSpec::full_cols() const { return shape.size() == 2 ? shape[1] : shape.empty() ? 1 : shape[0]; }

kernels::Tensor WeightStore::add(kernels::DeviceBuffer buffer, kernels::DType dtype, int64_t rows, int64_t cols) {
  bytes_ += buffer.bytes();
  kernels::Tensor t = buffer.view(dtype, rows, cols);
  buffers_.push_back(std::move(buffer));
  return t;
}

kernels::Tensor WeightLoader::allocate(int64_t rows, int64_t cols, bool fp32) {
  const kernels::DType dtype = fp32 ? kernels::DType::F32 : backend_.compute_dtype();
  kernels::DeviceBuffer buffer = backend_.allocate(static_cast<size_t>(rows * cols) * kernels::dtype_size(dtype));
  return store_.add(std::move(buffer), dtype, rows, cols);
}

kernels::Tensor WeightLoader::load(const WeightSpec& spec) {
  kernels::Tensor t = allocate(spec.slice_rows(), spec.slice_cols(), spec.keep_fp32);
  load_into(spec, t);
  return t;
}

void WeightLoader::load_into(const WeightSpec& spec, kernels::Tensor dst) {
  const int64_t rows = spec.slice_rows(), cols = spec.slice_cols();
  E3_REQUIRE(spec.row_begin >= 0 && spec.col_begin >= 0 && spec.row_begin + rows <= spec.full_rows() &&
                 spec.col_begin + cols <= spec.full_cols() && dst.rows == rows && dst.cols == cols,
             ErrorKind::Internal, "slice of '{}' outside its shape or its destination {}", spec.name, dst.shape_str());
  if (!ckpt_ && random_ && rows > 0 && cols > 0)
    backend_.fill_random(dst, seed_++, 1.0f / std::sqrt(static_cast<float>(spec.full_cols())));
  if (!ckpt_ || rows == 0 || cols == 0) return;

  const std::string name = prefix_ + spec.name;
  const TensorInfo& info = ckpt_->require(name);
  const SafetensorsFile& file = ckpt_->file_of(name);
  E3_REQUIRE(info.shape == spec.shape, ErrorKind::Model, "tensor '{}' in {} has shape {}, expected [{}]",
             name, file.path().string(), info.shape_str(), fmt::join(spec.shape, ", "));
  kernels::DType src_type;
  switch (info.dtype) {
    case StDType::F32: src_type = kernels::DType::F32; break;
    case StDType::BF16: src_type = kernels::DType::BF16; break;
    case StDType::F16: src_type = kernels::DType::F16; break;
    default:
      E3_THROW(ErrorKind::Model, "tensor '{}' in {} has dtype {}; expected BF16, F16 or F32", name,
               file.path().string(), st_dtype_name(info.dtype));
  }
  // Only the slice's rows are read from the map: a rank never touches another rank's bytes
  // of a row-split tensor.
  staging_.resize(static_cast<size_t>(rows * cols));
  const size_t elem = st_dtype_size(info.dtype);
  const uint8_t* base = file.data(info);
  const uint8_t* first = base + static_cast<size_t>(spec.row_begin * spec.full_cols() + spec.col_begin) * elem;
  const size_t span = static_cast<size_t>(((rows - 1) * spec.full_cols() + cols)) * elem;
  file.map().will_need(first, span);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = base + (static_cast<size_t>((spec.row_begin + r) * spec.full_cols() + spec.col_begin)) * elem;
    kernels::convert_to_float(src, src_type, staging_.data() + r * cols, static_cast<size_t>(cols));
  }
  file.map().done_with(first, span);
  E3_REQUIRE(dst.contiguous(), ErrorKind::Internal, "weight destination {} is strided", dst.shape_str());
  backend_.upload_float(dst, staging_.data());
}

}  // namespace e3::model
