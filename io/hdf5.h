// Thin RAII over the HDF5 C API, the bf16/fp16 file types, and attribute helpers.
// HDF5's automatic error printing is turned off; failures become exceptions carrying the
// library's own error stack text.
#pragma once

#include <hdf5.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/storage_codec.h"

namespace e3::io {

// Appended to every out-of-space error.
inline constexpr const char* kDiskFullHint =
    "[the file system is full: free space or use another --out; committed shards are kept, rerun to resume]";

// The innermost messages of HDF5's current error stack, joined.
std::string hdf5_error_text();
// Stops HDF5 from printing its error stack to stderr (we report it ourselves).
void silence_hdf5_errors();

// An owned HDF5 identifier (file, group, dataset, dataspace, type, attribute, property list).
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~H5Id() { reset(); }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  // Closes now and reports failure (a file's close is where its last bytes are written).
  void close();

 private:
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// File access properties for every file we open: locking used where the file system offers it.
H5Id file_access_list();
// The same for the files we create: HDF5 1.10's file format (v3 superblock, v2 object headers,
// new-style groups), whose metadata all carry checksums, so that a damaged file is refused
// where the 1.8 format's unchecked structures would be followed. Fixed at 1.10 on both bounds:
// every HDF5 (and h5py) from 1.10 on reads it, whichever library wrote it.
H5Id file_create_access_list();

// The file type for a storage dtype. bf16 is a custom 16-bit float: sign bit 15, exponent
// bits 7..14 (bias 127), mantissa bits 0..6; HDF5 converts it to and from native float.
H5Id file_type_for(DType dtype);
// Which storage dtype an HDF5 type is, if any (fp32, bf16 or fp16 as written above; uint8 for fp8).
std::optional<DType> storage_dtype_of(hid_t type);
// Whether dataset `ds` of type `type` is stored as `part` says: its element type, and for an
// encoded part (fp8 codes) a one-byte integer type with the part's `encoding` attribute.
bool stored_as(hid_t ds, hid_t type, const StoredPart& part);

// ---- reading stored values back without HDF5's (slow, soft-float) type conversion

// The stored bits are little-endian; decoding them in place (core/storage_codec.h) assumes a
// host of that order.
static_assert(std::endian::native == std::endian::little, "shards are read as little-endian integers");

// Where a dataset's bytes lie in its file when stored contiguously (the shard writer's
// layout); nullopt for chunked or not yet allocated storage.
std::optional<uint64_t> contiguous_offset(hid_t dataset);
// Reads a whole dataset with its own stored type as the memory type: the bits as they are.
void read_stored(hid_t dataset, void* out, const std::string& where);

// Throws a `kind` error naming `path` unless it is a regular file (a symlink, FIFO or
// directory named like a shard must not be opened: opening a FIFO blocks).
void require_regular_file(const std::filesystem::path& path, ErrorKind kind);

// Names of the links in a group, in name order.
std::vector<std::string> list_links(hid_t group, const std::string& where);

void write_attr(hid_t obj, const char* name, const std::string& value);
void write_attr(hid_t obj, const char* name, int64_t value);
void write_attr(hid_t obj, const char* name, const std::vector<int32_t>& values);
// A 1-D array of fixed-length strings (h5dump prints them one per line).
void write_attr(hid_t obj, const char* name, const std::vector<std::string>& values);

std::optional<std::string> read_attr_string(hid_t obj, const char* name);
std::optional<int64_t> read_attr_int(hid_t obj, const char* name);
std::optional<std::vector<int32_t>> read_attr_ints(hid_t obj, const char* name);
std::optional<std::vector<std::string>> read_attr_strings(hid_t obj, const char* name);

}  // namespace e3::io

// Checks an HDF5 call that returns a negative value on failure.
#define E3_H5(call, ...)                                                                      \
  [&]() {                                                                                     \
    auto e3_h5_rc_ = (call);                                                                  \
    if (e3_h5_rc_ < 0)                                                                        \
      E3_THROW(::e3::ErrorKind::Output, "{}: {}", ::fmt::format(__VA_ARGS__),                 \
               ::e3::io::hdf5_error_text());                                                  \
    return e3_h5_rc_;                                                                         \
  }()
