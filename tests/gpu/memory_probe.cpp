// Issue 21 item 3: how fast this machine's cores hash, copy and pread, alone and beside
// copying threads, in small reused buffers and in large ones, 4 KiB and 2 MiB pages. The
// export's shard thread hashed at 1.8-2.8 GB/s on the H200 machine against 8.6 GB/s on the
// development machine; this separates the machine from the program.
//   memory_probe FILE [BUSY_THREADS [DIR]]   (FILE: a few GB, read from the page cache; DIR: where
//   to time O_DIRECT writes)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <string>
#include <vector>

#include "core/hash.h"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

unsigned char* alloc(size_t n, bool huge) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::memset(p, 1, n);
  return static_cast<unsigned char*>(p);
}

uint64_t sink = 0;
const char* out_dir = nullptr;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void run(const char* file, int busy) {
  const size_t big = size_t{1} << 30, small = size_t{1} << 20;
  std::atomic<bool> stop{false};
  std::vector<std::thread> copiers;
  for (int t = 0; t < busy; ++t)
    copiers.emplace_back([&] {
      unsigned char* a = alloc(size_t{64} << 20, false);
      unsigned char* b = alloc(size_t{64} << 20, false);
      while (!stop) std::memcpy(b, a, size_t{64} << 20);
    });
  for (const bool huge : {false, true}) {
    unsigned char* buf = alloc(big, huge);
    double t = now();
    e3::ContentHash h;
    h.update(buf, big);
    sink += h.digest();
    std::printf("busy %2d %s pages: hash 1 GiB buffer %.2f GB/s\n", busy, huge ? "2M" : "4K", big / (now() - t) / 1e9);
    t = now();
    e3::ContentHash h2;
    for (int r = 0; r < 1024; ++r) h2.update(buf, small);
    sink += h2.digest();
    std::printf("busy %2d %s pages: hash 1 MiB buffer x1024 %.2f GB/s\n", busy, huge ? "2M" : "4K", big / (now() - t) / 1e9);
    unsigned char* dst = alloc(big, huge);
    t = now();
    std::memcpy(dst, buf, big);
    std::printf("busy %2d %s pages: memcpy 1 GiB %.2f GB/s\n", busy, huge ? "2M" : "4K", big / (now() - t) / 1e9);
    const int fd = open(file, O_RDONLY);
    const off_t size = lseek(fd, 0, SEEK_END);
    const size_t n = std::min<size_t>(size, big);
    t = now();
    for (size_t at = 0; at < n; at += small) pread(fd, dst + at, std::min(small, n - at), at);
    const double into_big = n / (now() - t) / 1e9;
    t = now();
    e3::ContentHash h3;
    h3.update(dst, n);
    sink += h3.digest();
    const double hash_after = n / (now() - t) / 1e9;
    t = now();
    e3::ContentHash h4;
    for (size_t at = 0; at < n; at += small) {
      pread(fd, buf, std::min(small, n - at), at);
      h4.update(buf, std::min(small, n - at));
    }
    sink += h4.digest();
    std::printf("busy %2d %s pages: pread 1 MiB pieces into 1 GiB %.2f GB/s, then hashed %.2f GB/s; pread+hash in one 1 MiB buffer %.2f GB/s\n",
                busy, huge ? "2M" : "4K", into_big, hash_after, n / (now() - t) / 1e9);
    close(fd);
    // O_DIRECT writes of 32 MiB from this kind of page, as the export's writers make them.
    if (out_dir) {
      const std::string path = std::string(out_dir) + "/memory_probe.direct";
      const int w = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
      t = now();
      const double cpu0 = cpu_seconds();
      for (size_t at = 0; at < big; at += size_t{32} << 20)
        if (pwrite(w, buf, size_t{32} << 20, at) < 0) std::perror("pwrite");
      std::printf("busy %2d %s pages: O_DIRECT pwrite 32 MiB pieces %.2f GB/s, %.2f s CPU per GB\n", busy,
                  huge ? "2M" : "4K", big / (now() - t) / 1e9, (cpu_seconds() - cpu0) / (big / 1e9));
      close(w);
      unlink(path.c_str());
    }
    munmap(buf, big);
    munmap(dst, big);
  }
  stop = true;
  for (auto& c : copiers) c.join();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  out_dir = argc > 3 ? argv[3] : nullptr;
  run(argv[1], 0);
  run(argv[1], argc > 2 ? std::atoi(argv[2]) : 12);
  std::printf("(%llu)\n", static_cast<unsigned long long>(sink & 1));
}
