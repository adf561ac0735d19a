// Safetensors checkpoints: a single file or shards listed by model.safetensors.index.json.
// Files are memory-mapped read-only and also held open for positioned reads (no readahead);
// a tensor's bytes are touched only when a slice of it is read, so a rank pages in only what
// it loads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/json_read.h"
#include "model/weight_fingerprint.h"

namespace e3::model {

enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };
size_t st_dtype_size(StDType t);
const char* st_dtype_name(StDType t);

struct TensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets inside the file's data section
  uint64_t end = 0;
  std::string shape_str() const;
  int64_t numel() const;
};

// A read-only memory map of a whole file (move-only).
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Asks the kernel to read [p, p + n) ahead, and to let go of it once used. The map is opened
  // for random access (no readahead), so only ranges asked for are ever read from disk.
  void will_need(const void* p, size_t n) const;
  void done_with(const void* p, size_t n) const;

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// One .safetensors file with a validated header: every offset lies inside the file, and
// every tensor's byte length matches its dtype and shape.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  // The first byte of a tensor's data.
  const uint8_t* data(const TensorInfo& t) const { return map_.data() + data_start_ + t.begin; }
  const MappedFile& map() const { return map_; }
  // For pread: a descriptor opened for random access (so the kernel reads exactly the ranges
  // asked for), and where a tensor's data starts in the file.
  int fd() const { return fd_.fd(); }
  uint64_t file_offset(const TensorInfo& t) const { return data_start_ + t.begin; }

 private:
  void read_entries(const nlohmann::json& header, uint64_t data_len);

  std::filesystem::path path_;
  MappedFile map_;
  RegularFile fd_;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

// All tensors of a checkpoint directory, by name.
class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  bool contains(const std::string& name) const;
  // Throws a model error naming the tensor and the file(s) searched.
  const TensorInfo& require(const std::string& name) const;
  const SafetensorsFile& file_of(const std::string& name) const;
  // A fingerprint of what the checkpoint holds: tensor names, dtypes and shapes.
  std::string fingerprint() const;
  std::vector<std::string> names() const;
  // Bytes of tensor data read from the checkpoint so far (by the weight loader).
  uint64_t bytes_read() const { return bytes_read_; }
  void count_read(uint64_t bytes) const { bytes_read_ += bytes; }
  // Bytes [file_offset, file_offset + n) of `file` as the loader read them, added to the
  // weight fingerprint; from any loader thread.
  void observe(const SafetensorsFile& file, uint64_t file_offset, const void* data, size_t n) const;
  // The whole of a small tensor, added once however many slices of it this process reads: the
  // block scales that two ranks' slices share would otherwise be counted unevenly.
  void observe_whole(const std::string& name) const;
  // The fingerprint of the bytes read so far by this process, to be summed over the ranks.
  const WeightFingerprint& weights() const { return *weights_; }

 private:
  struct Extent {
    uint64_t begin, end;  // file offsets of a tensor's data
    size_t ordinal;       // in name order
  };
  void index_extents();

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> owner_;  // tensor name -> index in files_
  std::string searched_;                 // for messages: the file name(s) looked in
  mutable uint64_t bytes_read_ = 0;
  std::vector<std::vector<Extent>> extents_;  // per file, by offset
  std::unique_ptr<WeightFingerprint> weights_;  // its own lock; the loader threads add to it
  mutable std::set<std::string> observed_whole_;
  mutable std::mutex observed_mu_;
};

}  // namespace e3::model
