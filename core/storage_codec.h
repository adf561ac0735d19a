// How captured states are stored, one codec per --dtype (fp32, bf16, fp16, fp8): the bytes of a
// stored row, encoding float rows into them and decoding them back, the check that no stored
// row holds a NaN or an infinity, and the datasets of a shard that hold a state. It is chosen
// once from the storage dtype; the capture, the writer, verify and export all ask it, so the
// fp8 row layout and the decoders are written down in one place. io/ does the HDF5 calls from
// the layout described here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace e3 {

// The `encoding` attribute of the uint8 datasets that hold e4m3fn codes.
inline constexpr const char* kE4m3fnEncoding = "float8_e4m3fn";

// What one dataset of a stored state holds, and so what a valid shard never holds in it.
enum class PartKind {
  Values,     // H values a row in a float type (fp32, bf16, fp16): never NaN or infinity
  E4m3Codes,  // H e4m3fn codes a row, each to be multiplied by its row's scale: never the NaN code
  RowScale,   // one float32 scale a row: finite and not negative
};

// One dataset a state is stored as: named STATE + suffix, of shape [rows..., H] for a part of
// H values a row and [rows...] for a part of one value a row, where rows is [T, K] for
// hidden_states and [T] for a final state. A stored row is its parts' bytes side by side,
// in the codec's order.
struct StoredPart {
  PartKind kind;
  const char* suffix;    // "" for the dataset named after the state itself
  DType element;         // F32, BF16, F16, or F8E4M3 (uint8 in the file, with `encoding`)
  const char* encoding;  // the dataset's `encoding` attribute, or nullptr for none

  bool per_column() const { return kind != PartKind::RowScale; }
  // Bytes this part takes of one row of H values.
  size_t row_bytes(int64_t H) const { return (per_column() ? static_cast<size_t>(H) : 1) * dtype_size(element); }
  std::vector<uint64_t> dims(std::vector<uint64_t> rows, int64_t H) const;
  // The index of the first of n stored elements of this part that a valid shard cannot hold
  // (see PartKind), or n. Runs at memory speed on valid data.
  size_t first_invalid(const void* data, size_t n) const;
  // Stored element i as a float (an e4m3fn code before its row's scale), for messages.
  float value(const void* data, size_t i) const;
};

// Rows in a storage dtype, wherever their parts lie: as the capture's staging buffers and the
// writer hold them (a row's parts side by side, row after row) or as a shard holds them (each
// part in a dataset of its own).
struct StoredRows {
  static constexpr size_t kMaxParts = 2;
  std::array<const uint8_t*, kMaxParts> part{};  // part p of the first row
  std::array<size_t, kMaxParts> stride{};         // bytes from one row's part p to the next row's
  size_t count = 0;
};

// The first NaN or infinity among stored rows.
struct NonfiniteValue {
  size_t row = 0;
  int64_t column = 0;
  float value = 0;  // NaN, or an infinity
};

// How the capture brings a state into the storage dtype on the device.
enum class DeviceEncode {
  Convert,   // Backend::copy into a view of the storage dtype
  E4m3Rows,  // Backend::encode_e4m3_rows: codes and scale a row (core/e4m3.h)
};

class StorageCodec {
 public:
  virtual ~StorageCodec() = default;
  StorageCodec(const StorageCodec&) = delete;
  StorageCodec& operator=(const StorageCodec&) = delete;

  DType dtype() const { return dtype_; }
  const char* name() const { return dtype_name(dtype_); }  // the --dtype value and the shard's `dtype`
  // The datasets a state is stored as, in row order.
  const std::vector<StoredPart>& parts() const { return parts_; }
  // Bytes of one stored row of H values: the staging buffers, the writer and every size
  // estimate use this.
  size_t row_bytes(int64_t H) const;
  DeviceEncode device_encode() const { return device_encode_; }

  // `count` rows laid out as encode() writes them, row_bytes(H) apart.
  StoredRows staged(const void* rows, size_t count, int64_t H) const;
  // `count` rows of a shard: parts[p] holds part p of every row, one after another.
  StoredRows split(std::span<const void* const> parts, size_t count, int64_t H) const;

  // Encodes `rows` rows of H floats (x, row-major) into out, rows * row_bytes(H) bytes.
  virtual void encode(const float* x, size_t rows, int64_t H, void* out) const = 0;
  // Decodes to rows.count * H floats.
  virtual void decode(const StoredRows& rows, int64_t H, float* out) const = 0;
  // Decodes to bf16 bits, rounded to nearest even from the decoded float (bf16: the bits as stored).
  virtual void decode_bf16(const StoredRows& rows, int64_t H, uint16_t* out) const = 0;
  // The first NaN or infinity the rows were encoded from, if any. fp8 cannot store one: its
  // row says which it was and in which column (core/e4m3.h). Runs at memory speed on finite data.
  virtual std::optional<NonfiniteValue> first_nonfinite(const StoredRows& rows, int64_t H) const = 0;

 protected:
  StorageCodec(DType dtype, std::vector<StoredPart> parts, DeviceEncode device_encode)
      : dtype_(dtype), parts_(std::move(parts)), device_encode_(device_encode) {}

 private:
  DType dtype_;
  std::vector<StoredPart> parts_;
  DeviceEncode device_encode_;
};

// The codec of a storage dtype (F32, BF16, F16, F8E4M3); an internal error for another dtype.
const StorageCodec& storage_codec(DType dtype);

namespace detail {
// The fp8 codec's decode_bf16 of one row: H e4m3fn codes times `scale`, as bf16 bits, with the
// widest vectors this CPU has, or (`portable`) with those of any x86-64; exposed so that tests
// compare both with the table of e4m3fn_to_float.
void decode_e4m3_row_bf16(const uint8_t* codes, float scale, int64_t H, uint16_t* out, bool portable = false);
}  // namespace detail
// The codec whose name() is `name` (a shard's or a manifest's `dtype`; kStorageDTypeNames), or null.
const StorageCodec* storage_codec_named(std::string_view name);

}  // namespace e3
