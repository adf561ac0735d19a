// io::write_safetensors: the header's layout (length, JSON, padding, order, offsets, metadata),
// the data, reading back with the project's own reader, and failures (unwritable path, a write
// that fails midway, a caller's bug) leaving no file behind.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "io/npy_write.h"
#include "io/safetensors_write.h"
#include "core/error.h"
#include "model/safetensors.h"
#include "support/file_size_limit.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::io::TensorElement;
using e3::io::TensorRef;
using e3::io::write_safetensors;
using e3::test::Contains;
using e3::test::error_of;
using e3::test::TempDir;

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + 31 * i + (i >> 8));
  return b;
}

std::vector<std::string> dir_entries(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

struct Parsed {
  uint64_t header_len;
  std::string header;
  nlohmann::ordered_json json;
  std::string data;
};

Parsed parse(const std::filesystem::path& path) {
  const std::string file = read_all(path);
  Parsed p;
  EXPECT_GE(file.size(), 8u);
  std::memcpy(&p.header_len, file.data(), 8);  // little-endian host
  EXPECT_LE(8 + p.header_len, file.size());
  p.header = file.substr(8, p.header_len);
  p.json = nlohmann::ordered_json::parse(p.header);
  p.data = file.substr(8 + p.header_len);
  return p;
}

TEST(SafetensorsWrite, HeaderLayoutOffsetsMetadataAndData) {
  TempDir dir;
  const auto bf16 = bytes_of(2 * 3 * 2, 1), i64 = bytes_of(3 * 8, 2), u8 = bytes_of(5, 3);
  const std::vector<TensorRef> tensors = {{"hidden_states", TensorElement::BF16, {2, 3}, bf16.data()},
                                          {"token_ids", TensorElement::I64, {3}, i64.data()},
                                          {"empty", TensorElement::F32, {0}, nullptr},
                                          {"odd", TensorElement::U8, {5}, u8.data()}};
  const auto path = dir / "hs_0.safetensors";
  write_safetensors(path, tensors, {{"b", "2"}, {"a", "ü"}});

  const Parsed p = parse(path);
  EXPECT_EQ(p.header_len % 8, 0u);
  EXPECT_EQ(p.header.front(), '{');
  const size_t end = p.header.find_last_not_of(' ');
  EXPECT_EQ(p.header[end], '}');
  EXPECT_LT(p.header.size() - end - 1, 8u) << "padded past the next multiple of 8";
  std::vector<std::string> keys;
  for (const auto& [k, v] : p.json.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "hidden_states", "token_ids", "empty", "odd"}));
  EXPECT_EQ(p.json["__metadata__"], (nlohmann::ordered_json{{"a", "ü"}, {"b", "2"}}));
  EXPECT_EQ(p.json["hidden_states"].dump(), R"({"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]})");
  EXPECT_EQ(p.json["token_ids"].dump(), R"({"dtype":"I64","shape":[3],"data_offsets":[12,36]})");
  EXPECT_EQ(p.json["empty"].dump(), R"({"dtype":"F32","shape":[0],"data_offsets":[36,36]})");
  EXPECT_EQ(p.json["odd"].dump(), R"({"dtype":"U8","shape":[5],"data_offsets":[36,41]})");
  ASSERT_EQ(p.data.size(), 41u);
  EXPECT_EQ(0, std::memcmp(p.data.data(), bf16.data(), 12));
  EXPECT_EQ(0, std::memcmp(p.data.data() + 12, i64.data(), 24));
  EXPECT_EQ(0, std::memcmp(p.data.data() + 36, u8.data(), 5));
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{"hs_0.safetensors"});
}

TEST(SafetensorsWrite, EveryElementTypeHasItsSafetensorsName) {
  TempDir dir;
  const auto b = bytes_of(64, 4);
  const std::vector<std::pair<TensorElement, std::string>> kinds = {
      {TensorElement::BF16, "BF16"}, {TensorElement::F16, "F16"}, {TensorElement::F32, "F32"},
      {TensorElement::I64, "I64"},   {TensorElement::I32, "I32"}, {TensorElement::U8, "U8"},
      {TensorElement::Bool, "BOOL"}};
  std::vector<TensorRef> tensors;
  for (const auto& [element, name] : kinds) tensors.push_back({name, element, {2}, b.data()});
  write_safetensors(dir / "all.safetensors", tensors);
  const Parsed p = parse(dir / "all.safetensors");
  uint64_t at = 0;
  for (const auto& [element, name] : kinds) {
    EXPECT_EQ(p.json[name]["dtype"], name);
    const uint64_t size = 2 * e3::io::element_size(element);
    EXPECT_EQ(p.json[name]["data_offsets"], (nlohmann::json{at, at + size})) << name;
    at += size;
  }
  EXPECT_EQ(p.data.size(), at);
}

TEST(SafetensorsWrite, NoMetadataEntryWithoutMetadata) {
  TempDir dir;
  write_safetensors(dir / "none.safetensors", {});
  const Parsed p = parse(dir / "none.safetensors");
  EXPECT_EQ(p.header, "{}      ");
  EXPECT_TRUE(p.data.empty());
  const auto b = bytes_of(8, 5);
  write_safetensors(dir / "one.safetensors", {{"x", TensorElement::I64, {1}, b.data()}});
  EXPECT_FALSE(parse(dir / "one.safetensors").json.contains("__metadata__"));
}

TEST(SafetensorsWrite, TheProjectsReaderReadsItBack) {
  TempDir dir;
  const auto bf16 = bytes_of(4 * 4 * 6 * 2, 6), i64 = bytes_of(4 * 8, 7);
  write_safetensors(dir / "hs_1.safetensors", {{"hidden_states", TensorElement::BF16, {4, 4, 6}, bf16.data()},
                                               {"token_ids", TensorElement::I64, {4}, i64.data()}});
  const e3::model::SafetensorsFile file(dir / "hs_1.safetensors");
  const auto* hs = file.find("hidden_states");
  const auto* ids = file.find("token_ids");
  ASSERT_TRUE(hs && ids);
  EXPECT_EQ(hs->dtype, e3::model::StDType::BF16);
  EXPECT_EQ(hs->shape, (std::vector<int64_t>{4, 4, 6}));
  EXPECT_EQ(ids->dtype, e3::model::StDType::I64);
  EXPECT_EQ(0, std::memcmp(file.data(*hs), bf16.data(), bf16.size()));
  EXPECT_EQ(0, std::memcmp(file.data(*ids), i64.data(), i64.size()));
}

TEST(SafetensorsWrite, ReplacesAnExistingFile) {
  TempDir dir;
  const auto a = bytes_of(8, 8), b = bytes_of(16, 9);
  write_safetensors(dir / "x.safetensors", {{"t", TensorElement::I64, {1}, a.data()}});
  write_safetensors(dir / "x.safetensors", {{"t", TensorElement::I64, {2}, b.data()}});
  const Parsed p = parse(dir / "x.safetensors");
  EXPECT_EQ(p.json["t"]["shape"], (nlohmann::json{2}));
  EXPECT_EQ(p.data, std::string(b.begin(), b.end()));
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{"x.safetensors"});
}

// Past the page cache (O_DIRECT, issue 21) through a buffer smaller than the data, the file's
// end cut back from a whole block: the same bytes as through the page cache.
TEST(SafetensorsWrite, DirectWritesTheSameBytes) {
  TempDir dir;
  const auto a = bytes_of(8 * 1000, 11), b = bytes_of(2 * 5000 + 2, 12);
  const std::vector<e3::io::TensorRef> tensors = {{"ids", TensorElement::I64, {1000}, a.data()},
                                                  {"hs", TensorElement::BF16, {5001}, b.data()}};
  write_safetensors(dir / "buffered.safetensors", tensors, {{"format", "pt"}});
  e3::io::DirectBuffer direct(4096);
  write_safetensors(dir / "direct.safetensors", tensors, {{"format", "pt"}}, &direct);
  EXPECT_EQ(read_all(dir / "direct.safetensors"), read_all(dir / "buffered.safetensors"));
}

// A tensor made where it is written (TensorFill, issue 21): the same file as from its bytes,
// with and without O_DIRECT, its pieces asked for in order.
TEST(SafetensorsWrite, AFilledTensorWritesTheSameBytesAsItsData) {
  TempDir dir;
  const auto a = bytes_of(8 * 1000, 13), b = bytes_of(2 * (e3::io::TempFile::kFillPiece + 5000), 14);
  const std::vector<e3::io::TensorRef> from_data = {
      {"ids", TensorElement::I64, {1000}, a.data()},
      {"hs", TensorElement::BF16, {static_cast<int64_t>(b.size() / 2)}, b.data()}};
  write_safetensors(dir / "data.safetensors", from_data, {{"format", "pt"}});
  for (const bool direct_write : {false, true}) {
    uint64_t next = 0;
    std::vector<e3::io::TensorRef> filled = from_data;
    filled[1].data = nullptr;
    filled[1].fill = [&](uint64_t offset, unsigned char* dst, size_t n) {
      ASSERT_EQ(offset, next) << "pieces out of order";
      std::memcpy(dst, b.data() + offset, n);
      next = offset + n;
    };
    e3::io::DirectBuffer direct(4096);
    const auto path = dir / (direct_write ? "filled_direct.safetensors" : "filled.safetensors");
    write_safetensors(path, filled, {{"format", "pt"}}, direct_write ? &direct : nullptr);
    EXPECT_EQ(next, b.size());
    EXPECT_EQ(read_all(path), read_all(dir / "data.safetensors")) << (direct_write ? "direct" : "through the page cache");
  }
}

// The .npy writer takes a filled tensor too (tensor_bytes accepts one without data).
TEST(NpyWrite, AFilledTensorWritesTheSameBytesAsItsData) {
  TempDir dir;
  const auto b = bytes_of(4 * (e3::io::TempFile::kFillPiece / 2 + 3000), 15);
  const e3::io::TensorRef from_data{"hs", TensorElement::F32, {static_cast<int64_t>(b.size() / 4)}, b.data()};
  e3::io::write_npy(dir / "data.npy", from_data);
  e3::io::TensorRef filled = from_data;
  filled.data = nullptr;
  uint64_t next = 0;
  filled.fill = [&](uint64_t offset, unsigned char* dst, size_t n) {
    ASSERT_EQ(offset, next) << "pieces out of order";
    std::memcpy(dst, b.data() + offset, n);
    next = offset + n;
  };
  e3::io::write_npy(dir / "filled.npy", filled);
  EXPECT_EQ(next, b.size());
  EXPECT_EQ(read_all(dir / "filled.npy"), read_all(dir / "data.npy"));
}

TEST(SafetensorsWrite, AnUnwritablePathIsAnOutputErrorNamingIt) {
  TempDir dir;
  const auto b = bytes_of(8, 10);
  const auto missing = dir / "no_such_dir" / "hs_0.safetensors";
  auto err = error_of([&] { write_safetensors(missing, {{"t", TensorElement::I64, {1}, b.data()}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_TRUE(Contains(err->what(), missing.string()));
  EXPECT_TRUE(Contains(err->what(), "No such file or directory"));
  // A parent that is a file.
  write_safetensors(dir / "file", {});
  err = error_of([&] { write_safetensors(dir / "file" / "x.safetensors", {}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_TRUE(Contains(err->what(), (dir / "file" / "x.safetensors").string()));
}

TEST(SafetensorsWrite, AWriteThatFailsMidwayLeavesNoFile) {
  TempDir dir;
  const auto big = bytes_of(4 << 20, 11);
  const auto path = dir / "hs_2.safetensors";
  std::optional<e3::Error> err;
  {
    const e3::test::FileSizeLimit full(1 << 20);
    err = error_of([&] { write_safetensors(path, {{"t", TensorElement::U8, {4 << 20}, big.data()}}); });
  }
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_TRUE(Contains(err->what(), path.string()));
  EXPECT_TRUE(Contains(err->what(), "File too large"));
  EXPECT_TRUE(dir_entries(dir.path()).empty()) << "left " << dir_entries(dir.path()).front();
}

TEST(SafetensorsWrite, CallerBugsAreInternalErrorsAndWriteNothing) {
  TempDir dir;
  const auto b = bytes_of(16, 12);
  const auto path = dir / "bad.safetensors";
  const std::vector<std::vector<TensorRef>> bad = {
      {{"t", TensorElement::I64, {1}, b.data()}, {"t", TensorElement::I64, {1}, b.data()}},  // duplicate
      {{"t", TensorElement::I64, {-1}, b.data()}},                                           // negative
      {{"t", TensorElement::I64, {2}, nullptr}},                                             // no data
      {{"__metadata__", TensorElement::U8, {1}, b.data()}},                                  // reserved
      {{"", TensorElement::U8, {1}, b.data()}},                                              // no name
      {{"t", TensorElement::BF16, {int64_t{1} << 40, int64_t{1} << 40}, b.data()}},          // overflows
  };
  for (const auto& tensors : bad) {
    auto err = error_of([&] { write_safetensors(path, tensors); });
    ASSERT_TRUE(err) << tensors.front().name;
    EXPECT_EQ(err->kind(), ErrorKind::Internal) << err->what();
    EXPECT_TRUE(Contains(err->what(), path.string()));
  }
  EXPECT_TRUE(dir_entries(dir.path()).empty());
}

TEST(SafetensorsWrite, TextThatIsNotUtf8IsAnOutputError) {
  TempDir dir;
  const auto b = bytes_of(1, 13);
  const auto path = dir / "bad.safetensors";
  auto err = error_of([&] { write_safetensors(path, {{"t\xff", TensorElement::U8, {1}, b.data()}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_TRUE(Contains(err->what(), path.string()));
  err = error_of([&] { write_safetensors(path, {}, {{"k", "\xc3"}}); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_TRUE(dir_entries(dir.path()).empty());
}

}  // namespace
