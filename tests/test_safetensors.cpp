// SafetensorsFile header validation, Checkpoint (single file and sharded), and WeightLoader
// slicing/conversion on the CPU backend.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::model::Checkpoint;
using e3::model::SafetensorsFile;
using e3::model::StDType;
using e3::model::WeightLoader;
using e3::model::WeightSpec;
using e3::model::WeightStore;
using e3::test::bf16_bytes;
using e3::test::f32_bytes;
using e3::test::StTensor;
using e3::test::TempDir;
using e3::test::write_raw_safetensors;
using e3::test::write_safetensors;
using e3::test::write_text;

using e3::test::Contains;
using e3::test::error_of;

std::string shape_header(const std::string& name, const std::string& dtype, const std::string& shape,
                         uint64_t begin, uint64_t end) {
  return "{\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}}";
}

// A raw file whose header is `header`, followed by `data_bytes` zero bytes.
void write_with_header(const std::filesystem::path& path, const std::string& header, size_t data_bytes) {
  write_raw_safetensors(path, header.size(), header, std::vector<uint8_t>(data_bytes, 0));
}

// Expects opening `path` to fail with a model error whose message names the file and `part`.
void expect_bad_file(const std::filesystem::path& path, const std::string& part) {
  auto err = error_of([&] { SafetensorsFile file(path); });
  ASSERT_TRUE(err.has_value()) << "opening " << path << " did not throw";
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), path.string()));
  EXPECT_TRUE(Contains(err->what(), part));
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

TEST(SafetensorsFile, ValidFileParsesNamesDtypesShapesAndData) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  const std::vector<float> a = {0.5f, -1.0f, 2.0f, 3.25f, -4.0f, 5.0f};
  const std::vector<float> b = {1.0f, -2.0f, 0.125f, 64.0f};
  write_safetensors(path, {{"a", "F32", {2, 3}, f32_bytes(a)}, {"b.weight", "BF16", {4}, bf16_bytes(b)}});

  SafetensorsFile file(path);
  EXPECT_EQ(file.path(), path);
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.find("missing"), nullptr);

  const auto* ta = file.find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->name, "a");
  EXPECT_EQ(ta->dtype, StDType::F32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->numel(), 6);
  EXPECT_EQ(ta->shape_str(), "[2, 3]");
  EXPECT_EQ(ta->begin, 0u);
  EXPECT_EQ(ta->end, 24u);
  const auto a_bytes = f32_bytes(a);
  EXPECT_EQ(std::memcmp(file.data(*ta), a_bytes.data(), a_bytes.size()), 0);

  const auto* tb = file.find("b.weight");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, StDType::BF16);
  EXPECT_EQ(tb->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(tb->begin, 24u);
  EXPECT_EQ(tb->end, 32u);
  const auto b_bytes = bf16_bytes(b);
  EXPECT_EQ(std::memcmp(file.data(*tb), b_bytes.data(), b_bytes.size()), 0);
}

TEST(SafetensorsFile, MetadataEntryIsNotATensor) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})";
  write_with_header(path, header, 8);
  SafetensorsFile file(path);
  EXPECT_EQ(file.tensors().size(), 1u);
  EXPECT_EQ(file.find("__metadata__"), nullptr);
  ASSERT_NE(file.find("x"), nullptr);
  EXPECT_EQ(file.find("x")->dtype, StDType::I32);
}

TEST(SafetensorsFile, MalformedHeaderJson) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_with_header(path, R"({"a":{"dtype":"F32",)", 0);
  expect_bad_file(path, "malformed header");
}

TEST(SafetensorsFile, HeaderLengthBeyondFileIsTruncated) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  const std::string header = shape_header("a", "F32", "[1]", 0, 4);
  write_raw_safetensors(path, header.size() + 100, header, f32_bytes({1.0f}));
  expect_bad_file(path, "truncated file");
}

TEST(SafetensorsFile, FileShorterThanLengthPrefix) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_text(path, "abc");
  expect_bad_file(path, "truncated file (3 bytes");
}

TEST(SafetensorsFile, DataOffsetsPastEndOfData) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  // The header promises 24 bytes of data but the file was cut after 12.
  write_with_header(path, shape_header("layer.w", "F32", "[2,3]", 0, 24), 12);
  expect_bad_file(path, "tensor 'layer.w'");
  expect_bad_file(path, "run past the end of the data (12 bytes)");
}

TEST(SafetensorsFile, ReversedOffsets) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_with_header(path, shape_header("w", "F32", "[1]", 8, 4), 8);
  expect_bad_file(path, "tensor 'w'");
  expect_bad_file(path, "data_offsets [8, 4] are reversed");
}

TEST(SafetensorsFile, ByteLengthMustMatchShapeAndDtype) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_with_header(path, shape_header("w", "F32", "[2,3]", 0, 20), 24);
  expect_bad_file(path, "tensor 'w'");
  expect_bad_file(path, "20 bytes for shape [2, 3] of F32");
}

TEST(SafetensorsFile, ByteLengthCheckUsesDtypeSize) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  // 12 bytes would be right for F32 [3] but BF16 [3] needs 6.
  write_with_header(path, shape_header("w", "BF16", "[3]", 0, 12), 12);
  expect_bad_file(path, "12 bytes for shape [3] of BF16");
}

TEST(SafetensorsFile, OverlappingRanges) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  write_with_header(path, header, 24);
  expect_bad_file(path, "overlap at byte 8");
}

TEST(SafetensorsFile, UnknownDtype) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_with_header(path, shape_header("w", "F128", "[1]", 0, 16), 16);
  expect_bad_file(path, "tensor 'w'");
  expect_bad_file(path, "unknown dtype 'F128'");
}

TEST(SafetensorsFile, HeaderNotAnObject) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_with_header(path, "[1,2,3]", 0);
  expect_bad_file(path, "header is not a JSON object");
}

TEST(SafetensorsFile, EntryWithoutDataOffsets) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_with_header(path, R"({"w":{"dtype":"F32","shape":[1]}})", 4);
  expect_bad_file(path, "tensor 'w'");
  expect_bad_file(path, "needs dtype, shape and two data_offsets");
}

TEST(SafetensorsFile, NegativeDimension) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_with_header(path, shape_header("w", "F32", "[-1]", 0, 4), 4);
  expect_bad_file(path, "bad dimension -1");
}

// Element and byte counts wrap modulo 2^64: 2^62 * 4 F32 elements is "0 bytes" and
// (2^62 + 1) F32 elements is "4 bytes". Such shapes describe far more data than the file
// holds, so the header must be rejected.
TEST(SafetensorsFile, ShapeWhoseByteCountOverflowsIsRejected) {
  TempDir dir;
  const auto empty = dir / "empty.safetensors";
  write_with_header(empty, shape_header("w", "F32", "[4611686018427387904,4]", 0, 0), 0);
  expect_bad_file(empty, "tensor 'w'");

  const auto four_bytes = dir / "four.safetensors";
  write_with_header(four_bytes, shape_header("w", "F32", "[4611686018427387905]", 0, 4), 4);
  expect_bad_file(four_bytes, "tensor 'w'");
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors",
                    {{"b", "F32", {2}, f32_bytes({1, 2})}, {"a", "BF16", {1, 2}, bf16_bytes({3, 4})}});
  Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.dir(), dir.path());
  EXPECT_TRUE(ckpt.contains("a"));
  EXPECT_TRUE(ckpt.contains("b"));
  EXPECT_FALSE(ckpt.contains("c"));
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ckpt.require("a").dtype, StDType::BF16);
  EXPECT_EQ(ckpt.require("b").shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(ckpt.file_of("a").path(), dir / "model.safetensors");
}

TEST(Checkpoint, ShardedThroughIndex) {
  TempDir dir;
  write_safetensors(dir / "model-00001-of-00002.safetensors",
                    {{"embed", "F32", {2, 2}, f32_bytes({1, 2, 3, 4})}, {"norm", "F32", {2}, f32_bytes({5, 6})}});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {{"head", "F32", {1, 2}, f32_bytes({7, 8})}});
  write_text(dir / "model.safetensors.index.json", R"({
    "metadata": {"total_size": 32},
    "weight_map": {
      "embed": "model-00001-of-00002.safetensors",
      "norm": "model-00001-of-00002.safetensors",
      "head": "model-00002-of-00002.safetensors"
    }
  })");

  Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"embed", "head", "norm"}));
  EXPECT_EQ(ckpt.file_of("embed").path(), dir / "model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt.file_of("norm").path(), dir / "model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt.file_of("head").path(), dir / "model-00002-of-00002.safetensors");

  const auto& head = ckpt.require("head");
  float values[2];
  std::memcpy(values, ckpt.file_of("head").data(head), sizeof values);
  EXPECT_EQ(values[0], 7.0f);
  EXPECT_EQ(values[1], 8.0f);
}

TEST(Checkpoint, IndexNamingMissingShard) {
  TempDir dir;
  write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", "F32", {1}, f32_bytes({1})}});
  write_text(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                "b": "model-00002-of-00002.safetensors"}})");
  auto err = error_of([&] { Checkpoint ckpt(dir.path()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), "shard 'model-00002-of-00002.safetensors'"));
  EXPECT_TRUE(Contains(err->what(), "tensor 'b'"));
  EXPECT_TRUE(Contains(err->what(), (dir / "model.safetensors.index.json").string()));
}

TEST(Checkpoint, IndexListsTensorMissingFromItsShard) {
  TempDir dir;
  write_safetensors(dir / "shard1.safetensors", {{"a", "F32", {1}, f32_bytes({1})}});
  write_text(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "shard1.safetensors", "ghost": "shard1.safetensors"}})");
  auto err = error_of([&] { Checkpoint ckpt(dir.path()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), "tensor 'ghost'"));
  EXPECT_TRUE(Contains(err->what(), (dir / "shard1.safetensors").string()));
}

TEST(Checkpoint, DirectoryWithoutCheckpoint) {
  TempDir dir;
  auto err = error_of([&] { Checkpoint ckpt(dir.path()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), dir.path().string()));
  EXPECT_TRUE(Contains(err->what(), "no model.safetensors"));
}

TEST(Checkpoint, RequireOfMissingTensorNamesTensorAndFile) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {{"a", "F32", {1}, f32_bytes({1})}});
  Checkpoint ckpt(dir.path());
  auto err = error_of([&] { ckpt.require("model.layers.0.mlp.up_proj.weight"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), "'model.layers.0.mlp.up_proj.weight'"));
  EXPECT_TRUE(Contains(err->what(), (dir / "model.safetensors").string()));

  auto err2 = error_of([&] { ckpt.file_of("nope"); });
  ASSERT_TRUE(err2.has_value());
  EXPECT_TRUE(Contains(err2->what(), "'nope'"));
}

TEST(Checkpoint, FingerprintIsStableAndFollowsShapes) {
  TempDir one, two, reshaped, revalued;
  const auto bytes = f32_bytes({1, 2, 3, 4, 5, 6});
  write_safetensors(one / "model.safetensors", {{"w", "F32", {2, 3}, bytes}, {"n", "F32", {1}, f32_bytes({1})}});
  write_safetensors(two / "model.safetensors", {{"w", "F32", {2, 3}, bytes}, {"n", "F32", {1}, f32_bytes({1})}});
  write_safetensors(reshaped / "model.safetensors",
                    {{"w", "F32", {3, 2}, bytes}, {"n", "F32", {1}, f32_bytes({1})}});
  write_safetensors(revalued / "model.safetensors",
                    {{"w", "F32", {2, 3}, f32_bytes({9, 9, 9, 9, 9, 9})}, {"n", "F32", {1}, f32_bytes({2})}});

  const std::string fp = Checkpoint(one.path()).fingerprint();
  EXPECT_FALSE(fp.empty());
  EXPECT_EQ(Checkpoint(one.path()).fingerprint(), fp);
  EXPECT_EQ(Checkpoint(two.path()).fingerprint(), fp);
  EXPECT_NE(Checkpoint(reshaped.path()).fingerprint(), fp);
  // Documented as covering names, dtypes and shapes only, not the values.
  EXPECT_EQ(Checkpoint(revalued.path()).fingerprint(), fp);
}

// ---------------------------------------------------------------------------------------------
// WeightLoader

std::vector<uint8_t> f16_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = e3::float_to_fp16(values[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

constexpr int64_t kRows = 4, kCols = 6;

// Multiples of 1/4 in [-3, 3): exact in BF16, F16 and F32, so conversions must be lossless.
float matrix_value(int64_t r, int64_t c) { return static_cast<float>(r * kCols + c) * 0.25f - 3.0f; }

std::vector<float> matrix_values() {
  std::vector<float> v;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) v.push_back(matrix_value(r, c));
  return v;
}

class WeightLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto m = matrix_values();
    write_safetensors(dir_ / "model.safetensors",
                      {{"w.bf16", "BF16", {kRows, kCols}, bf16_bytes(m)},
                       {"w.f16", "F16", {kRows, kCols}, f16_bytes(m)},
                       {"w.f32", "F32", {kRows, kCols}, f32_bytes(m)},
                       {"bias", "BF16", {kRows}, bf16_bytes({-1.5f, 0.5f, 2.0f, 8.0f})},
                       {"ints", "I32", {2, 2}, std::vector<uint8_t>(16, 0)}});
    ckpt_.emplace(dir_.path());
    backend_ = e3::kernels::make_cpu_backend(1);
  }

  // Loads `spec` and returns its values, row-major, checking the slice shape on the way.
  std::vector<float> load(const WeightSpec& spec) {
    WeightLoader loader(&*ckpt_, *backend_, store_);
    const e3::kernels::Tensor t = loader.load(spec);
    EXPECT_EQ(t.rows, spec.slice_rows());
    EXPECT_EQ(t.cols, spec.slice_cols());
    std::vector<float> out(static_cast<size_t>(t.numel()));
    backend_->download_float(t, out.data());
    return out;
  }

  static std::vector<float> block(int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    std::vector<float> out;
    for (int64_t r = r0; r < r0 + rows; ++r)
      for (int64_t c = c0; c < c0 + cols; ++c) out.push_back(matrix_value(r, c));
    return out;
  }

  TempDir dir_;
  std::optional<Checkpoint> ckpt_;
  std::unique_ptr<e3::kernels::Backend> backend_;
  WeightStore store_;
};

TEST_F(WeightLoaderTest, FullRowAndColumnBlocksAreExact) {
  for (const std::string name : {"w.bf16", "w.f16", "w.f32"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(load(WeightSpec::replicated(name, {kRows, kCols})), block(0, kRows, 0, kCols));
    EXPECT_EQ(load(WeightSpec::row_block(name, {kRows, kCols}, 1, 2)), block(1, 2, 0, kCols));
    EXPECT_EQ(load(WeightSpec::row_block(name, {kRows, kCols}, 3, 1)), block(3, 1, 0, kCols));
    EXPECT_EQ(load(WeightSpec::col_block(name, {kRows, kCols}, 2, 3)), block(0, kRows, 2, 3));
    EXPECT_EQ(load(WeightSpec::col_block(name, {kRows, kCols}, 0, 1)), block(0, kRows, 0, 1));
  }
}

TEST_F(WeightLoaderTest, RowBlockOfBiasSelectsElements) {
  EXPECT_EQ(load(WeightSpec::replicated("bias", {kRows})), (std::vector<float>{-1.5f, 0.5f, 2.0f, 8.0f}));
  EXPECT_EQ(load(WeightSpec::row_block("bias", {kRows}, 2, 2)), (std::vector<float>{2.0f, 8.0f}));
}

TEST_F(WeightLoaderTest, StoreCountsLoadedBytes) {
  load(WeightSpec::replicated("w.f32", {kRows, kCols}));
  load(WeightSpec::row_block("w.bf16", {kRows, kCols}, 0, 2));
  // The CPU backend computes in F32, whatever the checkpoint's dtype.
  EXPECT_EQ(store_.bytes(), static_cast<size_t>((kRows * kCols + 2 * kCols) * 4));
}

TEST_F(WeightLoaderTest, WrongShapeNamesTensorAndFile) {
  WeightLoader loader(&*ckpt_, *backend_, store_);
  auto err = error_of([&] { loader.load(WeightSpec::replicated("w.f32", {kCols, kRows})); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), "'w.f32'"));
  EXPECT_TRUE(Contains(err->what(), (dir_ / "model.safetensors").string()));
  EXPECT_TRUE(Contains(err->what(), "has shape [4, 6], expected [6, 4]"));
}

TEST_F(WeightLoaderTest, UnsupportedDtypeNamesTensorAndDtype) {
  WeightLoader loader(&*ckpt_, *backend_, store_);
  auto err = error_of([&] { loader.load(WeightSpec::replicated("ints", {2, 2})); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), "'ints'"));
  EXPECT_TRUE(Contains(err->what(), (dir_ / "model.safetensors").string()));
  EXPECT_TRUE(Contains(err->what(), "I32"));
}

TEST_F(WeightLoaderTest, MissingTensorNamesTensorAndFile) {
  WeightLoader loader(&*ckpt_, *backend_, store_);
  auto err = error_of([&] { loader.load(WeightSpec::replicated("lm_head.weight", {kRows, kCols})); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), "'lm_head.weight'"));
  EXPECT_TRUE(Contains(err->what(), (dir_ / "model.safetensors").string()));
}

TEST_F(WeightLoaderTest, WithoutCheckpointOnlyAllocates) {
  WeightLoader planner(nullptr, *backend_, store_);
  const auto t = planner.load(WeightSpec::col_block("not.in.any.file", {8, 10}, 5, 5));
  EXPECT_EQ(t.rows, 8);
  EXPECT_EQ(t.cols, 5);
  EXPECT_EQ(store_.bytes(), 8u * 5u * 4u);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Hostile headers and index files

TEST(SafetensorsHostile, HeaderNestedWithoutEndIsRefusedWhileParsing) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  const std::string deep = std::string(100000, '[') + "1" + std::string(100000, ']');
  write_with_header(path, R"({"w":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})", 4);
  expect_bad_file(path, "nested deeper than 64 levels");
  expect_bad_file(path, "w.shape[0]");
}

TEST(SafetensorsHostile, NumberOverflowInMetadataNamesFileAndKey) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_with_header(path, R"({"__metadata__":{"format":"pt","scale":1e400},)" +
                              shape_header("w", "F32", "[1]", 0, 4).substr(1), 4);
  expect_bad_file(path, "__metadata__.scale");
}

TEST(SafetensorsHostile, HugeStringsAreClippedInMessages) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  write_with_header(path, shape_header("w", std::string(1 << 20, 'F'), "[1]", 0, 4), 4);
  auto err = error_of([&] { SafetensorsFile file(path); });
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(Contains(err->what(), "unknown dtype 'FFFF"));
  EXPECT_LT(std::string(err->what()).size(), 1000u);

  write_with_header(path, shape_header(std::string(1 << 20, 'w'), "F32", "[1]", 0, 8), 8);
  err = error_of([&] { SafetensorsFile file(path); });
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(Contains(err->what(), "tensor 'wwww"));
  EXPECT_LT(std::string(err->what()).size(), 1000u);
}

TEST(SafetensorsHostile, DimensionPastInt64IsRefused) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  // As int64 this is -1: with a zero beside it the byte count would still be 0.
  write_with_header(path, shape_header("w", "F32", "[0,18446744073709551615]", 0, 0), 0);
  expect_bad_file(path, "bad dimension 18446744073709551615");
}

TEST(SafetensorsHostile, OddHeaderLengthGivesMisalignedDataThatStillLoads) {
  TempDir dir;
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, -7.5f, 1024.0f, 0.0078125f};
  std::string header = shape_header("w", "BF16", "[2,3]", 0, 12);
  header += std::string(header.size() % 2 == 0 ? 1 : 0, ' ');  // odd: the data starts at an odd offset
  write_raw_safetensors(dir / "model.safetensors", header.size(), header, bf16_bytes(values));
  const Checkpoint ckpt(dir.path());
  ASSERT_EQ(reinterpret_cast<uintptr_t>(ckpt.file_of("w").data(ckpt.require("w"))) % 2, 1u);
  auto backend = e3::kernels::make_cpu_backend(1);
  WeightStore store;
  WeightLoader loader(&ckpt, *backend, store);
  const e3::kernels::Tensor t = loader.load(WeightSpec::replicated("w", {2, 3}));
  std::vector<float> out(6);
  backend->download_float(t, out.data());
  EXPECT_EQ(out, values);
}

// Expects opening the checkpoint in `dir` to fail with a model error naming the index and `part`.
void expect_bad_index(const TempDir& dir, const std::string& part) {
  auto err = error_of([&] { Checkpoint ckpt(dir.path()); });
  ASSERT_TRUE(err.has_value()) << "the checkpoint opened";
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), (dir / "model.safetensors.index.json").string()));
  EXPECT_TRUE(Contains(err->what(), part));
}

TEST(SafetensorsHostile, NumberOverflowInIndexNamesFileAndKey) {
  TempDir dir;
  write_safetensors(dir / "shard.safetensors", {{"a", "F32", {1}, f32_bytes({1})}});
  write_text(dir / "model.safetensors.index.json",
             R"({"metadata": {"total_size": 1e400}, "weight_map": {"a": "shard.safetensors"}})");
  expect_bad_index(dir, "metadata.total_size");
}

TEST(SafetensorsHostile, IndexEntriesOutsideTheDirectoryAreRefused) {
  TempDir outside;
  write_safetensors(outside / "elsewhere.safetensors", {{"a", "F32", {1}, f32_bytes({1})}});
  TempDir dir;
  std::filesystem::create_directory(dir / "sub");
  write_safetensors(dir / "sub" / "shard.safetensors", {{"a", "F32", {1}, f32_bytes({1})}});
  const std::string relative = "../" + outside.path().filename().string() + "/elsewhere.safetensors";
  ASSERT_TRUE(std::filesystem::exists(dir / relative));
  for (const std::string& name : {relative, (outside / "elsewhere.safetensors").string(),
                                  std::string("sub/shard.safetensors"), std::string(".."), std::string("")}) {
    SCOPED_TRACE(name);
    write_text(dir / "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"" + name + "\"}}");
    expect_bad_index(dir, "weight_map['a'] is '" + name + "', not a file name in the model directory");
  }
}

// The HF hub cache: snapshots/<rev>/ holds relative symlinks into ../../blobs/. The index names
// plain files; that they resolve elsewhere is fine.
TEST(SafetensorsHostile, HubCacheLayoutWithSymlinkedShardsLoads) {
  TempDir hub;
  const auto src = e3::test::golden_case("tiny_llama_default");
  const auto blobs = hub / "blobs";
  const auto snap = hub / "snapshots" / "0123abcd";
  std::filesystem::create_directories(blobs);
  std::filesystem::create_directories(snap);
  std::filesystem::copy_file(src / "config.json", blobs / "c0ffee01");
  std::filesystem::copy_file(src / "model.safetensors", blobs / "c0ffee02");
  std::string map;
  for (const std::string& name : Checkpoint(src).names())
    map += (map.empty() ? "\"" : ", \"") + name + "\": \"model-00001-of-00001.safetensors\"";
  write_text(blobs / "c0ffee03", "{\"weight_map\": {" + map + "}}");
  std::filesystem::create_symlink("../../blobs/c0ffee01", snap / "config.json");
  std::filesystem::create_symlink("../../blobs/c0ffee02", snap / "model-00001-of-00001.safetensors");
  std::filesystem::create_symlink("../../blobs/c0ffee03", snap / "model.safetensors.index.json");

  const e3::model::ModelConfig cfg = e3::model::load_model_config(snap);
  const Checkpoint ckpt(snap);
  EXPECT_EQ(ckpt.file_of("model.embed_tokens.weight").path(), snap / "model-00001-of-00001.safetensors");
  EXPECT_EQ(ckpt.fingerprint(), Checkpoint(src).fingerprint());
  auto backend = e3::kernels::make_cpu_backend(1);
  WeightStore store;
  WeightLoader loader(&ckpt, *backend, store);
  const e3::kernels::Tensor t =
      loader.load(WeightSpec::replicated("model.embed_tokens.weight", {cfg.vocab_size, cfg.hidden_size}));
  std::vector<float> loaded(static_cast<size_t>(t.numel())), direct(loaded.size());
  backend->download_float(t, loaded.data());
  const Checkpoint original(src);
  e3::convert_to_float(original.file_of("model.embed_tokens.weight").data(original.require("model.embed_tokens.weight")),
                                e3::DType::BF16, direct.data(), direct.size());
  ASSERT_EQ(original.require("model.embed_tokens.weight").dtype, StDType::BF16);
  EXPECT_EQ(loaded, direct);
}
