// What the exporters' file writers (safetensors, torch.save) take: borrowed tensors, and the
// temporary file both publish by renaming. The writers never copy tensor data; they write it
// from the caller's buffer, or have the caller make it where it is written (TensorFill).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/page_memory.h"

namespace e3::io {

enum class TensorElement { BF16, F16, F32, I64, I32, U8, Bool };

// Makes a tensor's bytes where the writer puts them: fill(offset, dst, n) writes the tensor's
// bytes [offset, offset + n) to dst. The writers call it in file order, in pieces of at most
// TempFile::kFillPiece bytes, straight into the O_DIRECT buffer when there is one. For a tensor
// the caller would otherwise build whole (states decoded from fp8, rows rearranged) only for the
// writer to copy it: one pass over memory instead of three.
using TensorFill = std::function<void(uint64_t offset, unsigned char* dst, size_t n)>;

struct TensorRef {                 // borrowed: the writer never copies the data
  std::string name;
  TensorElement element;
  std::vector<int64_t> shape;
  const void* data;                // little-endian, C order, product(shape) * element size bytes
  TensorFill fill = {};            // when set, the bytes come from it and `data` is unused
};

size_t element_size(TensorElement element);
// safetensors' dtype name: "BF16", "F16", "F32", "I64", "I32", "U8", "BOOL".
const char* safetensors_dtype(TensorElement element);

// product(shape) * element size. Throws ErrorKind::Internal (a caller's bug) on a negative
// dimension, a size that overflows, or null data with a non-zero size; `where` names the file.
uint64_t tensor_bytes(const TensorRef& tensor, const std::filesystem::path& where);

// The temporary name of a file being written: DIR/.NAME.partial for DIR/NAME. Hidden and with a
// suffix no trainer reads, so that no glob of finished files (`*.pt`, `*.ckpt`, `*.safetensors`)
// takes it for one, and no finished file's name (never starting with '.') is one.
std::filesystem::path temporary_path(const std::filesystem::path& final_path);
// Whether a file name is such a temporary name, or the PATH.tmp.<pid> of earlier versions.
bool is_temporary_name(const std::string& file_name);

// The staging memory of a TempFile written past the page cache (O_DIRECT): block-aligned, reused
// from file to file by the thread that owns it. Writes through the page cache and its writeback
// ran at a fraction of the disk's speed where measured (issue 21: 381 MB/s against 2.6 GB/s for
// dd oflag=direct on one machine's disk), so the exporter's sample files go around it. From
// 2 MiB up it is in huge pages (io/page_memory.h): O_DIRECT writes from 4 KiB pages ran at a
// third of the rate from 2 MiB pages on the development machine.
class DirectBuffer {
 public:
  static constexpr size_t kAlign = 4096;  // the logical block size O_DIRECT needs, at most, on Linux
  explicit DirectBuffer(size_t bytes = size_t{32} << 20);
  ~DirectBuffer();
  DirectBuffer(const DirectBuffer&) = delete;
  DirectBuffer& operator=(const DirectBuffer&) = delete;
  unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  PageMemory pages_;  // the memory from 2 MiB up, else posix_memalign's
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// A file written under temporary_path(PATH) and renamed to PATH by commit(); destroying it
// uncommitted removes the temporary file, so a failed write leaves nothing behind. Every
// failure throws ErrorKind::Output naming PATH.
class TempFile {
 public:
  // With `direct`, the file is written with O_DIRECT through that buffer (in its size's pieces,
  // the last one padded to a block and the file cut back to its size), and where the file
  // system refuses O_DIRECT (tmpfs), through the page cache as without it. The bytes are the same.
  explicit TempFile(const std::filesystem::path& final_path, DirectBuffer* direct = nullptr);
  ~TempFile();
  TempFile(TempFile&& other) noexcept;
  TempFile& operator=(TempFile&&) = delete;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // Appends `n` bytes. Small pieces (headers) gather in a buffer; large ones go to write()
  // straight from `data`, after the buffer.
  void write(const void* data, size_t n);
  // The largest piece write_filled asks for: small enough to stay in a core's cache between the
  // fill and a checksum over the same bytes (torch.save's CRC-32).
  static constexpr size_t kFillPiece = size_t{1} << 20;
  // Appends `n` bytes that `produce(dst, k)` writes piece by piece, in order, straight into the
  // O_DIRECT buffer (or a staging piece without one).
  void write_filled(uint64_t n, const std::function<void(unsigned char* dst, size_t k)>& produce);
  // Appends a tensor's `bytes` bytes (tensor_bytes): from its data, or made by its fill.
  void write_tensor(const TensorRef& tensor, uint64_t bytes);
  // Overwrites `n` bytes at `offset`, already appended.
  void write_at(uint64_t offset, const void* data, size_t n);
  // Bytes appended so far.
  uint64_t size() const { return size_; }
  // Writes out what is staged and closes (reporting a deferred write error); the file keeps its
  // temporary name until commit(). No more writes after it.
  void close();
  // Closes (if still open) and renames to the final path.
  void commit();

  const std::filesystem::path& final_path() const { return final_path_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail(const char* what, int err);
  void flush();
  void write_fd(const void* data, size_t n);
  void pwrite_fd(const void* data, size_t n, uint64_t offset);
  // O_DIRECT: the staged bytes out, `pad` zeros to a whole block after them.
  void flush_direct(bool last);
  void write_at_direct(uint64_t offset, const void* data, size_t n);

  std::filesystem::path final_path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::vector<unsigned char> pending_;  // the last size_ - pending_.size() .. size_ bytes
  std::unique_ptr<unsigned char[]> fill_piece_;  // kFillPiece bytes, never zeroed: write_filled's without O_DIRECT
  bool committed_ = false;
  DirectBuffer* direct_ = nullptr;  // set while the file is open with O_DIRECT
  size_t staged_ = 0;               // bytes in direct_ not yet written: file bytes size_ - staged_ .. size_
};

}  // namespace e3::io
