// A file read front to back past the page cache, a few chunks ahead of its reader.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/hash.h"
#include "io/file_io.h"

namespace e3::io {

// The share of the first `size` bytes of the file open as `fd` that lie in the page cache, 0 to 1
// (mincore over a mapping; 1 where that cannot be told, so that callers keep the page cache).
double resident_share(int fd, uint64_t size);

// Reads the file open as `fd` (its size `size`) chunk after chunk, on a thread of its own that
// keeps up to `depth` chunks ahead, so that the disk reads while the caller checks the bytes
// before; and, given a hash, hashes every byte of the file in order there too, so that the
// caller's thread neither hashes nor reads the bytes it does not use. With `direct` it reads
// around the page cache (O_DIRECT): where the measurements were made (issue 21), reading a cold
// shard through the page cache ran at 0.47-0.52 GB/s and dd iflag=direct at 1.0-2.0 GB/s on the
// same virtio disk. A file already in the page cache is read from there (`direct` false).
//
// read() copies any bytes out, from one thread: those at or past the last read come from the
// chunks read ahead, those before them (rare: an overlapping dataset read again) from pread on
// `fd`. A failed read is reported by the read() (or finish()) that needs its bytes, naming `where`.
// What a ReadAhead's thread hashes, and where it adds its time.
struct ReadAheadHashing {
  ContentHash* hash = nullptr;               // every byte of the file, in order; null: none
  std::atomic<uint64_t>* read_ns = nullptr;  // the thread's time reading, if timed
  std::atomic<uint64_t>* hash_ns = nullptr;  // ... and hashing
};

class ReadAhead {
 public:
  static constexpr size_t kAlign = 4096;  // O_DIRECT's alignment of memory, offsets and lengths, at most

  using Hashing = ReadAheadHashing;
  // With `direct`, nullptr where the file system refuses O_DIRECT or the file cannot be opened
  // again for it: then the page cache is the way (open it without `direct`).
  static std::unique_ptr<ReadAhead> open(int fd, uint64_t size, std::string where, ErrorKind kind, bool direct,
                                         Hashing hashing = {}, size_t chunk = size_t{16} << 20, size_t depth = 4);
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  void read(void* to, size_t n, uint64_t at);
  // With a hash: waits until the thread has read and hashed the whole file (the reads done:
  // read() is not called after it); a read that failed is thrown here.
  void finish();
  uint64_t size() const { return size_; }

 private:
  ReadAhead(Fd direct, int fd, uint64_t size, std::string where, ErrorKind kind, Hashing hashing, size_t chunk,
            size_t depth);
  void run();
  unsigned char* slot(uint64_t k) const { return memory_.get() + (k % depth_) * chunk_; }

  struct FreeAligned {
    void operator()(unsigned char* p) const;
  };

  Fd direct_;        // the file again, with O_DIRECT (-1: the chunks are read from fd_)
  const int fd_;     // the caller's, for bytes behind the window
  const Hashing hashing_;
  const uint64_t size_;
  const std::string where_;
  const ErrorKind kind_;
  const size_t chunk_, depth_;
  const uint64_t chunks_;  // ceil(size_ / chunk_)
  std::unique_ptr<unsigned char, FreeAligned> memory_;  // depth_ slots of chunk_ bytes

  std::mutex m_;
  std::condition_variable cv_;
  uint64_t first_ = 0;   // the oldest chunk kept (the ones before it are released; without a hash,
                         // those not yet read are skipped)
  uint64_t filled_ = 0;  // the chunks before it are read
  bool stop_ = false;
  std::exception_ptr error_;  // the read of chunk filled_ failed, at byte error_at_
  uint64_t error_at_ = 0;
  std::thread thread_;   // last: started once everything it uses is set
};

}  // namespace e3::io
