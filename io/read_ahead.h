// A file read front to back past the page cache, a few chunks ahead of its reader.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "io/file_io.h"
#include "io/page_memory.h"

namespace e3::io {

// The share of the first `size` bytes of the file open as `fd` that lie in the page cache, 0 to 1
// (mincore over a mapping; 1 where that cannot be told, so that callers keep the page cache).
double resident_share(int fd, uint64_t size);

// Reads the file open as `fd` (its size `size`) with O_DIRECT, chunk after chunk, on a thread of
// its own that keeps up to `depth` chunks ahead, so that the disk reads while the caller hashes
// and checks the bytes before. Where the measurements were made (issue 21), reading a cold shard
// through the page cache ran at 0.47-0.52 GB/s and dd iflag=direct at 1.0-2.0 GB/s on the same
// virtio disk; and the caller's own work left the disk idle in between.
//
// read() copies any bytes out: those at or past the last read come from the chunks read ahead,
// those before them (rare: an overlapping dataset read again) from pread on `fd`. A failed read
// is reported by the read() that needs its bytes, naming `where`.
class ReadAhead {
 public:
  static constexpr size_t kAlign = 4096;  // O_DIRECT's alignment of memory, offsets and lengths, at most

  // nullptr where the file system refuses O_DIRECT (tmpfs did before Linux 6.6) or the file
  // cannot be opened again for it: then the page cache is the way.
  static std::unique_ptr<ReadAhead> open(int fd, uint64_t size, std::string where, ErrorKind kind,
                                         size_t chunk = size_t{16} << 20, size_t depth = 4);
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  void read(void* to, size_t n, uint64_t at);

 private:
  ReadAhead(Fd direct, int fd, uint64_t size, std::string where, ErrorKind kind, size_t chunk, size_t depth);
  void run();
  unsigned char* slot(uint64_t k) const { return memory_.data() + (k % depth_) * chunk_; }

  Fd direct_;        // the file again, with O_DIRECT
  const int fd_;     // the caller's, for bytes behind the window
  const uint64_t size_;
  const std::string where_;
  const ErrorKind kind_;
  const size_t chunk_, depth_;
  const uint64_t chunks_;  // ceil(size_ / chunk_)
  PageMemory memory_;  // depth_ slots of chunk_ bytes

  std::mutex m_;
  std::condition_variable cv_;
  uint64_t first_ = 0;   // the oldest chunk kept (the ones before it are released)
  uint64_t filled_ = 0;  // the chunks before it are read
  bool stop_ = false;
  std::exception_ptr error_;  // the read of chunk filled_ failed, at byte error_at_
  uint64_t error_at_ = 0;
  std::thread thread_;   // last: started once everything it uses is set
};

}  // namespace e3::io
