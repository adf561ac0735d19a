// Loading weights by name: the expected full shape is checked against the checkpoint, and
// only this rank's slice is read, converted and placed in backend memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/weight_reader.h"

namespace e3::model {

// One weight as a rank needs it: the tensor's full shape in the checkpoint and the block of
// it this rank keeps. 1-D tensors are one row. rows/cols of -1 mean "all".
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t row_begin = 0, rows = -1;
  int64_t col_begin = 0, cols = -1;
  bool keep_fp32 = false;  // stored as fp32 whatever the compute dtype (router weights, biases HF keeps in fp32)

  // The whole tensor, on every rank.
  static WeightSpec replicated(std::string name, std::vector<int64_t> shape);
  // Rows [begin, begin + count) of a 2-D tensor (an output-dim split), or of a 1-D bias.
  static WeightSpec row_block(std::string name, std::vector<int64_t> shape, int64_t begin, int64_t count);
  // Columns [begin, begin + count) of a 2-D tensor (an input-dim split).
  static WeightSpec col_block(std::string name, std::vector<int64_t> shape, int64_t begin, int64_t count);

  int64_t full_rows() const;  // shape[0] for 2-D, 1 for 1-D
  int64_t full_cols() const;
  int64_t slice_rows() const { return rows < 0 ? full_rows() : rows; }
  int64_t slice_cols() const { return cols < 0 ? full_cols() : cols; }
  int64_t slice_numel() const { return slice_rows() * slice_cols(); }
};

// A linear layer's weight [N, K] as this rank holds it: dense in the compute dtype or, where
// the backend keeps weights quantized and the checkpoint stores every part in FP8, the FP8
// slices of its parts stacked along N (apply_linear dequantizes them into scratch per use).
struct LinearWeight {
  kernels::Tensor dense;                  // [N, K], unset when quantized
  std::vector<kernels::QuantStack> parts;  // one matrix each; rows add up to N
  int64_t rows = 0, cols = 0;
  bool quantized() const { return !parts.empty(); }
};

// Owns the backend memory of a model's weights.
class WeightStore {
 public:
  kernels::Tensor add(kernels::DeviceBuffer buffer, DType dtype, int64_t rows, int64_t cols);
  void keep(kernels::DeviceBuffer buffer);  // raw bytes (quantized weights)
  size_t bytes() const { return bytes_; }

 private:
  std::vector<kernels::DeviceBuffer> buffers_;
  size_t bytes_ = 0;
};

class WeightLoader {
 public:
  // With a null checkpoint the loader only plans: it allocates through the backend (a
  // planning backend counts bytes) and reads nothing.
  // `prefix` is prepended to every name looked up in the checkpoint.
  WeightLoader(const Checkpoint* ckpt, kernels::Backend& backend, WeightStore& store, std::string prefix = "")
      : ckpt_(ckpt), backend_(backend), store_(store), prefix_(std::move(prefix)) {}
  // Waits for the uploads still in flight: their staging memory is freed with the loader.
  ~WeightLoader();
  WeightLoader(const WeightLoader&) = delete;
  WeightLoader& operator=(const WeightLoader&) = delete;
  // Threads reading the checkpoint (0: default_load_threads()), and the bytes one staging
  // buffer holds on a device backend; set before the first load.
  void set_load_threads(int threads) { load_threads_ = threads; }
  void set_staging_bytes(uint64_t bytes) { staging_bytes_ = bytes; }
  // Blocks until every weight loaded so far is in backend memory.
  void finish();
  // Without a checkpoint: fill every weight with N(0, 1/fan_in) instead of leaving it unset
  // (the benchmark, which needs real shapes, not real values).
  void fill_random(uint64_t seed) {
    random_ = true;
    seed_ = seed;
  }
  // How quantized tensors of this checkpoint are read (config.json's quantization_config).
  void set_quantization(const QuantConfig& quant) { quant_ = quant; }

  // Throws a model error naming the tensor and the file on a missing tensor, a shape that
  // differs from spec.shape, or an unsupported dtype. A weight stored quantized (FP8 with
  // `.weight_scale_inv`, or INT4 as `.weight_packed` + `.weight_scale` + `.weight_shape`) is
  // dequantized to its bf16 values; errors then name the missing or misshapen scale.
  kernels::Tensor load(const WeightSpec& spec);
  // The same into `dst` (a block of a larger allocation), which must have the slice's shape.
  void load_into(const WeightSpec& spec, kernels::Tensor dst);
  // Whole matrices `names` (each [rows, cols]) in the checkpoint's quantized form, as one stack
  // in backend memory (for backends that keep experts quantized). Returns a stack of format
  // None, having loaded nothing, when the checkpoint stores them unquantized. Without a
  // checkpoint (planning, the benchmark) the form is the one quantization_config announces.
  kernels::QuantStack load_quantized(const std::vector<std::string>& names, int64_t rows, int64_t cols);
  kernels::Backend& backend() const { return backend_; }
  // The row-stacked slices `parts` (all with the same columns) as one linear weight.
  LinearWeight load_linear(const std::vector<WeightSpec>& parts);
  // Backend memory owned by the store; the compute dtype unless fp32 is asked for.
  kernels::Tensor allocate(int64_t rows, int64_t cols, bool fp32 = false);
  DType compute_dtype() const { return backend_.compute_dtype(); }

 private:
  struct StoredFp8 {
    const SafetensorsFile* file;
    const TensorInfo* q;
    const SafetensorsFile* scale_file;
    const TensorInfo* scale;
  };
  struct StoredInt4 {
    const SafetensorsFile* file;
    const TensorInfo* packed;
    const SafetensorsFile* scale_file;
    const TensorInfo* scale;
  };
  // The stored parts of a quantized weight, after every check (shape, scale, dtype, config).
  StoredFp8 find_fp8(const std::vector<int64_t>& shape, const std::string& name, const std::string& base) const;
  StoredInt4 find_int4(const std::vector<int64_t>& shape, const std::string& base) const;
  // Adds what the pool reads of `file` to the checkpoint's weight fingerprint.
  ReaderPool::Observer observer_for(const SafetensorsFile& file) const;
  bool stored_fp8(const WeightSpec& spec) const;
  // The checkpoint holds spec's weight with spec.shape (dense, FP8 or INT4); checked before
  // allocating for it, so a config with a wrong size fails on the shape, not on memory.
  void check_stored_shape(const WeightSpec& spec) const;
  // Backend memory for the stack's bytes and scales, owned by the store; random values when
  // the loader fills weights at random.
  void allocate_quantized(kernels::QuantStack& stack);
  kernels::QuantStack load_fp8_slice(const WeightSpec& spec);
  // Fill staging_ with spec's slice of a quantized weight; false if `name` is not stored quantized.
  bool dequantize_slice(const WeightSpec& spec, const std::string& name);
  void dequantize_fp8(const WeightSpec& spec, const std::string& name, const std::string& base);
  void dequantize_int4(const WeightSpec& spec, const std::string& base);

  ReaderPool& pool();
  // Reads `block` of `file` into backend memory at `dst` (raw bytes, segments packed): on the
  // CPU straight into place; on a device through a ring of pinned buffers, each upload
  // overlapping the read that fills the next buffer.
  void read_raw(const SafetensorsFile& file, const ByteBlock& block, void* dst);
  // Where spec's slice of a row-major tensor lies in the file.
  static ByteBlock slice_block(const SafetensorsFile& file, const TensorInfo& info, int64_t full_cols,
                               int64_t row_begin, int64_t rows, int64_t col_begin, int64_t cols);

  struct StagingSlot {
    kernels::DeviceBuffer buffer;
    uint64_t ticket = 0;
  };

  const Checkpoint* ckpt_;
  kernels::Backend& backend_;
  WeightStore& store_;
  std::string prefix_;
  QuantConfig quant_;
  bool random_ = false;
  uint64_t seed_ = 0;
  std::vector<float> staging_;
  int load_threads_ = 0;
  uint64_t staging_bytes_ = 64ull << 20;
  std::unique_ptr<ReaderPool> pool_;
  std::vector<StagingSlot> ring_;
  size_t ring_next_ = 0;
};

}  // namespace e3::model
