#include "model/weight_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/cpu_share.h"
#include "core/error.h"

namespace e3::model {

int default_load_threads() { return std::clamp(usable_cpus(), 1, 8); }

ReaderPool::ReaderPool(int threads, uint64_t chunk_bytes) : chunk_(std::max<uint64_t>(chunk_bytes / 8 * 8, 8)) {
  if (threads <= 0) threads = default_load_threads();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

ReaderPool::~ReaderPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ReaderPool::run_tasks() {
  std::unique_lock lock(mu_);
  while (next_ < total_) {
    const size_t i = next_++;
    const bool skip = error_ != nullptr;  // after a failure the rest of the batch only drains
    lock.unlock();
    std::exception_ptr err;
    if (!skip) {
      try {
        (*fn_)(i);
      } catch (...) {
        err = std::current_exception();
      }
    }
    lock.lock();
    if (err && !error_) error_ = err;
    if (++finished_ == total_) done_.notify_all();
  }
}

void ReaderPool::work() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || next_ < total_; });
    if (stop_) return;
    lock.unlock();
    run_tasks();
    lock.lock();
  }
}

void ReaderPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    next_ = 0;
    finished_ = 0;
    total_ = n;
    error_ = nullptr;
  }
  if (n > 1) wake_.notify_all();
  run_tasks();
  std::exception_ptr err;
  {
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return finished_ == total_; });
    total_ = next_ = finished_ = 0;
    fn_ = nullptr;
    err = std::exchange(error_, nullptr);
  }
  if (err) std::rethrow_exception(err);
}

namespace {

void pread_exact(int fd, const std::string& path, void* dst, uint64_t len, uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  while (len > 0) {
    // Linux moves at most about 2 GiB per call.
    const ssize_t n = ::pread(fd, p, std::min<uint64_t>(len, 1ull << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    E3_REQUIRE(n >= 0, ErrorKind::Model, "cannot read {} at byte {}: {}", path, offset, std::strerror(errno));
    E3_REQUIRE(n > 0, ErrorKind::Model, "{}: unexpected end of file at byte {} ({} more bytes expected): was it "
               "truncated while loading?", path, offset, len);
    p += n;
    len -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

// A task: segments [s0, s1), of each the bytes [off, off + len).
struct Piece {
  int64_t s0, s1;
  uint64_t off, len;
};

}  // namespace

void ReaderPool::read(int fd, const std::string& path, const ByteBlock& in, void* dst, bool to_float,
                      DType src, const Observer* observe) {
  ByteBlock b = in;
  if (b.count <= 0 || b.seg == 0) return;
  if (b.count == 1 || b.stride == b.seg) {  // one contiguous range: whole rows merge
    b.seg *= static_cast<uint64_t>(b.count);
    b.count = 1;
    b.stride = b.seg;
  }
  const size_t elem = to_float ? dtype_size(src) : 1;
  E3_REQUIRE(b.seg % elem == 0, ErrorKind::Internal, "{}: segment of {} bytes is not whole elements", path, b.seg);
  // Pieces small enough that every thread gets some of a mid-sized tensor, large enough
  // (1 MiB) that the calls cost nothing next to the copying.
  const uint64_t per_thread = (b.bytes() / static_cast<uint64_t>(threads()) + 7) / 8 * 8;
  const uint64_t chunk = std::min(chunk_, std::max<uint64_t>(1ull << 20, per_thread));
  std::vector<Piece> pieces;
  if (b.seg >= chunk) {
    for (int64_t s = 0; s < b.count; ++s)
      for (uint64_t off = 0; off < b.seg; off += chunk) pieces.push_back({s, s + 1, off, std::min(chunk, b.seg - off)});
  } else {
    const auto group = static_cast<int64_t>(std::max<uint64_t>(1, chunk / b.seg));
    for (int64_t s = 0; s < b.count; s += group) pieces.push_back({s, std::min(b.count, s + group), 0, b.seg});
  }
  auto* out = static_cast<uint8_t*>(dst);
  parallel_for(pieces.size(), [&](size_t i) {
    const Piece& p = pieces[i];
    if (!to_float) {
      for (int64_t s = p.s0; s < p.s1; ++s) {
        uint8_t* to = out + static_cast<uint64_t>(s) * b.seg + p.off;
        const uint64_t from = b.offset + static_cast<uint64_t>(s) * b.stride + p.off;
        pread_exact(fd, path, to, p.len, from);
        if (observe) (*observe)(from, to, p.len);
      }
      return;
    }
    thread_local std::vector<uint8_t> bounce;
    bounce.resize(p.len * static_cast<uint64_t>(p.s1 - p.s0));
    for (int64_t s = p.s0; s < p.s1; ++s) {
      uint8_t* to = bounce.data() + static_cast<uint64_t>(s - p.s0) * p.len;
      const uint64_t from = b.offset + static_cast<uint64_t>(s) * b.stride + p.off;
      pread_exact(fd, path, to, p.len, from);
      if (observe) (*observe)(from, to, p.len);
    }
    float* f = reinterpret_cast<float*>(out) + (static_cast<uint64_t>(p.s0) * b.seg + p.off) / elem;
    convert_to_float(bounce.data(), src, f, bounce.size() / elem);
  });
}

}  // namespace e3::model
