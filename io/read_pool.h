// Reads of one file made by a few threads, ahead of the one thread that uses their bytes.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace e3::io {

// Verify's pass hashes a shard in file order, so one thread per shard did every pread as well.
// Out of the page cache that copy ran at about 1 GB/s per thread beside the export's writers,
// and it was half of what set the export's pace (issue 21): here other threads make the copies,
// several at once, while the pass hashes and checks the pieces before.
//
// Pieces are taken in the order they were submitted; wait(k) returns once piece k is in place
// and rethrows its read's error. The caller owns the destinations and keeps them alive until
// the pool is destroyed or their pieces are waited for; the destructor waits for the reads
// under way (the rest are dropped) before it returns.
class ReadPool {
 public:
  ReadPool(int fd, size_t threads, std::string where, ErrorKind kind);
  ~ReadPool();
  ReadPool(const ReadPool&) = delete;
  ReadPool& operator=(const ReadPool&) = delete;

  // Queues the read of `n` bytes at `at` into `to`; returns its number (0, 1, 2, ... in order).
  uint64_t submit(void* to, size_t n, uint64_t at);
  // Waits for piece k's bytes; rethrows its read's error. In order: k is the oldest not waited for.
  void wait(uint64_t k);
  // Nanoseconds the pool's threads spent in pread so far.
  uint64_t read_ns() const;

 private:
  struct Piece {
    void* to;
    size_t n;
    uint64_t at;
    bool done = false;
    std::exception_ptr error;
  };
  void run();

  const int fd_;
  const std::string where_;
  const ErrorKind kind_;
  mutable std::mutex m_;
  std::condition_variable work_, finished_;
  std::deque<Piece> pieces_;  // from number first_ on: submitted and not yet waited for
  uint64_t first_ = 0;        // the number of pieces_.front()
  uint64_t next_ = 0;         // the first piece no thread has taken
  uint64_t read_ns_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: started once everything they use is set
};

}  // namespace e3::io
