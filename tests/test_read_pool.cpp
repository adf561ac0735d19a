// io/read_pool: pieces read by several threads ahead of the one that waits for them hold the
// bytes pread gives, whatever their sizes and however many threads read; a failed read is
// reported by the wait for its piece; a pool destroyed with pieces pending returns.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "io/file_io.h"
#include "io/read_pool.h"
#include "support/test_support.h"

namespace {

using e3::io::Fd;
using e3::io::ReadPool;

class ReadPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::filesystem::path path = dir_ / "file";
    std::mt19937 rng(11);
    bytes_.resize(300000);
    for (auto& b : bytes_) b = static_cast<unsigned char>(rng());
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes_.data()), static_cast<std::streamsize>(bytes_.size()));
    fd_ = std::make_unique<Fd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_GE(fd_->get(), 0);
  }

  e3::test::TempDir dir_;
  std::vector<unsigned char> bytes_;
  std::unique_ptr<Fd> fd_;
};

TEST_F(ReadPoolTest, PiecesOfAnySizeHoldTheFilesBytesInOrder) {
  for (const size_t threads : {1, 3}) {
    ReadPool pool(fd_->get(), threads, "the file", e3::ErrorKind::Verify);
    // Pieces of uneven sizes, one of them empty, not in file order, some read twice.
    const std::vector<std::pair<uint64_t, size_t>> pieces = {
        {0, 1}, {1, 4095}, {4096, 70000}, {200000, 100000}, {74096, 0}, {74096, 125904}, {10, 20}, {0, 300000}};
    std::vector<std::vector<unsigned char>> out;
    for (const auto& [at, n] : pieces) out.emplace_back(n, 0);
    std::vector<uint64_t> numbers;
    for (size_t i = 0; i < pieces.size(); ++i)
      numbers.push_back(pool.submit(out[i].data(), pieces[i].second, pieces[i].first));
    for (size_t i = 0; i < pieces.size(); ++i) {
      EXPECT_EQ(numbers[i], i);
      pool.wait(i);
      const auto from = bytes_.begin() + static_cast<long>(pieces[i].first);
      EXPECT_EQ(out[i], std::vector<unsigned char>(from, from + static_cast<long>(pieces[i].second)))
          << "piece " << i << " with " << threads << " threads";
    }
    EXPECT_GT(pool.read_ns(), 0u);
    // More pieces after the first are waited for: the numbers go on.
    std::vector<unsigned char> again(5);
    EXPECT_EQ(pool.submit(again.data(), 5, 299995), pieces.size());
    pool.wait(pieces.size());
    EXPECT_EQ(again, std::vector<unsigned char>(bytes_.end() - 5, bytes_.end()));
  }
}

TEST_F(ReadPoolTest, AReadPastTheEndIsReportedByTheWaitForItsPiece) {
  ReadPool pool(fd_->get(), 2, "the file", e3::ErrorKind::Verify);
  std::vector<unsigned char> a(100), b(100), c(100);
  pool.submit(a.data(), 100, 0);
  pool.submit(b.data(), 100, 299950);  // 50 bytes past the end
  pool.submit(c.data(), 100, 1000);
  pool.wait(0);
  try {
    pool.wait(1);
    ADD_FAILURE() << "a read past the end of the file passed";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Verify);
    EXPECT_NE(std::string(e.what()).find("the file: reading at byte 300000: unexpected end of file"),
              std::string::npos)
        << e.what();
  }
  pool.wait(2);  // the pieces after a failed one are still read
  EXPECT_EQ(c, std::vector<unsigned char>(bytes_.begin() + 1000, bytes_.begin() + 1100));
}

TEST_F(ReadPoolTest, WaitingOutOfOrderIsAnInternalError) {
  ReadPool pool(fd_->get(), 1, "the file", e3::ErrorKind::Verify);
  std::vector<unsigned char> a(10), b(10);
  pool.submit(a.data(), 10, 0);
  pool.submit(b.data(), 10, 10);
  try {
    pool.wait(1);
    ADD_FAILURE() << "piece 1 was waited for before piece 0";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Internal);
  }
  pool.wait(0);
  pool.wait(1);
  EXPECT_EQ(b, std::vector<unsigned char>(bytes_.begin() + 10, bytes_.begin() + 20));
}

TEST_F(ReadPoolTest, ADestroyedPoolWithPiecesPendingReturns) {
  std::vector<std::vector<unsigned char>> out(64, std::vector<unsigned char>(300000));
  {
    ReadPool pool(fd_->get(), 2, "the file", e3::ErrorKind::Verify);
    for (auto& o : out) pool.submit(o.data(), o.size(), 0);
    pool.wait(0);
  }  // the reads under way finish into `out`, still alive; the rest are dropped
  EXPECT_EQ(out[0], bytes_);
}

}  // namespace
