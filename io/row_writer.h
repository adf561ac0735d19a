// The captured rows of a sample, written straight into the shard file at their dataset's offset
// by several threads at once. HDF5 writes a dataset from the calling thread only, one large copy
// into the page cache at a few GB/s; the rows of one state are written here in chunks, each
// interleaved (where the layout asks for it) and written by its own thread, the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace e3::io {

// `tokens` rows of `blocks.size()` captures. Row t of capture k starts at
// blocks[k] + t * row_stride; its `part_bytes` bytes from `part_offset` on are stored. The file
// holds them token-major: the K captures of token t side by side, [tokens, K, part_bytes].
struct RowSource {
  std::vector<const void*> blocks;
  size_t row_stride = 0;
  size_t part_offset = 0;
  size_t part_bytes = 0;
  uint64_t tokens = 0;
  uint64_t bytes() const { return tokens * blocks.size() * part_bytes; }
};

class ParallelRowWriter {
 public:
  // `chunk_bytes`: what one thread interleaves and writes at a time (large writes, and a buffer
  // that stays within the cache hierarchy's reach).
  explicit ParallelRowWriter(int threads, size_t chunk_bytes = size_t{8} << 20);
  // Writes src.bytes() bytes at `file_offset` of `fd`. Throws an output error naming `what` (and
  // the hint for a full disk where the file system is full).
  void write(int fd, uint64_t file_offset, const RowSource& src, const std::string& what);
  int threads() const { return threads_; }

 private:
  int threads_;
  size_t chunk_bytes_;
  std::vector<std::vector<unsigned char>> buffers_;  // one per thread, for interleaved chunks
};

// The bytes ParallelRowWriter::write stores, built in memory on one thread: the reference its
// tests compare with.
std::vector<unsigned char> interleave_rows(const RowSource& src);

}  // namespace e3::io
