#include "io/file_io.h"

#include <cerrno>
#include <cstring>

namespace e3::io {

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
