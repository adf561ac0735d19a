#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "core/json_read.h"

namespace e3::model {
namespace {

using nlohmann::json;

// A header larger than this is not a real checkpoint (HF's own reader caps it at 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

StDType parse_dtype(const std::string& s, const std::string& where) {
  static const std::pair<const char*, StDType> table[] = {
      {"F64", StDType::F64},     {"F32", StDType::F32},         {"F16", StDType::F16},
      {"BF16", StDType::BF16},   {"I64", StDType::I64},         {"I32", StDType::I32},
      {"I16", StDType::I16},     {"I8", StDType::I8},           {"U8", StDType::U8},
      {"BOOL", StDType::BOOL},   {"F8_E4M3", StDType::F8_E4M3}, {"F8_E5M2", StDType::F8_E5M2}};
  for (const auto& [name, t] : table)
    if (s == name) return t;
  E3_THROW(ErrorKind::Model, "{}: unknown dtype '{}'", where, clip(s));
}

}  // namespace

size_t st_dtype_size(StDType t) {
  switch (t) {
    case StDType::F64: case StDType::I64: return 8;
    case StDType::F32: case StDType::I32: return 4;
    case StDType::F16: case StDType::BF16: case StDType::I16: return 2;
    case StDType::I8: case StDType::U8: case StDType::BOOL: case StDType::F8_E4M3: case StDType::F8_E5M2: return 1;
  }
  return 0;
}

const char* st_dtype_name(StDType t) {
  switch (t) {
    case StDType::F64: return "F64";
    case StDType::F32: return "F32";
    case StDType::F16: return "F16";
    case StDType::BF16: return "BF16";
    case StDType::I64: return "I64";
    case StDType::I32: return "I32";
    case StDType::I16: return "I16";
    case StDType::I8: return "I8";
    case StDType::U8: return "U8";
    case StDType::BOOL: return "BOOL";
    case StDType::F8_E4M3: return "F8_E4M3";
    case StDType::F8_E5M2: return "F8_E5M2";
  }
  return "?";
}

std::string TensorInfo::shape_str() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

MappedFile::MappedFile(const std::filesystem::path& path) {
  // A FIFO or device is refused here, not mapped or waited on.
  const RegularFile file(path, ErrorKind::Model);
  size_ = file.size();
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    E3_REQUIRE(p != MAP_FAILED, ErrorKind::Model, "cannot map {}: {}", path.string(), std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
    // A rank reads a scattered subset (its TP slices, its experts): readahead would pull
    // other ranks' bytes from disk. will_need() asks for exactly what is read.
    ::madvise(p, size_, MADV_RANDOM);
  }
}

namespace {

// [p, p + n) widened to whole pages, as madvise wants.
std::pair<void*, size_t> page_span(const uint8_t* base, uint64_t size, const void* p, size_t n) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const auto end = std::min(reinterpret_cast<uintptr_t>(p) + n, reinterpret_cast<uintptr_t>(base) + size);
  return {reinterpret_cast<void*>(begin), end > begin ? end - begin : 0};
}

}  // namespace

void MappedFile::will_need(const void* p, size_t n) const {
  if (!data_ || n == 0) return;
  auto [start, len] = page_span(data_, size_, p, n);
  ::madvise(start, len, MADV_WILLNEED);
}

void MappedFile::done_with(const void* p, size_t n) const {
  if (!data_ || n == 0) return;
  // Only whole pages inside the range: a page shared with the next tensor may still be needed.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), map_(path), fd_(path, ErrorKind::Model) {
  const std::string where = path.string();
  // As for the map: a rank reads a scattered subset, so readahead would pull in other ranks'
  // bytes; each pread asks for exactly the bytes it needs.
  ::posix_fadvise(fd_.fd(), 0, 0, POSIX_FADV_RANDOM);
  E3_REQUIRE(map_.size() >= 8, ErrorKind::Model, "{}: truncated file ({} bytes, no header)", where, map_.size());
  uint64_t header_len = 0;
  std::memcpy(&header_len, map_.data(), 8);  // little-endian on every platform we build for
  E3_REQUIRE(header_len <= kMaxHeaderBytes, ErrorKind::Model, "{}: header length {} is not plausible", where,
             header_len);
  E3_REQUIRE(header_len <= map_.size() - 8, ErrorKind::Model,
             "{}: truncated file: header of {} bytes but only {} bytes follow", where, header_len,
             map_.size() - 8);
  data_start_ = 8 + header_len;
  const uint64_t data_len = map_.size() - data_start_;

  const json header = parse_json(
      std::string_view(reinterpret_cast<const char*>(map_.data()) + 8, header_len), ErrorKind::Model, where,
      "malformed header");
  E3_REQUIRE(header.is_object(), ErrorKind::Model, "{}: header is not a JSON object", where);
  try {
    read_entries(header, data_len);
  } catch (const json::exception& e) {
    E3_THROW(ErrorKind::Model, "{}: malformed header: {}", where, clip(e.what(), 200));
  }
}

void SafetensorsFile::read_entries(const json& header, uint64_t data_len) {
  const std::string where = path_.string();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string what = fmt::format("{}: tensor '{}'", where, clip(name));
    E3_REQUIRE(entry.is_object() && entry.contains("dtype") && entry["dtype"].is_string() &&
                   entry.contains("shape") && entry["shape"].is_array() && entry.contains("data_offsets") &&
                   entry["data_offsets"].is_array() && entry["data_offsets"].size() == 2,
               ErrorKind::Model, "{}: header entry needs dtype, shape and two data_offsets", what);
    TensorInfo t;
    t.name = name;
    t.dtype = parse_dtype(entry["dtype"].get<std::string>(), what);
    uint64_t elements = 1;
    for (const json& d : entry["shape"]) {
      // Unsigned past INT64_MAX would turn negative as a dimension.
      E3_REQUIRE(d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), ErrorKind::Model,
                 "{}: bad dimension {}", what, json_excerpt(d));
      t.shape.push_back(d.get<int64_t>());
      E3_REQUIRE(!__builtin_mul_overflow(elements, static_cast<uint64_t>(t.shape.back()), &elements),
                 ErrorKind::Model, "{}: shape {} is too large", what, json_excerpt(entry["shape"]));
    }
    const json& off = entry["data_offsets"];
    E3_REQUIRE(off[0].is_number_unsigned() && off[1].is_number_unsigned(), ErrorKind::Model,
               "{}: data_offsets must be non-negative integers", what);
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    E3_REQUIRE(t.begin <= t.end, ErrorKind::Model, "{}: data_offsets [{}, {}] are reversed", what, t.begin, t.end);
    E3_REQUIRE(t.end <= data_len, ErrorKind::Model,
               "{}: data_offsets [{}, {}] run past the end of the data ({} bytes): truncated file?", what,
               t.begin, t.end, data_len);
    uint64_t bytes = 0;
    E3_REQUIRE(!__builtin_mul_overflow(elements, st_dtype_size(t.dtype), &bytes), ErrorKind::Model,
               "{}: shape {} is too large", what, t.shape_str());
    E3_REQUIRE(t.end - t.begin == bytes, ErrorKind::Model,
               "{}: {} bytes for shape {} of {}", what, t.end - t.begin, t.shape_str(), st_dtype_name(t.dtype));
    ranges.emplace_back(t.begin, t.end);
    tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    E3_REQUIRE(ranges[i].first >= ranges[i - 1].second, ErrorKind::Model,
               "{}: tensor data ranges overlap at byte {}", where, ranges[i].first);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Checkpoint::Checkpoint(const std::filesystem::path& dir) : dir_(dir) {
  const auto index_path = dir / "model.safetensors.index.json";
  const auto single_path = dir / "model.safetensors";
  if (std::filesystem::exists(index_path)) {
    const json index = read_json_file(index_path, ErrorKind::Model);
    E3_REQUIRE(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
               ErrorKind::Model, "{}: no weight_map object", index_path.string());
    std::map<std::string, size_t> file_ids;
    for (const auto& [name, file] : index["weight_map"].items()) {
      E3_REQUIRE(file.is_string(), ErrorKind::Model, "{}: weight_map['{}'] is not a file name",
                 index_path.string(), clip(name));
      const std::string fname = file.get<std::string>();
      // The name, not where it resolves, is checked: a shard may be a symlink (the HF hub cache
      // links snapshots/<rev>/*.safetensors to ../../blobs/<hash>), but the index may not reach
      // outside the directory itself.
      E3_REQUIRE(is_plain_file_name(fname), ErrorKind::Model,
                 "{}: weight_map['{}'] is '{}', not a file name in the model directory (no '/' or '..')",
                 index_path.string(), clip(name), clip(fname));
      auto it = file_ids.find(fname);
      if (it == file_ids.end()) {
        const auto shard = dir / fname;
        E3_REQUIRE(std::filesystem::exists(shard), ErrorKind::Model,
                   "{}: shard '{}' (holding tensor '{}') does not exist", index_path.string(), clip(fname),
                   clip(name));
        files_.push_back(std::make_unique<SafetensorsFile>(shard));
        it = file_ids.emplace(fname, files_.size() - 1).first;
      }
      E3_REQUIRE(files_[it->second]->find(name), ErrorKind::Model,
                 "{}: tensor '{}' is listed in the index but missing from {}", index_path.string(), clip(name),
                 files_[it->second]->path().string());
      owner_[name] = it->second;
    }
    searched_ = index_path.string();
  } else {
    E3_REQUIRE(std::filesystem::exists(single_path), ErrorKind::Model,
               "{}: no model.safetensors or model.safetensors.index.json", dir.string());
    files_.push_back(std::make_unique<SafetensorsFile>(single_path));
    for (const auto& [name, info] : files_[0]->tensors()) owner_[name] = 0;
    searched_ = single_path.string();
  }
  index_extents();
}

void Checkpoint::index_extents() {
  extents_.assign(files_.size(), {});
  std::vector<uint64_t> bytes;
  for (const auto& [name, idx] : owner_) {
    const SafetensorsFile& f = *files_[idx];
    const TensorInfo& t = *f.find(name);
    extents_[idx].push_back({f.file_offset(t), f.file_offset(t) + (t.end - t.begin), bytes.size()});
    bytes.push_back(t.end - t.begin);
  }
  for (auto& e : extents_)
    std::sort(e.begin(), e.end(), [](const Extent& a, const Extent& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  weights_ = std::make_unique<WeightFingerprint>(std::move(bytes));
}

void Checkpoint::observe_whole(const std::string& name) const {
  {
    std::lock_guard lock(observed_mu_);
    if (!observed_whole_.insert(name).second) return;
  }
  const SafetensorsFile& f = file_of(name);
  const TensorInfo& t = require(name);
  observe(f, f.file_offset(t), f.data(t), t.end - t.begin);
}

void Checkpoint::observe(const SafetensorsFile& file, uint64_t file_offset, const void* data, size_t n) const {
  if (n == 0) return;
  size_t fi = 0;
  while (fi < files_.size() && files_[fi].get() != &file) ++fi;
  E3_REQUIRE(fi < files_.size(), ErrorKind::Internal, "{}: not a file of this checkpoint", file.path().string());
  const auto& ext = extents_[fi];
  auto it = std::upper_bound(ext.begin(), ext.end(), file_offset,
                             [](uint64_t off, const Extent& e) { return off < e.begin; });
  E3_REQUIRE(it != ext.begin() && file_offset + n <= std::prev(it)->end, ErrorKind::Internal,
             "{}: bytes {}..{} read are not inside one tensor", file.path().string(), file_offset, file_offset + n);
  --it;
  weights_->add(it->ordinal, file_offset - it->begin, data, n);
}

bool Checkpoint::contains(const std::string& name) const { return owner_.count(name) != 0; }

const TensorInfo& Checkpoint::require(const std::string& name) const {
  auto it = owner_.find(name);
  E3_REQUIRE(it != owner_.end(), ErrorKind::Model, "tensor '{}' not found in {}", name, searched_);
  return *files_[it->second]->find(name);
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  require(name);
  return *files_[owner_.at(name)];
}

std::string Checkpoint::fingerprint() const {
  Fnv1a h;
  for (const auto& [name, idx] : owner_) {
    const TensorInfo& t = *files_[idx]->find(name);
    h.update(name).update(st_dtype_name(t.dtype)).update(t.shape_str());
  }
  return h.hex();
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(owner_.size());
  for (const auto& [name, idx] : owner_) out.push_back(name);
  return out;
}

}  // namespace e3::model
