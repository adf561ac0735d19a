// io/read_ahead: a file read past the page cache, chunks ahead of the reader, gives the bytes
// pread gives, in every order the verify pass asks for them, and reports what fails.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "io/read_ahead.h"
#include "support/test_support.h"

namespace {

using e3::io::Fd;
using e3::io::ReadAhead;

std::vector<unsigned char> write_random_file(const std::filesystem::path& path, size_t n) {
  std::mt19937 rng(7);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n));
  return v;
}

bool opens_with_o_direct(const std::filesystem::path& p) {
  const Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  return fd.get() >= 0;
}

class ReadAheadTest : public ::testing::Test {
 protected:
  static constexpr size_t kChunk = 8192;
  // Three chunks and a piece: the last chunk is short and not a whole number of blocks.
  void SetUp() override {
    path_ = dir_ / "file";
    bytes_ = write_random_file(path_, 3 * kChunk + 1234);
    fd_ = std::make_unique<Fd>(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_GE(fd_->get(), 0);
  }
  std::unique_ptr<ReadAhead> open(uint64_t size, size_t depth = 2) {
    std::unique_ptr<ReadAhead> r = ReadAhead::open(fd_->get(), size, "the file", e3::ErrorKind::Verify, kChunk, depth);
    // Only a file system that refuses O_DIRECT leaves the page cache as the only way.
    EXPECT_EQ(r != nullptr, opens_with_o_direct(path_)) << dir_.path();
    return r;
  }
  std::vector<unsigned char> read(ReadAhead& r, size_t n, uint64_t at) {
    std::vector<unsigned char> out(n);
    r.read(out.data(), n, at);
    return out;
  }
  std::vector<unsigned char> expected(size_t n, uint64_t at) const {
    return {bytes_.begin() + static_cast<long>(at), bytes_.begin() + static_cast<long>(at + n)};
  }

  e3::test::TempDir dir_;
  std::filesystem::path path_;
  std::vector<unsigned char> bytes_;
  std::unique_ptr<Fd> fd_;
};

TEST_F(ReadAheadTest, SequentialPiecesOfAnySizeAreTheFilesBytes) {
  const std::unique_ptr<ReadAhead> r = open(bytes_.size());
  if (!r) return;
  uint64_t at = 0;
  for (size_t n : {1, 100, 8091, 8192, 3, 20000}) {
    n = std::min<size_t>(n, bytes_.size() - at);
    EXPECT_EQ(read(*r, n, at), expected(n, at)) << "at " << at;
    at += n;
  }
  EXPECT_EQ(at, bytes_.size());
}

TEST_F(ReadAheadTest, SkipsForwardAndReadsBackBehindTheWindow) {
  const std::unique_ptr<ReadAhead> r = open(bytes_.size());
  if (!r) return;
  EXPECT_EQ(read(*r, 10, 5), expected(10, 5));
  EXPECT_EQ(read(*r, 500, 2 * kChunk + 7), expected(500, 2 * kChunk + 7));  // chunk 1 skipped
  EXPECT_EQ(read(*r, kChunk, 100), expected(kChunk, 100));                  // behind: pread
  EXPECT_EQ(read(*r, 1234, 3 * kChunk), expected(1234, 3 * kChunk));        // the short last chunk
}

TEST_F(ReadAheadTest, AReadPastTheEndIsAnErrorNamingTheFile) {
  const std::unique_ptr<ReadAhead> r = open(bytes_.size());
  if (!r) return;
  std::vector<unsigned char> out(10);
  try {
    r->read(out.data(), out.size(), bytes_.size() - 5);
    FAIL() << "no error";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Verify);
    EXPECT_NE(std::string(e.what()).find("the file: reading at byte"), std::string::npos) << e.what();
  }
}

// A file shorter than it was said to be (truncated after its size was taken): the chunk the
// read-ahead thread could not fill fails the read that needs it, and only that one.
TEST_F(ReadAheadTest, AFileCutShortFailsTheReadOfWhatIsMissing) {
  const std::unique_ptr<ReadAhead> r = open(bytes_.size() + 3 * kChunk, 3);
  if (!r) return;
  EXPECT_EQ(read(*r, bytes_.size(), 0), expected(bytes_.size(), 0));
  std::vector<unsigned char> out(kChunk);
  try {
    r->read(out.data(), out.size(), 5 * kChunk);
    FAIL() << "no error";
  } catch (const e3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected end of file"), std::string::npos) << e.what();
  }
}

// Destroying it with chunks unread (a failed shard) stops its thread.
TEST_F(ReadAheadTest, StopsWithChunksUnread) {
  for (int i = 0; i < 20; ++i) {
    const std::unique_ptr<ReadAhead> r = open(bytes_.size());
    if (!r) return;
    EXPECT_EQ(read(*r, 1, 0), expected(1, 0));
  }
}

TEST(ResidentShare, AFileJustReadIsInThePageCache) {
  e3::test::TempDir dir;
  const std::vector<unsigned char> bytes = write_random_file(dir / "f", 1 << 20);
  Fd fd(::open((dir / "f").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_GE(fd.get(), 0);
  std::vector<unsigned char> back(bytes.size());
  e3::io::pread_exact(fd.get(), back.data(), back.size(), 0, e3::ErrorKind::Verify, "f");
  EXPECT_GT(e3::io::resident_share(fd.get(), bytes.size()), 0.9);
  EXPECT_EQ(e3::io::resident_share(fd.get(), 0), 1.0);
}

}  // namespace
