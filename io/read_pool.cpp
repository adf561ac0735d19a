#include "io/read_pool.h"

#include <chrono>

#include "io/file_io.h"

namespace e3::io {

ReadPool::ReadPool(int fd, size_t threads, std::string where, ErrorKind kind)
    : fd_(fd), where_(std::move(where)), kind_(kind) {
  E3_REQUIRE(threads > 0, ErrorKind::Internal, "{}: a read pool needs a thread", where_);
  try {
    for (size_t t = 0; t < threads; ++t) threads_.emplace_back([this] { run(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

ReadPool::~ReadPool() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

uint64_t ReadPool::submit(void* to, size_t n, uint64_t at) {
  uint64_t k;
  {
    std::lock_guard<std::mutex> lock(m_);
    k = first_ + pieces_.size();
    pieces_.push_back({to, n, at, false, nullptr});
  }
  work_.notify_one();
  return k;
}

void ReadPool::wait(uint64_t k) {
  std::unique_lock<std::mutex> lock(m_);
  E3_REQUIRE(k == first_ && !pieces_.empty(), ErrorKind::Internal, "{}: piece {} waited for out of order", where_, k);
  finished_.wait(lock, [&] { return pieces_.front().done; });
  const std::exception_ptr error = pieces_.front().error;
  pieces_.pop_front();
  ++first_;
  if (error) std::rethrow_exception(error);
}

uint64_t ReadPool::read_ns() const {
  std::lock_guard<std::mutex> lock(m_);
  return read_ns_;
}

void ReadPool::run() {
  std::unique_lock<std::mutex> lock(m_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || next_ < first_ + pieces_.size(); });
    if (stop_) return;
    // The deque only grows at the back while this piece is read: its element stays put.
    Piece& p = pieces_[next_ - first_];
    ++next_;
    lock.unlock();
    std::exception_ptr error;
    const auto start = std::chrono::steady_clock::now();
    try {
      pread_exact(fd_, p.to, p.n, p.at, kind_, where_);
    } catch (...) {
      error = std::current_exception();
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    lock.lock();
    read_ns_ += static_cast<uint64_t>(ns.count());
    p.error = error;
    p.done = true;
    finished_.notify_all();
  }
}

}  // namespace e3::io
