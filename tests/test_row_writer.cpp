// ParallelRowWriter against the one-thread interleave: the same bytes at the same offset, for
// every thread count and chunk size, whole rows and parts of rows (fp8's codes and scales).
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "io/row_writer.h"

namespace e3::io {
namespace {

std::vector<unsigned char> file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class RowWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("e3_row_writer_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    ::close(fd_);
    std::filesystem::remove(path_);
  }
  std::filesystem::path path_;
  int fd_ = -1;
};

// K blocks of T rows of `row` bytes, every byte distinct in its position.
std::vector<std::vector<unsigned char>> make_blocks(size_t K, size_t T, size_t row) {
  std::vector<std::vector<unsigned char>> blocks(K, std::vector<unsigned char>(T * row));
  for (size_t k = 0; k < K; ++k)
    for (size_t i = 0; i < T * row; ++i) blocks[k][i] = static_cast<unsigned char>((i * 131 + k * 17 + i / 251) & 0xff);
  return blocks;
}

TEST_F(RowWriterTest, SameBytesAsTheOneThreadInterleaveForEveryThreadCountAndChunk) {
  const size_t K = 3, T = 37, row = 72;  // a part of 64 bytes at 0 and one of 8 at 64, as fp8's
  const auto blocks = make_blocks(K, T, row);
  for (const auto& [offset, bytes] : std::vector<std::pair<size_t, size_t>>{{0, 64}, {64, 8}, {0, 72}}) {
    RowSource src;
    for (const auto& b : blocks) src.blocks.push_back(b.data());
    src.row_stride = row;
    src.part_offset = offset;
    src.part_bytes = bytes;
    src.tokens = T;
    const std::vector<unsigned char> expected = interleave_rows(src);
    ASSERT_EQ(expected.size(), T * K * bytes);
    // The reference itself, by hand for one element: token 5, capture 2, byte 3.
    EXPECT_EQ(expected[(5 * K + 2) * bytes + 3], blocks[2][5 * row + offset + 3]);
    for (int threads : {1, 2, 5})
      for (size_t chunk : {size_t{1}, size_t{200}, size_t{1} << 20}) {
        ASSERT_EQ(::ftruncate(fd_, 0), 0);
        const uint64_t at = 4096 + 3;  // an offset that is not aligned
        ParallelRowWriter(threads, chunk).write(fd_, at, src, "test rows");
        const std::vector<unsigned char> got = file_bytes(path_);
        ASSERT_EQ(got.size(), at + expected.size()) << threads << " threads, chunk " << chunk;
        EXPECT_TRUE(std::equal(expected.begin(), expected.end(), got.begin() + static_cast<long>(at)))
            << threads << " threads, chunk " << chunk << ", part at " << offset;
      }
  }
}

TEST_F(RowWriterTest, OneBlockOfWholeRowsIsWrittenAsItIs) {
  const auto blocks = make_blocks(1, 100, 48);
  RowSource src{{blocks[0].data()}, 48, 0, 48, 100};
  ParallelRowWriter(4, 500).write(fd_, 0, src, "test rows");
  EXPECT_EQ(file_bytes(path_), blocks[0]);
}

TEST_F(RowWriterTest, NothingToWriteWritesNothing) {
  const auto blocks = make_blocks(2, 4, 16);
  RowSource src{{blocks[0].data(), blocks[1].data()}, 16, 0, 16, 0};
  ParallelRowWriter(3).write(fd_, 100, src, "test rows");
  EXPECT_EQ(std::filesystem::file_size(path_), 0u);
}

TEST_F(RowWriterTest, AFailedWriteIsAnOutputErrorNamingWhatAndWhere) {
  const auto blocks = make_blocks(2, 64, 32);
  RowSource src{{blocks[0].data(), blocks[1].data()}, 32, 0, 32, 64};
  const int read_only = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  try {
    ParallelRowWriter(2, 256).write(read_only, 0, src, "hidden_states of sample 7");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Output);
    EXPECT_NE(std::string(e.what()).find("hidden_states of sample 7 at byte"), std::string::npos) << e.what();
  }
  ::close(read_only);
}

}  // namespace
}  // namespace e3::io
