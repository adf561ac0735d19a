// File-descriptor helpers shared by the readers of input and output files.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/error.h"

namespace e3::io {

// An open file descriptor, closed on destruction; movable, not copyable.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&&) = delete;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A whole file mapped read-only (the page cache's pages themselves), unmapped with the object;
// empty where the file is empty or cannot be mapped. A file cut shorter while mapped makes the
// reads of its lost pages fault (SIGBUS): map only files no one rewrites, such as committed
// shards. Move-only.
class MappedFile {
 public:
  MappedFile() = default;
  static MappedFile map(int fd, uint64_t size);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

// Reads exactly `n` bytes at `offset` (retrying short reads and EINTR); a read error or the end
// of the file first throws a `kind` error naming `where` and the offset.
void pread_exact(int fd, void* out, size_t n, uint64_t offset, ErrorKind kind, const std::string& where);

}  // namespace e3::io
