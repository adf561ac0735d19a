#include "io/file_io.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace e3::io {

MappedFile MappedFile::map(int fd, uint64_t size) {
  MappedFile m;
  if (size == 0) return m;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return m;
  ::madvise(p, size, MADV_SEQUENTIAL);  // pages not in the cache yet are read well ahead of the reader
  m.data_ = static_cast<const unsigned char*>(p);
  m.size_ = size;
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void pread_exact(int fd, void* out, size_t n, uint64_t offset, ErrorKind kind, const std::string& where) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    E3_REQUIRE(got > 0, kind, "{}: reading at byte {}: {}", where, offset,
               got == 0 ? "unexpected end of file" : std::strerror(errno));
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

}  // namespace e3::io
