#include "io/read_ahead.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace e3::io {

double resident_share(int fd, uint64_t size) {
  if (size == 0) return 1;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0) return 1;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return 1;
  std::vector<unsigned char> in((size + static_cast<uint64_t>(page) - 1) / static_cast<uint64_t>(page));
  const bool ok = ::mincore(map, size, in.data()) == 0;
  ::munmap(map, size);
  if (!ok) return 1;
  size_t resident = 0;
  for (unsigned char c : in) resident += c & 1;
  return static_cast<double>(resident) / static_cast<double>(in.size());
}


std::unique_ptr<ReadAhead> ReadAhead::open(int fd, uint64_t size, std::string where, ErrorKind kind, size_t chunk,
                                           size_t depth) {
  // The same open file again (not its name, which may name another file by now), with O_DIRECT.
  Fd direct(::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  if (direct.get() < 0) return nullptr;
  chunk = std::max(kAlign, chunk / kAlign * kAlign);
  return std::unique_ptr<ReadAhead>(
      new ReadAhead(std::move(direct), fd, size, std::move(where), kind, chunk, std::max<size_t>(depth, 2)));
}

ReadAhead::ReadAhead(Fd direct, int fd, uint64_t size, std::string where, ErrorKind kind, size_t chunk, size_t depth)
    : direct_(std::move(direct)),
      fd_(fd),
      size_(size),
      where_(std::move(where)),
      kind_(kind),
      chunk_(chunk),
      depth_(depth),
      chunks_((size + chunk - 1) / chunk) {
  // In huge pages: O_DIRECT reads pin the memory they fill, page by page.
  memory_ = PageMemory(chunk_ * depth_);
  thread_ = std::thread([this] { run(); });
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ReadAhead::run() {
  std::unique_lock<std::mutex> lock(m_);
  for (uint64_t k = 0; k < chunks_; ++k) {
    cv_.wait(lock, [&] { return stop_ || k < first_ + depth_; });
    if (stop_) return;
    if (k < first_) {  // released unread: the reader skipped past it
      filled_ = k + 1;
      continue;
    }
    lock.unlock();
    // Whole blocks, the last one past the end of the file: the read stops there.
    const uint64_t at = k * chunk_;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk_, size_ - at));
    const size_t ask = (want + kAlign - 1) / kAlign * kAlign;
    unsigned char* to = slot(k);
    std::exception_ptr error;
    size_t done = 0;
    while (done < want) {
      const ssize_t got = ::pread(direct_.get(), to + done, ask - done, static_cast<off_t>(at + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        error = std::make_exception_ptr(Error(
            kind_,
            fmt::format("{}: reading at byte {}: {}", where_, at + done, got == 0 ? "unexpected end of file" : std::strerror(errno)),
            __FILE__, __LINE__));
        break;
      }
      done += static_cast<size_t>(got);
    }
    lock.lock();
    if (error) {
      error_ = error;
      error_at_ = at + done;
      cv_.notify_all();
      return;
    }
    filled_ = k + 1;
    cv_.notify_all();
  }
}

void ReadAhead::read(void* to, size_t n, uint64_t at) {
  auto* out = static_cast<unsigned char*>(to);
  while (n > 0) {
    const uint64_t k = at / chunk_;
    std::unique_lock<std::mutex> lock(m_);
    if (k < first_ || at >= size_) {  // behind the window (or past the end: pread says so)
      lock.unlock();
      pread_exact(fd_, out, n, at, kind_, where_);
      return;
    }
    if (k > first_) {  // the chunks before k are done with
      first_ = k;
      cv_.notify_all();
    }
    cv_.wait(lock, [&] { return filled_ > k || error_; });
    // A chunk whose read failed part way holds the bytes before the failure.
    const uint64_t end = filled_ > k ? size_ : error_at_;
    if (filled_ < k || at >= end) std::rethrow_exception(error_);
    lock.unlock();
    // Chunk k stays until a read asks for a later one: only this thread moves first_.
    const size_t in_chunk = static_cast<size_t>(at - k * chunk_);
    const size_t take = static_cast<size_t>(std::min<uint64_t>({n, chunk_ - in_chunk, end - at}));
    std::memcpy(out, slot(k) + in_chunk, take);
    out += take;
    at += take;
    n -= take;
  }
}

}  // namespace e3::io
