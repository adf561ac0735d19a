// Parallel positioned reads of checkpoint bytes. A loader asks for a block of a tensor (a run
// of equally spaced segments: whole rows, or the same columns of consecutive rows) and the
// pool's threads pread exactly those bytes, in chunks, straight into the destination, or
// through a small buffer when the values are converted to float on the way.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"

namespace e3::model {

// `count` segments of `seg` bytes, the first at file offset `offset`, each `stride` bytes
// after the previous one. Segments land back to back in the destination.
struct ByteBlock {
  uint64_t offset = 0;
  uint64_t stride = 0;
  uint64_t seg = 0;
  int64_t count = 0;
  uint64_t bytes() const { return seg * static_cast<uint64_t>(count); }
};

// Threads that run a batch of tasks and wait for all of them; the first error is rethrown in
// the calling thread once the batch has ended (no task is left writing into a buffer the
// caller is about to free).
class ReaderPool {
 public:
  // threads <= 0: default_load_threads().
  explicit ReaderPool(int threads, uint64_t chunk_bytes = 8ull << 20);
  ~ReaderPool();
  ReaderPool(const ReaderPool&) = delete;
  ReaderPool& operator=(const ReaderPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  uint64_t chunk_bytes() const { return chunk_; }

  // Reads `block` of the open file `fd` (named `path` in errors) into `dst`: raw bytes, or,
  // with to_float, elements of `src` converted to float (dst then holds block.bytes() /
  // dtype_size(src) floats). A short read (the file shrank) is a model error naming the file.
  // `observe`, when given, sees every range read (file offset, bytes, length) on the thread
  // that read it, while the bytes are still in its cache.
  using Observer = std::function<void(uint64_t, const uint8_t*, size_t)>;
  void read(int fd, const std::string& path, const ByteBlock& block, void* dst, bool to_float = false,
            DType src = DType::U8, const Observer* observe = nullptr);

  // Runs fn(0) .. fn(n - 1) on the pool's threads and the caller's.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

 private:
  void work();
  void run_tasks();

  uint64_t chunk_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t next_ = 0, total_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

// Threads for reading weights when none are asked for: enough concurrent readers to draw a
// parallel file system's bandwidth, never more than the cores this process may use.
int default_load_threads();

}  // namespace e3::model
