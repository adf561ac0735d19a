// Reading a committed shard's samples back at the storage's speed: HDF5 (built without thread
// safety) is asked only where each dataset's bytes lie, one thread at a time; the bytes are
// then read with pread by as many threads as the storage wants, with no HDF5 type conversion.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/token_counts.h"

namespace e3::io {

// One dataset of a sample: its shape and where its bytes are in the shard file.
struct StoredDataset {
  std::string name;
  // How its elements are stored: I32, U8, F32, BF16, F16, or F8E4M3 (uint8 with the e4m3fn
  // `encoding` attribute).
  DType element = DType::F32;
  std::vector<uint64_t> dims;
  uint64_t offset = 0;  // in the file
  uint64_t bytes = 0;
};

struct StoredSample {
  int64_t index = 0;
  std::optional<std::string> id;
  int64_t tokens = 0;
  std::vector<StoredDataset> datasets;  // input_ids, loss_mask, then the states and their scales
  // The dataset named `name`, or null.
  const StoredDataset* find(const std::string& name) const;
};

// What a shard says about the states it holds (its file attributes).
struct ShardDescription {
  std::vector<int32_t> layer_ids;  // HF output_hidden_states index of each hidden_states slot
  std::string final_mode;          // post-norm | pre-norm | both | none
  std::string dtype;               // bf16 | fp16 | fp32 | fp8
  std::string model_type, model_path, run_fingerprint;
  int64_t hidden_size = 0, num_hidden_layers = 0;
};

struct ShardLayout {
  ShardDescription description;
  std::vector<StoredSample> samples;  // in sample index order
  // /token_counts; nullopt in a shard written before eagle3_extract counted tokens.
  std::optional<StoredTokenCounts> token_counts;
};

// Reads where everything of the shard at `path` lies. Makes HDF5 calls: callers on several
// threads hold one lock around it. Throws an output error naming the file and the dataset
// when a dataset is not stored in one uncompressed piece (as eagle3_extract writes them).
ShardLayout read_shard_layout(const std::filesystem::path& path);

// Reads the stored bytes of `d` from `fd` (the shard opened read-only) into `out`
// (d.bytes long). Thread-safe.
void read_stored_bytes(int fd, const StoredDataset& d, void* out, const std::string& where);

}  // namespace e3::io
