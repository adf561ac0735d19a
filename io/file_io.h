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

// Reads exactly `n` bytes at `offset` (retrying short reads and EINTR); a read error or the end
// of the file first throws a `kind` error naming `where` and the offset.
void pread_exact(int fd, void* out, size_t n, uint64_t offset, ErrorKind kind, const std::string& where);

}  // namespace e3::io
