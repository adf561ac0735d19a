#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "kernels/quant.h"

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

void WeightStore::keep(kernels::DeviceBuffer buffer) {
  bytes_ += buffer.bytes();
  buffers_.push_back(std::move(buffer));
}

kernels::Tensor WeightStore::add(kernels::DeviceBuffer buffer, DType dtype, int64_t rows, int64_t cols) {
  bytes_ += buffer.bytes();
  kernels::Tensor t = buffer.view(dtype, rows, cols);
  buffers_.push_back(std::move(buffer));
  return t;
}

kernels::Tensor WeightLoader::allocate(int64_t rows, int64_t cols, bool fp32) {
  const DType dtype = fp32 ? DType::F32 : backend_.compute_dtype();
  kernels::DeviceBuffer buffer = backend_.allocate(static_cast<size_t>(rows * cols) * dtype_size(dtype));
  return store_.add(std::move(buffer), dtype, rows, cols);
}

void WeightLoader::check_stored_shape(const WeightSpec& spec) const {
  if (!ckpt_) return;
  const std::string name = prefix_ + spec.name;
  constexpr std::string_view kSuffix = ".weight";
  if (spec.shape.size() == 2 && name.size() > kSuffix.size() && name.ends_with(kSuffix) && !ckpt_->contains(name)) {
    const std::string base = name.substr(0, name.size() - kSuffix.size());
    if (ckpt_->contains(base + ".weight_packed")) {
      find_int4(spec.shape, base);
      return;
    }
  }
  const TensorInfo& info = ckpt_->require(name);
  E3_REQUIRE(info.shape == spec.shape, ErrorKind::Model, "tensor '{}' in {} has shape {}, expected [{}]", name,
             ckpt_->file_of(name).path().string(), info.shape_str(), fmt::join(spec.shape, ", "));
}

kernels::Tensor WeightLoader::load(const WeightSpec& spec) {
  check_stored_shape(spec);
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
  E3_REQUIRE(dst.contiguous(), ErrorKind::Internal, "weight destination {} is strided", dst.shape_str());
  if (ckpt_->contains(name)) {
    const TensorInfo& info = ckpt_->require(name);
    const SafetensorsFile& file = ckpt_->file_of(name);
    E3_REQUIRE(info.shape == spec.shape, ErrorKind::Model, "tensor '{}' in {} has shape {}, expected [{}]", name,
               file.path().string(), info.shape_str(), fmt::join(spec.shape, ", "));
    std::optional<DType> src_type;
    switch (info.dtype) {
      case StDType::F32: src_type = DType::F32; break;
      case StDType::BF16: src_type = DType::BF16; break;
      case StDType::F16: src_type = DType::F16; break;
      default: break;
    }
    // Only the slice's bytes are read: a rank never touches another rank's bytes of a split
    // tensor, and a dtype that matches is never converted.
    if (src_type) {
      const ByteBlock block = slice_block(file, info, spec.full_cols(), spec.row_begin, rows, spec.col_begin, cols);
      if (*src_type == dst.dtype) return read_raw(file, block, dst.data);
      ckpt_->count_read(block.bytes());
      const ReaderPool::Observer observe = observer_for(file);
      if (backend_.memory_on_host() && dst.dtype == DType::F32)
        return pool().read(file.fd(), file.path().string(), block, dst.data, true, *src_type, &observe);
      staging_.resize(static_cast<size_t>(rows * cols));
      pool().read(file.fd(), file.path().string(), block, staging_.data(), true, *src_type, &observe);
      return backend_.upload_float(dst, staging_.data());
    }
  }
  staging_.resize(static_cast<size_t>(rows * cols));
  if (!dequantize_slice(spec, name)) {
    const TensorInfo& info = ckpt_->require(name);
    const SafetensorsFile& file = ckpt_->file_of(name);
    E3_REQUIRE(info.shape == spec.shape, ErrorKind::Model, "tensor '{}' in {} has shape {}, expected [{}]", name,
               file.path().string(), info.shape_str(), fmt::join(spec.shape, ", "));
    E3_THROW(ErrorKind::Model, "tensor '{}' in {} has dtype {}; expected BF16, F16 or F32", name,
             file.path().string(), st_dtype_name(info.dtype));
  }
  backend_.upload_float(dst, staging_.data());
}

WeightLoader::~WeightLoader() {
  try {
    finish();
  } catch (...) {  // a failing device already fails the load; the buffers must not go first
  }
}

void WeightLoader::finish() {
  for (StagingSlot& s : ring_) backend_.wait_ticket(std::exchange(s.ticket, 0));
}

ReaderPool& WeightLoader::pool() {
  if (!pool_) pool_ = std::make_unique<ReaderPool>(load_threads_);
  return *pool_;
}

ReaderPool::Observer WeightLoader::observer_for(const SafetensorsFile& file) const {
  return [ckpt = ckpt_, &file](uint64_t offset, const uint8_t* data, size_t n) { ckpt->observe(file, offset, data, n); };
}

ByteBlock WeightLoader::slice_block(const SafetensorsFile& file, const TensorInfo& info, int64_t full_cols,
                                    int64_t row_begin, int64_t rows, int64_t col_begin, int64_t cols) {
  const auto elem = static_cast<uint64_t>(st_dtype_size(info.dtype));
  return {file.file_offset(info) + static_cast<uint64_t>(row_begin * full_cols + col_begin) * elem,
          static_cast<uint64_t>(full_cols) * elem, static_cast<uint64_t>(cols) * elem, rows};
}

void WeightLoader::read_raw(const SafetensorsFile& file, const ByteBlock& b, void* dst) {
  ckpt_->count_read(b.bytes());
  const std::string path = file.path().string();
  const ReaderPool::Observer observe = observer_for(file);
  if (backend_.memory_on_host()) return pool().read(file.fd(), path, b, dst, false, DType::U8, &observe);
  if (b.count <= 0 || b.seg == 0) return;
  const bool contiguous = b.count == 1 || b.stride == b.seg;
  const uint64_t slot_bytes = std::max(staging_bytes_, contiguous ? 1 : b.seg);
  if (ring_.empty() || ring_.front().buffer.bytes() < slot_bytes) {
    finish();
    ring_.clear();
    for (int i = 0; i < 3; ++i) ring_.push_back({backend_.allocate_host(slot_bytes), 0});
  }
  auto stage = [&](const ByteBlock& part, uint64_t dst_offset) {
    StagingSlot& slot = ring_[ring_next_++ % ring_.size()];
    backend_.wait_ticket(std::exchange(slot.ticket, 0));
    pool().read(file.fd(), path, part, slot.buffer.data(), false, DType::U8, &observe);
    slot.ticket = backend_.upload_raw_async(static_cast<uint8_t*>(dst) + dst_offset, slot.buffer.data(), part.bytes());
  };
  const uint64_t cap = ring_.front().buffer.bytes();
  if (contiguous) {
    for (uint64_t off = 0, total = b.bytes(); off < total; off += cap) {
      const uint64_t len = std::min(cap, total - off);
      stage({b.offset + off, len, len, 1}, off);
    }
    return;
  }
  const auto per = static_cast<int64_t>(cap / b.seg);
  for (int64_t r = 0; r < b.count; r += per)
    stage({b.offset + static_cast<uint64_t>(r) * b.stride, b.stride, b.seg, std::min(per, b.count - r)},
          static_cast<uint64_t>(r) * b.seg);
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The bytes of rows [row0, row0 + rows) of a row-major tensor, paged in for the read (and
// added to the checkpoint's weight fingerprint).
struct RowSpan {
  const SafetensorsFile& file;
  const uint8_t* first;
  size_t bytes;
  RowSpan(const Checkpoint& ckpt, const SafetensorsFile& f, const TensorInfo& info, int64_t row0, int64_t rows)
      : file(f) {
    const size_t row_bytes = static_cast<size_t>(info.numel() / std::max<int64_t>(info.shape[0], 1)) *
                             st_dtype_size(info.dtype);
    first = f.data(info) + static_cast<size_t>(row0) * row_bytes;
    bytes = static_cast<size_t>(rows) * row_bytes;
    file.map().will_need(first, bytes);
    ckpt.observe(f, f.file_offset(info) + static_cast<uint64_t>(row0) * row_bytes, first, bytes);
  }
  ~RowSpan() { file.map().done_with(first, bytes); }
};

}  // namespace

bool WeightLoader::dequantize_slice(const WeightSpec& spec, const std::string& name) {
  constexpr std::string_view kSuffix = ".weight";
  if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    return false;
  const std::string base = name.substr(0, name.size() - kSuffix.size());
  if (!ckpt_->contains(name) && ckpt_->contains(base + ".weight_packed")) {
    dequantize_int4(spec, base);
    return true;
  }
  if (ckpt_->contains(name) && ckpt_->require(name).dtype == StDType::F8_E4M3) {
    dequantize_fp8(spec, name, base);
    return true;
  }
  return false;
}

WeightLoader::StoredFp8 WeightLoader::find_fp8(const std::vector<int64_t>& shape, const std::string& name,
                                               const std::string& base) const {
  const TensorInfo& info = ckpt_->require(name);
  const std::string file = ckpt_->file_of(name).path().string();
  E3_REQUIRE(quant_.method == QuantConfig::Method::Fp8Block, ErrorKind::Model,
             "tensor '{}' in {} is F8_E4M3, but config.json's quantization_config is {} (expected quant_method fp8 "
             "with weight_block_size)", name, file, quant_.describe());
  E3_REQUIRE(info.shape == shape, ErrorKind::Model, "tensor '{}' in {} has shape {}, expected {}", name, file,
             info.shape_str(), shape_text(shape));
  E3_REQUIRE(shape.size() == 2, ErrorKind::Model, "FP8 tensor '{}' in {} is not 2-D", name, file);
  const std::string scale_name = base + ".weight_scale_inv";
  E3_REQUIRE(ckpt_->contains(scale_name), ErrorKind::Model,
             "FP8 tensor '{}' in {} has no scale: '{}' is missing", name, file, scale_name);
  const TensorInfo& scale = ckpt_->require(scale_name);
  const std::string scale_file = ckpt_->file_of(scale_name).path().string();
  const std::vector<int64_t> want{ceil_div(shape[0], quant_.block_rows), ceil_div(shape[1], quant_.block_cols)};
  E3_REQUIRE(scale.shape == want, ErrorKind::Model,
             "scale '{}' in {} has shape {}, expected {} (one per {}x{} block of {} {})", scale_name, scale_file,
             scale.shape_str(), shape_text(want), quant_.block_rows, quant_.block_cols, name, info.shape_str());
  E3_REQUIRE(scale.dtype == StDType::F32 || scale.dtype == StDType::BF16, ErrorKind::Model,
             "scale '{}' in {} has dtype {}; expected F32 or BF16", scale_name, scale_file, st_dtype_name(scale.dtype));
  return {&ckpt_->file_of(name), &info, &ckpt_->file_of(scale_name), &scale};
}

WeightLoader::StoredInt4 WeightLoader::find_int4(const std::vector<int64_t>& spec_shape, const std::string& base) const {
  const std::string packed_name = base + ".weight_packed", scale_name = base + ".weight_scale",
                    shape_name = base + ".weight_shape";
  const TensorInfo& packed = ckpt_->require(packed_name);
  const SafetensorsFile& file = ckpt_->file_of(packed_name);
  const std::string path = file.path().string();
  E3_REQUIRE(quant_.method == QuantConfig::Method::Int4Pack, ErrorKind::Model,
             "tensor '{}' in {} is INT4 pack-quantized, but config.json's quantization_config is {} (expected "
             "compressed-tensors pack-quantized)", packed_name, path, quant_.describe());
  E3_REQUIRE(spec_shape.size() == 2, ErrorKind::Model, "INT4 tensor '{}' in {} stands for a weight of shape {}, "
             "not 2-D", packed_name, path, shape_text(spec_shape));
  E3_REQUIRE(ckpt_->contains(shape_name), ErrorKind::Model, "INT4 tensor '{}' in {}: '{}' is missing", packed_name,
             path, shape_name);
  const TensorInfo& shape = ckpt_->require(shape_name);
  E3_REQUIRE((shape.dtype == StDType::I32 || shape.dtype == StDType::I64) && shape.numel() == 2, ErrorKind::Model,
             "'{}' in {} is {} {}; expected I32 or I64 [2]", shape_name, ckpt_->file_of(shape_name).path().string(),
             st_dtype_name(shape.dtype), shape.shape_str());
  std::vector<int64_t> stored(2);
  for (int i = 0; i < 2; ++i) {
    const uint8_t* p = ckpt_->file_of(shape_name).data(shape) + i * st_dtype_size(shape.dtype);
    if (shape.dtype == StDType::I64) {
      std::memcpy(&stored[static_cast<size_t>(i)], p, 8);
    } else {
      int32_t v;
      std::memcpy(&v, p, 4);
      stored[static_cast<size_t>(i)] = v;
    }
  }
  E3_REQUIRE(stored == spec_shape, ErrorKind::Model, "INT4 weight '{}' in {} has weight_shape {}, expected {}",
             base + ".weight", path, shape_text(stored), shape_text(spec_shape));
  const int64_t R = spec_shape[0], C = spec_shape[1];
  const std::vector<int64_t> packed_want{R, ceil_div(C, 8)};
  E3_REQUIRE(packed.dtype == StDType::I32 && packed.shape == packed_want, ErrorKind::Model,
             "'{}' in {} is {} {}; expected I32 {} (eight int4 per word)", packed_name, path,
             st_dtype_name(packed.dtype), packed.shape_str(), shape_text(packed_want));
  E3_REQUIRE(ckpt_->contains(scale_name), ErrorKind::Model, "INT4 tensor '{}' in {} has no scale: '{}' is missing",
             packed_name, path, scale_name);
  const TensorInfo& scale = ckpt_->require(scale_name);
  const std::string scale_path = ckpt_->file_of(scale_name).path().string();
  const std::vector<int64_t> scale_want{R, ceil_div(C, quant_.group_size)};
  E3_REQUIRE(scale.shape == scale_want, ErrorKind::Model,
             "scale '{}' in {} has shape {}, expected {} (one per group of {} columns of {} {})", scale_name,
             scale_path, scale.shape_str(), shape_text(scale_want), quant_.group_size, base + ".weight",
             shape_text(spec_shape));
  E3_REQUIRE(scale.dtype == StDType::BF16, ErrorKind::Model, "scale '{}' in {} has dtype {}; expected BF16",
             scale_name, scale_path, st_dtype_name(scale.dtype));
  E3_REQUIRE(!ckpt_->contains(base + ".weight_zero_point"), ErrorKind::Model,
             "INT4 tensor '{}' in {} has zero points ('{}'): asymmetric int4 is not supported", packed_name, path,
             base + ".weight_zero_point");
  return {&file, &packed, &ckpt_->file_of(scale_name), &scale};
}

void WeightLoader::dequantize_fp8(const WeightSpec& spec, const std::string& name, const std::string& base) {
  const StoredFp8 st = find_fp8(spec.shape, name, base);
  const int64_t r0 = spec.row_begin, rows = spec.slice_rows();
  const RowSpan q_rows(*ckpt_, *st.file, *st.q, r0, rows);
  ckpt_->count_read(q_rows.bytes);
  ckpt_->observe_whole(st.scale->name);
  const kernels::Fp8BlockWeight w{st.file->data(*st.q), st.scale_file->data(*st.scale),
                                  st.scale->dtype == StDType::F32 ? kernels::ScaleType::F32 : kernels::ScaleType::BF16,
                                  spec.shape[0], spec.shape[1], quant_.block_rows, quant_.block_cols, 0, 0};
  kernels::dequantize_block(w, r0, rows, spec.col_begin, spec.slice_cols(), staging_.data());
}

void WeightLoader::dequantize_int4(const WeightSpec& spec, const std::string& base) {
  const StoredInt4 st = find_int4(spec.shape, base);
  const int64_t r0 = spec.row_begin, rows = spec.slice_rows();
  const RowSpan packed_rows(*ckpt_, *st.file, *st.packed, r0, rows);
  const RowSpan scale_rows(*ckpt_, *st.scale_file, *st.scale, r0, rows);
  ckpt_->count_read(packed_rows.bytes + scale_rows.bytes);
  const kernels::Int4GroupWeight w{st.file->data(*st.packed), st.scale_file->data(*st.scale), spec.shape[0],
                                   spec.shape[1], quant_.group_size};
  kernels::dequantize_block(w, r0, rows, spec.col_begin, spec.slice_cols(), staging_.data());
}

void WeightLoader::allocate_quantized(kernels::QuantStack& stack) {
  kernels::DeviceBuffer q = backend_.allocate(static_cast<size_t>(stack.count) * stack.matrix_q_bytes());
  kernels::DeviceBuffer scale = backend_.allocate(static_cast<size_t>(stack.count) * stack.matrix_scale_bytes());
  stack.q = q.data();
  stack.scale = scale.data();
  store_.keep(std::move(q));
  store_.keep(std::move(scale));
  if (!ckpt_ && random_) backend_.fill_random_quant(stack, seed_++);
}

bool WeightLoader::stored_fp8(const WeightSpec& spec) const {
  if (spec.shape.size() != 2) return false;
  if (!ckpt_) return quant_.method == QuantConfig::Method::Fp8Block;
  const std::string name = prefix_ + spec.name;
  return ckpt_->contains(name) && ckpt_->require(name).dtype == StDType::F8_E4M3;
}

LinearWeight WeightLoader::load_linear(const std::vector<WeightSpec>& parts) {
  LinearWeight w;
  w.cols = parts.front().slice_cols();
  for (const WeightSpec& p : parts) {
    E3_REQUIRE(p.slice_cols() == w.cols, ErrorKind::Internal, "parts of one linear weight differ in columns");
    w.rows += p.slice_rows();
  }
  if (backend_.keeps_weights_quantized() &&
      std::all_of(parts.begin(), parts.end(), [&](const WeightSpec& p) { return stored_fp8(p); })) {
    for (const WeightSpec& p : parts) w.parts.push_back(load_fp8_slice(p));
    return w;
  }
  for (const WeightSpec& p : parts) check_stored_shape(p);
  w.dense = allocate(w.rows, w.cols);
  int64_t row = 0;
  for (const WeightSpec& p : parts) {
    load_into(p, w.dense.row_slice(row, p.slice_rows()));
    row += p.slice_rows();
  }
  return w;
}

kernels::QuantStack WeightLoader::load_fp8_slice(const WeightSpec& spec) {
  kernels::QuantStack st;
  st.format = kernels::QuantStack::Format::Fp8Block;
  st.count = 1;
  st.rows = spec.slice_rows();
  st.cols = spec.slice_cols();
  st.block_rows = quant_.block_rows;
  st.block_cols = quant_.block_cols;
  st.row_offset = spec.row_begin % quant_.block_rows;
  st.col_offset = spec.col_begin % quant_.block_cols;
  st.scale_type = kernels::ScaleType::F32;
  std::optional<StoredFp8> stored;
  if (ckpt_) {
    const std::string name = prefix_ + spec.name;
    stored = find_fp8(spec.shape, name, name.substr(0, name.size() - std::string_view(".weight").size()));
    if (stored->scale->dtype == StDType::BF16) st.scale_type = kernels::ScaleType::BF16;
  }
  allocate_quantized(st);
  if (!stored) return st;
  // The slice's bytes, and the block scales that cover it, gathered into host memory.
  const int64_t C = spec.shape[1];
  read_raw(*stored->file, slice_block(*stored->file, *stored->q, C, spec.row_begin, st.rows, spec.col_begin, st.cols),
           st.q);
  const size_t elem = st.scale_type == kernels::ScaleType::F32 ? 4 : 2;
  const int64_t full_scale_cols = stored->scale->shape[1], r0 = spec.row_begin / quant_.block_rows,
                c0 = spec.col_begin / quant_.block_cols;
  std::vector<uint8_t> scale_host(st.matrix_scale_bytes());
  const uint8_t* scales = stored->scale_file->data(*stored->scale);
  for (int64_t i = 0; i < st.scale_rows(); ++i) {
    const auto from = static_cast<size_t>((r0 + i) * full_scale_cols + c0) * elem;
    const auto len = static_cast<size_t>(st.scale_cols()) * elem;
    std::memcpy(scale_host.data() + static_cast<size_t>(i * st.scale_cols()) * elem, scales + from, len);
  }
  ckpt_->observe_whole(stored->scale->name);
  backend_.upload_raw(kernels::Tensor{st.scale, DType::U8, 1, static_cast<int64_t>(scale_host.size())},
                      scale_host.data());
  return st;
}

kernels::QuantStack WeightLoader::load_quantized(const std::vector<std::string>& names, int64_t rows, int64_t cols) {
  using Format = kernels::QuantStack::Format;
  kernels::QuantStack stack;
  stack.count = static_cast<int64_t>(names.size());
  stack.rows = rows;
  stack.cols = cols;
  stack.block_rows = quant_.block_rows;
  stack.block_cols = quant_.block_cols;
  stack.group = quant_.group_size;
  const std::vector<int64_t> shape{rows, cols};
  auto base_of = [&](const std::string& n) { return prefix_ + n.substr(0, n.size() - std::string_view(".weight").size()); };
  if (!ckpt_) {  // planning or random weights: the form quantization_config announces
    if (quant_.method == QuantConfig::Method::None) return {};
    stack.format = quant_.method == QuantConfig::Method::Fp8Block ? Format::Fp8Block : Format::Int4Group;
    stack.scale_type = stack.format == Format::Fp8Block ? kernels::ScaleType::F32 : kernels::ScaleType::BF16;
  } else {
    const std::string first = prefix_ + names.front();
    if (ckpt_->contains(first) && ckpt_->require(first).dtype == StDType::F8_E4M3) {
      stack.format = Format::Fp8Block;
      const StoredFp8 st = find_fp8(shape, first, base_of(names.front()));
      stack.scale_type = st.scale->dtype == StDType::F32 ? kernels::ScaleType::F32 : kernels::ScaleType::BF16;
    } else if (!ckpt_->contains(first) && ckpt_->contains(base_of(names.front()) + ".weight_packed")) {
      stack.format = Format::Int4Group;
      stack.scale_type = kernels::ScaleType::BF16;
      find_int4(shape, base_of(names.front()));  // the shape, before allocating for it
    } else {
      return {};
    }
  }
  allocate_quantized(stack);
  if (!ckpt_) return stack;
  auto upload = [&](void* dst, const SafetensorsFile& file, const TensorInfo& info, size_t bytes) {
    E3_REQUIRE(info.end - info.begin == bytes, ErrorKind::Internal, "'{}': {} bytes, {} expected", info.name,
               info.end - info.begin, bytes);
    read_raw(file, {file.file_offset(info), bytes, bytes, 1}, dst);
  };
  for (int64_t m = 0; m < stack.count; ++m) {
    const std::string& n = names[static_cast<size_t>(m)];
    void* q_dst = static_cast<char*>(stack.q) + static_cast<size_t>(m) * stack.matrix_q_bytes();
    void* s_dst = static_cast<char*>(stack.scale) + static_cast<size_t>(m) * stack.matrix_scale_bytes();
    if (stack.format == Format::Fp8Block) {
      const StoredFp8 st = find_fp8(shape, prefix_ + n, base_of(n));
      E3_REQUIRE((st.scale->dtype == StDType::F32) == (stack.scale_type == kernels::ScaleType::F32), ErrorKind::Model,
                 "scale of '{}' is {}, but that of '{}' is not: one layer's experts must share a scale dtype",
                 prefix_ + n, st_dtype_name(st.scale->dtype), prefix_ + names.front());
      upload(q_dst, *st.file, *st.q, stack.matrix_q_bytes());
      upload(s_dst, *st.scale_file, *st.scale, stack.matrix_scale_bytes());
    } else {
      E3_REQUIRE(ckpt_->contains(base_of(n) + ".weight_packed"), ErrorKind::Model,
                 "'{}' is stored INT4 but '{}' is not (no '{}'): one layer's experts must share a form",
                 prefix_ + names.front(), prefix_ + n, base_of(n) + ".weight_packed");
      const StoredInt4 st = find_int4(shape, base_of(n));
      upload(q_dst, *st.file, *st.packed, stack.matrix_q_bytes());
      upload(s_dst, *st.scale_file, *st.scale, stack.matrix_scale_bytes());
    }
  }
  return stack;
}

}  // namespace e3::model
