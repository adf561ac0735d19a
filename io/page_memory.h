// Large buffers in whole 2 MiB pages, which the kernel is asked to back with huge pages.
#pragma once

#include <cstddef>

namespace e3::io {

// Anonymous memory of at least `bytes`, in whole 2 MiB pages aligned to 2 MiB, advised
// MADV_HUGEPAGE (where transparent huge pages are `madvise`, only such memory gets them; the
// advice is ignored where they are off, and the memory works the same in 4 KiB pages).
//
// Why: on the virtual machines measured (issue 21) the kernel's copies into and out of user
// memory cost per distinct 4 KiB page touched. On the development machine, pread out of the page
// cache into a fresh 1 GiB buffer ran at 0.7 GB/s in 4 KiB pages and 10-13 GB/s in 2 MiB pages,
// and O_DIRECT writes of 32 MiB at 1.1-1.8 GB/s from 4 KiB pages, 4.6 GB/s from 2 MiB ones
// (tests/gpu/memory_probe.cpp). Reading into and writing from buffers like these avoids it.
// Move-only; the memory is unmapped with the object. Not zeroed beyond what mmap gives.
class PageMemory {
 public:
  static constexpr size_t kPage = size_t{2} << 20;
  PageMemory() = default;
  explicit PageMemory(size_t bytes);  // throws ErrorKind::Output when the memory cannot be had
  ~PageMemory();
  PageMemory(PageMemory&& other) noexcept;
  PageMemory& operator=(PageMemory&& other) noexcept;
  PageMemory(const PageMemory&) = delete;
  PageMemory& operator=(const PageMemory&) = delete;

  unsigned char* data() const { return data_; }
  size_t size() const { return size_; }  // `bytes` rounded up to whole 2 MiB pages

 private:
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace e3::io
