// io/page_memory: whole 2 MiB pages aligned to 2 MiB, writable end to end, moved without a copy
// and given back once.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "io/page_memory.h"
#include "io/tensor_file.h"

namespace {

using e3::io::PageMemory;

TEST(PageMemory, WholeAlignedPagesWritableToTheEnd) {
  for (const size_t bytes : {size_t{1}, PageMemory::kPage - 1, PageMemory::kPage, PageMemory::kPage + 1,
                             size_t{5} * PageMemory::kPage + 12345}) {
    PageMemory m(bytes);
    ASSERT_NE(m.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data()) % PageMemory::kPage, 0u) << bytes;
    EXPECT_EQ(m.size() % PageMemory::kPage, 0u);
    EXPECT_GE(m.size(), bytes);
    EXPECT_LT(m.size(), bytes + PageMemory::kPage);
    std::memset(m.data(), 0x5a, m.size());
    EXPECT_EQ(m.data()[m.size() - 1], 0x5a);
  }
  const PageMemory none(0);
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_EQ(none.size(), 0u);
}

TEST(PageMemory, MovesTakeTheMemoryAlong) {
  PageMemory a(3 * PageMemory::kPage);
  a.data()[7] = 42;
  unsigned char* const p = a.data();
  PageMemory b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.data()[7], 42);
  PageMemory c(PageMemory::kPage);
  c = std::move(b);  // c's own pages are given back, b's taken
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 3 * PageMemory::kPage);
  EXPECT_EQ(b.data(), nullptr);
}

TEST(PageMemory, DirectBuffersFromOnePageUpAreInWholeAlignedPages) {
  const e3::io::DirectBuffer big(size_t{32} << 20), small(4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % PageMemory::kPage, 0u);
  EXPECT_EQ(big.size(), size_t{32} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % e3::io::DirectBuffer::kAlign, 0u);
  EXPECT_EQ(small.size(), 4096u);
}

}  // namespace
