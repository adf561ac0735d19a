#include "io/page_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace e3::io {

PageMemory::PageMemory(size_t bytes) {
  if (bytes == 0) return;
  size_ = (bytes + kPage - 1) / kPage * kPage;
  // One page more than asked, so that an aligned run of them lies inside; the ends are given back.
  const size_t mapped = size_ + kPage;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  E3_REQUIRE(p != MAP_FAILED, ErrorKind::Output, "cannot allocate {} bytes: {}", size_, std::strerror(errno));
  auto* base = static_cast<unsigned char*>(p);
  const uintptr_t at = reinterpret_cast<uintptr_t>(base);
  auto* aligned = reinterpret_cast<unsigned char*>((at + kPage - 1) / kPage * kPage);
  if (aligned > base) ::munmap(base, static_cast<size_t>(aligned - base));
  const size_t tail = static_cast<size_t>(base + mapped - (aligned + size_));
  if (tail > 0) ::munmap(aligned + size_, tail);
  ::madvise(aligned, size_, MADV_HUGEPAGE);  // advice only: without it 4 KiB pages do
  data_ = aligned;
}

PageMemory::~PageMemory() {
  if (data_) ::munmap(data_, size_);
}

PageMemory::PageMemory(PageMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PageMemory& PageMemory::operator=(PageMemory&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace e3::io
