// io::write_torch_dict and the CRC-32 it checksums with: the zip layout torch.load reads
// (record names and order, stored records, 64-byte aligned data, local headers matching the
// central directory, checksums), the pickle's encoding, refusing what needs zip64, and
// failures leaving no file behind. tests/python/check_torch_save.py loads the files with torch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "io/crc32.h"
#include "io/torch_save.h"
#include "core/error.h"
#include "support/file_size_limit.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::io::TensorElement;
using e3::io::TensorRef;
using e3::io::TorchValue;
using e3::io::write_torch_dict;
using e3::test::Contains;
using e3::test::error_of;
using e3::test::TempDir;
using Entries = std::vector<std::pair<std::string, TorchValue>>;

// The definition, one bit at a time.
uint32_t reference_crc(const void* data, size_t n) {
  uint32_t r = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    r ^= p[i];
    for (int b = 0; b < 8; ++b) r = (r >> 1) ^ ((r & 1u) ? 0xEDB88320u : 0u);
  }
  return ~r;
}

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + 131 * i + (i >> 9));
  return b;
}

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> dir_entries(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// A string literal with its NUL bytes.
template <size_t N>
std::string lit(const char (&s)[N]) {
  return std::string(s, N - 1);
}

uint64_t le(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s.at(at + i))) << (8 * i);
  return v;
}

struct ZipRecord {
  std::string name;
  uint64_t header_offset, data_offset, size;
  uint32_t crc;
  std::string data;
};

// Reads the archive the way a zip reader does (end record, central directory, local headers),
// checking that each local header agrees with its central entry.
std::vector<ZipRecord> read_zip(const std::string& file) {
  std::vector<ZipRecord> records;
  EXPECT_GE(file.size(), 22u);
  const size_t end = file.size() - 22;
  EXPECT_EQ(le(file, end, 4), 0x06054b50u) << "no end record (or a comment after it)";
  const uint64_t count = le(file, end + 10, 2), dir_size = le(file, end + 12, 4), dir_at = le(file, end + 16, 4);
  EXPECT_EQ(le(file, end + 8, 2), count);
  EXPECT_EQ(dir_at + dir_size, end);
  size_t at = dir_at;
  for (uint64_t i = 0; i < count; ++i) {
    EXPECT_EQ(le(file, at, 4), 0x02014b50u);
    ZipRecord r;
    EXPECT_EQ(le(file, at + 8, 2), 0u) << "flags";
    EXPECT_EQ(le(file, at + 10, 2), 0u) << "method: stored";
    r.crc = static_cast<uint32_t>(le(file, at + 16, 4));
    r.size = le(file, at + 20, 4);
    EXPECT_EQ(le(file, at + 24, 4), r.size) << "stored: compressed size == size";
    const uint64_t name_len = le(file, at + 28, 2), extra_len = le(file, at + 30, 2), comment_len = le(file, at + 32, 2);
    r.header_offset = le(file, at + 42, 4);
    r.name = file.substr(at + 46, name_len);
    at += 46 + name_len + extra_len + comment_len;

    const size_t h = r.header_offset;
    EXPECT_EQ(le(file, h, 4), 0x04034b50u) << r.name;
    EXPECT_EQ(le(file, h + 6, 2), 0u) << r.name << ": local flags";
    EXPECT_EQ(le(file, h + 8, 2), 0u) << r.name << ": local method";
    EXPECT_EQ(le(file, h + 14, 4), r.crc) << r.name << ": local CRC";
    EXPECT_EQ(le(file, h + 18, 4), r.size) << r.name;
    EXPECT_EQ(le(file, h + 22, 4), r.size) << r.name;
    const uint64_t local_name = le(file, h + 26, 2), local_extra = le(file, h + 28, 2);
    EXPECT_EQ(file.substr(h + 30, local_name), r.name);
    // torch's padding: one extra field "FB" whose payload fills up to the alignment.
    EXPECT_EQ(file.substr(h + 30 + local_name, 2), "FB") << r.name;
    EXPECT_EQ(le(file, h + 32 + local_name, 2) + 4, local_extra) << r.name;
    r.data_offset = h + 30 + local_name + local_extra;
    r.data = file.substr(r.data_offset, r.size);
    records.push_back(r);
  }
  EXPECT_EQ(at, end);
  return records;
}

std::map<std::string, ZipRecord> by_name(const std::vector<ZipRecord>& records) {
  std::map<std::string, ZipRecord> m;
  for (const auto& r : records) m[r.name] = r;
  return m;
}

// The pickle of {key: value} for one integer, as Python's pickle (protocol 2) encodes it.
std::string pickle_of_int(int64_t v) {
  TempDir dir;
  write_torch_dict(dir / "x.pt", {{"v", v}});
  return by_name(read_zip(read_all(dir / "x.pt"))).at("archive/data.pkl").data;
}

// ---------------------------------------------------------------------------------------------
// CRC-32

TEST(Crc32, KnownValue) {
  EXPECT_EQ(e3::io::crc32(0, "123456789", 9), 0xCBF43926u);
  EXPECT_EQ(e3::io::detail::crc32_tables(0, "123456789", 9), 0xCBF43926u);
  EXPECT_EQ(e3::io::crc32(0, "", 0), 0u);
}

TEST(Crc32, EveryLengthAndAlignmentMatchesTheDefinition) {
  const auto data = bytes_of(2048 + 8, 1);
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n <= 2048; n += (n < 300 ? 1 : 97)) {
      const uint32_t want = reference_crc(data.data() + offset, n);
      ASSERT_EQ(e3::io::crc32(0, data.data() + offset, n), want) << "n=" << n << " offset=" << offset;
      ASSERT_EQ(e3::io::detail::crc32_tables(0, data.data() + offset, n), want) << "n=" << n;
    }
  }
}

TEST(Crc32, ContinuesAcrossPieces) {
  const auto data = bytes_of((1 << 20) + 13, 2);
  const uint32_t whole = reference_crc(data.data(), data.size());
  EXPECT_EQ(e3::io::crc32(0, data.data(), data.size()), whole);
  for (const size_t split : {size_t{1}, size_t{15}, size_t{64}, size_t{65}, size_t{4096}, size_t{999999}}) {
    const uint32_t first = e3::io::crc32(0, data.data(), split);
    EXPECT_EQ(e3::io::crc32(first, data.data() + split, data.size() - split), whole) << split;
  }
  if (!e3::io::detail::crc32_uses_clmul()) GTEST_LOG_(INFO) << "this CPU has no PCLMULQDQ: tables only";
}

// ---------------------------------------------------------------------------------------------
// The archive

TEST(TorchSave, RecordsInTorchsOrderAlignedWithCorrectChecksums) {
  TempDir dir;
  const auto ids = bytes_of(37 * 8, 3), aux = bytes_of(37 * 72 * 2, 4), empty = bytes_of(0, 5);
  const Entries entries = {{"input_ids", TensorRef{"", TensorElement::I64, {37}, ids.data()}},
                           {"aux_hidden_state", TensorRef{"", TensorElement::BF16, {1, 37, 72}, aux.data()}},
                           {"conversation_id", std::string("conv-1")},
                           {"empty", TensorRef{"", TensorElement::F32, {0}, nullptr}},
                           {"n", int64_t{7}}};
  const auto path = dir / "data_0.ckpt";
  write_torch_dict(path, entries);
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{"data_0.ckpt"});

  const auto records = read_zip(read_all(path));
  std::vector<std::string> names;
  for (const auto& r : records) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"archive/data.pkl", "archive/byteorder", "archive/data/0",
                                             "archive/data/1", "archive/data/2", "archive/version"}));
  EXPECT_EQ(records.front().header_offset, 0u) << "torch.load sniffs the zip by its first bytes";
  for (const auto& r : records) {
    EXPECT_EQ(r.data_offset % 64, 0u) << r.name;
    EXPECT_EQ(r.crc, reference_crc(r.data.data(), r.data.size())) << r.name;
  }
  const auto m = by_name(records);
  EXPECT_EQ(m.at("archive/version").data, "3\n");
  EXPECT_EQ(m.at("archive/byteorder").data, "little");
  EXPECT_EQ(m.at("archive/data/0").data, std::string(ids.begin(), ids.end()));
  EXPECT_EQ(m.at("archive/data/1").data, std::string(aux.begin(), aux.end()));
  EXPECT_EQ(m.at("archive/data/2").size, 0u);

  // The pickle names each tensor's storage record, class and element count, in key order.
  const std::string& pkl = m.at("archive/data.pkl").data;
  EXPECT_EQ(pkl.substr(0, 4), lit("\x80\x02}("));
  EXPECT_EQ(pkl.substr(pkl.size() - 2), "u.");
  const auto ids_at = pkl.find(lit("ctorch\nLongStorage\nX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK%t"));
  const auto aux_at = pkl.find(lit("ctorch\nBFloat16Storage\nX\x01\x00\x00\x00" "1X\x03\x00\x00\x00" "cpuM\x68\x0a"));
  const auto empty_at = pkl.find(lit("ctorch\nFloatStorage\nX\x01\x00\x00\x00" "2X\x03\x00\x00\x00" "cpuK\x00t"));
  EXPECT_NE(ids_at, std::string::npos);
  EXPECT_NE(aux_at, std::string::npos);
  EXPECT_NE(empty_at, std::string::npos);
  EXPECT_LT(ids_at, aux_at);
  EXPECT_LT(aux_at, empty_at);
  EXPECT_NE(pkl.find("ctorch._utils\n_rebuild_tensor_v2\n"), std::string::npos);
  // size (1, 37, 72) and contiguous strides (2664, 72, 1), then requires_grad False.
  EXPECT_NE(pkl.find(lit("K\x01K%KH\x87M\x68\x0aKHK\x01\x87\x89")), std::string::npos);
}

TEST(TorchSave, PickleOfScalarsIsPythonsProtocol2) {
  TempDir dir;
  write_torch_dict(dir / "x.pt", {{"n", int64_t{5}}, {"s", std::string("hi")}});
  EXPECT_EQ(by_name(read_zip(read_all(dir / "x.pt"))).at("archive/data.pkl").data,
            lit("\x80\x02}(X\x01\x00\x00\x00nK\x05X\x01\x00\x00\x00sX\x02\x00\x00\x00hiu."));
  write_torch_dict(dir / "empty.pt", {});
  EXPECT_EQ(by_name(read_zip(read_all(dir / "empty.pt"))).at("archive/data.pkl").data, "\x80\x02}.");
}

TEST(TorchSave, IntegersEncodeAsPythonEncodesThem) {
  // pickle.dumps(v, 2) of Python 3.11, between PROTO and STOP.
  const std::vector<std::pair<int64_t, std::string>> cases = {
      {0, lit("K\x00")},
      {255, "K\xff"},
      {256, lit("M\x00\x01")},
      {65535, "M\xff\xff"},
      {65536, lit("J\x00\x00\x01\x00")},
      {-1, "J\xff\xff\xff\xff"},
      {-5, "J\xfb\xff\xff\xff"},
      {2147483647, "J\xff\xff\xff\x7f"},
      {-2147483648LL, lit("J\x00\x00\x00\x80")},
      {2147483648LL, lit("\x8a\x05\x00\x00\x00\x80\x00")},
      {-2147483649LL, "\x8a\x05\xff\xff\xff\x7f\xff"},
      {549755813888LL, lit("\x8a\x06\x00\x00\x00\x00\x80\x00")},
      {-1099511627776LL, lit("\x8a\x06\x00\x00\x00\x00\x00\xff")},
      {INT64_MAX, "\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f"},
      {INT64_MIN, lit("\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80")},
  };
  const std::string head("\x80\x02}(X\x01\x00\x00\x00v", 10);
  for (const auto& [v, encoded] : cases) EXPECT_EQ(pickle_of_int(v), head + encoded + "u.") << v;
}

TEST(TorchSave, SameInputSameBytes) {
  TempDir dir;
  const auto b = bytes_of(1000, 6);
  const Entries entries = {{"t", TensorRef{"", TensorElement::U8, {10, 100}, b.data()}}, {"id", std::string("a")}};
  write_torch_dict(dir / "a.pt", entries);
  write_torch_dict(dir / "b.pt", entries);
  EXPECT_EQ(read_all(dir / "a.pt"), read_all(dir / "b.pt"));
}

// Written past the page cache (O_DIRECT, issue 21), through a buffer smaller than the tensors so
// that it is flushed mid-record and each record's CRC patches a block already on the disk: the
// same bytes as through the page cache. (Where the file system refuses O_DIRECT, as tmpfs may,
// both go through the page cache.)
TEST(TorchSave, DirectWritesTheSameBytes) {
  TempDir dir;
  const auto big = bytes_of(3 * 4096 + 123, 7), small = bytes_of(100, 8);
  const Entries entries = {{"a", TensorRef{"", TensorElement::U8, {3 * 4096 + 123}, big.data()}},
                           {"b", TensorRef{"", TensorElement::U8, {100}, small.data()}},
                           {"id", std::string("x")}};
  write_torch_dict(dir / "buffered.pt", entries);
  e3::io::DirectBuffer direct(2 * 4096);
  write_torch_dict(dir / "direct.pt", entries, &direct);
  EXPECT_EQ(read_all(dir / "direct.pt"), read_all(dir / "buffered.pt"));
  // Held: closed under its temporary name until committed; dropped, it leaves nothing.
  {
    std::vector<e3::io::TempFile> held;
    write_torch_dict(dir / "held.pt", entries, &direct, &held);
    ASSERT_EQ(held.size(), 1u);
    EXPECT_FALSE(std::filesystem::exists(dir / "held.pt"));
    held.front().commit();
    EXPECT_EQ(read_all(dir / "held.pt"), read_all(dir / "buffered.pt"));
    write_torch_dict(dir / "dropped.pt", entries, &direct, &held);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "dropped.pt"));
  EXPECT_FALSE(std::filesystem::exists(e3::io::temporary_path(dir / "dropped.pt")));
}

// A tensor made where it is written (TensorFill, issue 21): the same file as from its bytes,
// through the page cache in pieces of at most kFillPiece and past it through a buffer smaller
// than the tensor, each piece asked for in order and the records' CRCs computed over the pieces.
TEST(TorchSave, AFilledTensorWritesTheSameBytesAsItsData) {
  TempDir dir;
  const auto big = bytes_of(2 * e3::io::TempFile::kFillPiece + 4096 * 3 + 77, 9), small = bytes_of(100, 10);
  const Entries from_data = {{"a", TensorRef{"", TensorElement::U8, {static_cast<int64_t>(big.size())}, big.data()}},
                             {"b", TensorRef{"", TensorElement::U8, {100}, small.data()}},
                             {"id", std::string("x")}};
  write_torch_dict(dir / "data.pt", from_data);
  for (const bool direct_write : {false, true}) {
    uint64_t next = 0;
    size_t largest_piece = 0;
    TensorRef filled{"", TensorElement::U8, {static_cast<int64_t>(big.size())}, nullptr};
    filled.fill = [&](uint64_t offset, unsigned char* dst, size_t n) {
      ASSERT_EQ(offset, next) << "pieces out of order";
      std::memcpy(dst, big.data() + offset, n);
      next = offset + n;
      largest_piece = std::max(largest_piece, n);
    };
    const Entries entries = {{"a", filled}, {"b", from_data[1].second}, {"id", std::string("x")}};
    e3::io::DirectBuffer direct(3 * 4096);
    const auto path = dir / (direct_write ? "filled_direct.pt" : "filled.pt");
    write_torch_dict(path, entries, direct_write ? &direct : nullptr);
    EXPECT_EQ(next, big.size());
    EXPECT_LE(largest_piece, e3::io::TempFile::kFillPiece);
    EXPECT_EQ(read_all(path), read_all(dir / "data.pt")) << (direct_write ? "direct" : "through the page cache");
  }
}

// ---------------------------------------------------------------------------------------------
// Failures

TEST(TorchSave, RefusesAFileThatNeedsZip64WithoutWriting) {
  TempDir dir;
  const uint8_t byte = 0;  // never read: the size is refused before anything is written
  const auto path = dir / "huge.pt";
  auto err = error_of([&] {
    write_torch_dict(path, {{"t", TensorRef{"", TensorElement::BF16, {int64_t{1} << 31}, &byte}}});
  });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_TRUE(Contains(err->what(), path.string()));
  EXPECT_TRUE(Contains(err->what(), "zip64"));
  EXPECT_TRUE(dir_entries(dir.path()).empty());
}

TEST(TorchSave, AnUnwritablePathIsAnOutputErrorNamingIt) {
  TempDir dir;
  const auto path = dir / "no_such_dir" / "x.pt";
  auto err = error_of([&] { write_torch_dict(path, {{"n", int64_t{1}}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_TRUE(Contains(err->what(), path.string()));
}

TEST(TorchSave, AWriteThatFailsMidwayLeavesNoFile) {
  TempDir dir;
  const auto big = bytes_of(4 << 20, 7);
  const auto path = dir / "data_1.ckpt";
  std::optional<e3::Error> err;
  {
    const e3::test::FileSizeLimit full(1 << 20);
    err = error_of([&] { write_torch_dict(path, {{"t", TensorRef{"", TensorElement::U8, {4 << 20}, big.data()}}}); });
  }
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_TRUE(Contains(err->what(), path.string()));
  EXPECT_TRUE(Contains(err->what(), "File too large"));
  EXPECT_TRUE(dir_entries(dir.path()).empty()) << "left " << dir_entries(dir.path()).front();
}

TEST(TorchSave, BadKeysAndTextWriteNothing) {
  TempDir dir;
  const auto path = dir / "bad.pt";
  auto err = error_of([&] { write_torch_dict(path, {{"a", int64_t{1}}, {"a", int64_t{2}}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Internal);
  EXPECT_TRUE(Contains(err->what(), path.string()));
  err = error_of([&] { write_torch_dict(path, {{"id", std::string("\xed\xa0\x80")}}); });  // a lone surrogate
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  err = error_of([&] { write_torch_dict(path, {{"k\xff", int64_t{1}}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  err = error_of([&] { write_torch_dict(path, {{"t", TensorRef{"", TensorElement::F32, {2, -2}, &err}}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Internal);
  EXPECT_TRUE(dir_entries(dir.path()).empty());
}

}  // namespace
