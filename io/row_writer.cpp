#include "io/row_writer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "io/hdf5.h"

namespace e3::io {
namespace {

// The chunk's bytes: whole rows as they are, or the captures of each token side by side.
const unsigned char* chunk_bytes_of(const RowSource& src, uint64_t t0, uint64_t t1, std::vector<unsigned char>& buf) {
  const size_t K = src.blocks.size();
  if (K == 1 && src.part_offset == 0 && src.part_bytes == src.row_stride)
    return static_cast<const unsigned char*>(src.blocks.front()) + t0 * src.row_stride;
  buf.resize((t1 - t0) * K * src.part_bytes);
  unsigned char* out = buf.data();
  for (uint64_t t = t0; t < t1; ++t)
    for (size_t k = 0; k < K; ++k, out += src.part_bytes)
      std::memcpy(out, static_cast<const unsigned char*>(src.blocks[k]) + t * src.row_stride + src.part_offset,
                  src.part_bytes);
  return buf.data();
}

// 0, or the errno of the write that failed.
int write_all(int fd, const unsigned char* data, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    data += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return 0;
}

}  // namespace

ParallelRowWriter::ParallelRowWriter(int threads, size_t chunk_bytes)
    : threads_(std::max(1, threads)), chunk_bytes_(std::max<size_t>(chunk_bytes, 1)),
      buffers_(static_cast<size_t>(threads_)) {}

void ParallelRowWriter::write(int fd, uint64_t file_offset, const RowSource& src, const std::string& what) {
  const uint64_t token_bytes = src.blocks.size() * src.part_bytes;
  if (src.tokens == 0 || token_bytes == 0) return;
  const uint64_t per_chunk = std::max<uint64_t>(1, chunk_bytes_ / token_bytes);
  const auto chunks = static_cast<int64_t>((src.tokens + per_chunk - 1) / per_chunk);
  std::atomic<int> failed_errno{0};
  std::atomic<uint64_t> failed_at{0};
  const auto write_chunk = [&](int64_t c, std::vector<unsigned char>& buf) {
    if (failed_errno.load(std::memory_order_relaxed) != 0) return;
    const uint64_t t0 = static_cast<uint64_t>(c) * per_chunk, t1 = std::min(src.tokens, t0 + per_chunk);
    const int err = write_all(fd, chunk_bytes_of(src, t0, t1, buf), (t1 - t0) * token_bytes,
                              file_offset + t0 * token_bytes);
    int none = 0;
    if (err != 0 && failed_errno.compare_exchange_strong(none, err)) failed_at = file_offset + t0 * token_bytes;
  };
  const int threads = static_cast<int>(std::min<int64_t>(threads_, chunks));
  if (threads <= 1) {
    for (int64_t c = 0; c < chunks; ++c) write_chunk(c, buffers_.front());
  } else {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) write_chunk(c, buffers_[static_cast<size_t>(omp_get_thread_num())]);
  }
  const int err = failed_errno.load();
  if (err == ENOSPC || err == EDQUOT)
    E3_THROW(ErrorKind::Output, "writing {} at byte {}: {} {}", what, failed_at.load(), std::strerror(err),
             kDiskFullHint);
  E3_REQUIRE(err == 0, ErrorKind::Output, "writing {} at byte {}: {}", what, failed_at.load(), std::strerror(err));
}

std::vector<unsigned char> interleave_rows(const RowSource& src) {
  std::vector<unsigned char> out;
  out.reserve(src.bytes());
  for (uint64_t t = 0; t < src.tokens; ++t)
    for (const void* block : src.blocks) {
      const auto* p = static_cast<const unsigned char*>(block) + t * src.row_stride + src.part_offset;
      out.insert(out.end(), p, p + src.part_bytes);
    }
  return out;
}

}  // namespace e3::io
