// Shards as a reader sees them: read back through the plain HDF5 C API (as h5py would), not
// through the writer's own helpers, so that the on-disk schema itself is what is tested.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/hdf5.h"
#include "io/shard_writer.h"
#include "core/dtype.h"
#include "core/e4m3.h"
#include "core/error.h"
#include "core/storage_codec.h"
#include "support/shard_samples.h"
#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using e3::io::H5Id;
using e3::io::ShardAttributes;
using e3::io::ShardWriter;
using e3::DType;

constexpr int64_t kH = 8;
constexpr int64_t kShard = 3;

ShardAttributes make_attrs(DType dtype, bool with_final = true) {
  ShardAttributes a;
  a.layer_ids = {1, 3};
  a.final_mode = with_final ? "post-norm" : "none";
  a.model_type = "llama";
  a.hidden_size = kH;
  a.num_hidden_layers = 4;
  a.dtype = dtype;
  a.tp = 2;
  a.model_path = "/models/tiny";
  a.config_fingerprint = "cfg0123";
  a.run_fingerprint = "run4567";
  a.tool_version = "0.1.0-test";
  return a;
}

// One sample's inputs: K captures of [T, H] and the final state.
struct Sample {
  int64_t index;
  std::string id;  // empty: written without an id
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> loss_mask;
  std::vector<std::vector<float>> layers;
  std::vector<float> final_rows;
};

Sample make_sample(int64_t index, const std::string& id, int64_t T, uint64_t seed) {
  Sample s{index, id, {}, {}, {}, {}};
  for (int64_t t = 0; t < T; ++t) {
    s.input_ids.push_back(static_cast<int32_t>(1000 * index + 7 * t));
    s.loss_mask.push_back(static_cast<uint8_t>(t % 2));
  }
  for (int k = 0; k < 2; ++k) {
    auto v = e3::test::random_floats(T * kH, seed + k);
    // Values over several binades, including fp16 subnormals, so the file type's exponent
    // and mantissa layout are exercised and not only values near 1.
    for (size_t i = 0; i < v.size(); ++i) v[i] *= (i % 4 == 0) ? 100.0f : (i % 4 == 1) ? 1e-6f : 1.0f;
    s.layers.push_back(v);
  }
  s.final_rows = e3::test::random_floats(T * kH, seed + 9);
  return s;
}

void write(ShardWriter& w, const Sample& s, bool with_final = true) {
  std::vector<const float*> layers;
  for (const auto& l : s.layers) layers.push_back(l.data());
  e3::test::write_float_sample(w, s.index, s.id.empty() ? nullptr : &s.id, s.input_ids, s.loss_mask, layers,
                               with_final ? std::vector<const float*>{s.final_rows.data()} : std::vector<const float*>{});
}

// What a reader must get back: the input rounded to the storage dtype.
std::vector<float> rounded(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> stored(v.size() * e3::dtype_size(dtype));
  std::vector<float> out(v.size());
  e3::convert_from_float(v.data(), dtype, stored.data(), v.size());
  e3::convert_to_float(stored.data(), dtype, out.data(), v.size());
  return out;
}

std::vector<std::string> dir_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<hsize_t> dims_of(hid_t ds) {
  H5Id space(H5Dget_space(ds), H5Sclose);
  std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(space.get())));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

template <typename T>
std::vector<T> read_all(hid_t ds, hid_t mem_type) {
  size_t n = 1;
  for (hsize_t d : dims_of(ds)) n *= d;
  std::vector<T> out(n);
  EXPECT_GE(H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0);
  return out;
}

H5Id open_ds(hid_t file, const std::string& path) {
  H5Id ds(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  EXPECT_TRUE(static_cast<bool>(ds)) << path;
  return ds;
}

class Hdf5ShardRoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(Hdf5ShardRoundTrip, WritesAtomicallyAndReadsBackExactly) {
  const DType dtype = GetParam();
  e3::test::TempDir dir;
  const std::vector<Sample> samples{make_sample(6, "sample-a", 3, 100), make_sample(7, "", 2, 200)};

  ShardWriter w(dir.path(), kShard, make_attrs(dtype));
  for (const Sample& s : samples) write(w, s);
  // Before commit only the temporary file exists, and its name is not a shard name.
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{w.temp_path().filename().string()});
  EXPECT_TRUE(fs::exists(w.temp_path()));
  EXPECT_NE(w.temp_path().extension(), ".h5");
  EXPECT_FALSE(fs::exists(dir / "shard-000003.h5"));

  const e3::io::CommittedShard rec = w.commit();
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{"shard-000003.h5"});
  EXPECT_FALSE(fs::exists(w.temp_path()));
  EXPECT_EQ(rec.file, "shard-000003.h5");
  EXPECT_EQ(rec.shard_index, kShard);
  EXPECT_EQ(rec.samples, (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(rec.num_tokens, 5);
  EXPECT_EQ(rec.bytes, fs::file_size(dir / "shard-000003.h5"));

  H5Id file(H5Fopen((dir / "shard-000003.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  ASSERT_TRUE(static_cast<bool>(file));
  const hid_t f = file.get();

  for (const Sample& s : samples) {
    const std::string g = e3::io::sample_group_name(s.index);
    const auto T = static_cast<hsize_t>(s.input_ids.size());
    SCOPED_TRACE(g);

    H5Id hs = open_ds(f, g + "/hidden_states");
    EXPECT_EQ(dims_of(hs.get()), (std::vector<hsize_t>{T, 2, kH}));
    {
      H5Id type(H5Dget_type(hs.get()), H5Tclose);
      EXPECT_EQ(e3::io::storage_dtype_of(type.get()), dtype);
      EXPECT_EQ(H5Tget_size(type.get()), e3::dtype_size(dtype));
    }
    const auto got = read_all<float>(hs.get(), H5T_NATIVE_FLOAT);
    std::vector<std::vector<float>> want_layers;
    for (const auto& l : s.layers) want_layers.push_back(rounded(l, dtype));
    for (hsize_t t = 0; t < T; ++t)
      for (hsize_t k = 0; k < 2; ++k)
        for (hsize_t h = 0; h < static_cast<hsize_t>(kH); ++h)
          ASSERT_EQ(got[(t * 2 + k) * kH + h], want_layers[k][t * kH + h]) << "t " << t << " k " << k << " h " << h;

    H5Id last = open_ds(f, g + "/last_hidden_state");
    EXPECT_EQ(dims_of(last.get()), (std::vector<hsize_t>{T, kH}));
    EXPECT_EQ(read_all<float>(last.get(), H5T_NATIVE_FLOAT), rounded(s.final_rows, dtype));

    H5Id ids = open_ds(f, g + "/input_ids");
    {
      H5Id type(H5Dget_type(ids.get()), H5Tclose);
      EXPECT_GT(H5Tequal(type.get(), H5T_STD_I32LE), 0);
    }
    EXPECT_EQ(dims_of(ids.get()), std::vector<hsize_t>{T});
    EXPECT_EQ(read_all<int32_t>(ids.get(), H5T_NATIVE_INT32), s.input_ids);

    H5Id mask = open_ds(f, g + "/loss_mask");
    {
      H5Id type(H5Dget_type(mask.get()), H5Tclose);
      EXPECT_GT(H5Tequal(type.get(), H5T_STD_U8LE), 0);
    }
    EXPECT_EQ(dims_of(mask.get()), std::vector<hsize_t>{T});
    EXPECT_EQ(read_all<uint8_t>(mask.get(), H5T_NATIVE_UINT8), s.loss_mask);

    H5Id group(H5Gopen2(f, g.c_str(), H5P_DEFAULT), H5Gclose);
    ASSERT_TRUE(static_cast<bool>(group));
    EXPECT_EQ(e3::io::read_attr_int(group.get(), "num_tokens"), static_cast<int64_t>(T));
    if (s.id.empty()) {
      EXPECT_FALSE(e3::io::read_attr_string(group.get(), "id").has_value());
    } else {
      EXPECT_EQ(e3::io::read_attr_string(group.get(), "id"), s.id);
    }
  }

  EXPECT_EQ(e3::io::read_attr_string(f, "format"), std::string("eagle3-hidden-states"));
  EXPECT_EQ(e3::io::read_attr_int(f, "format_version"), 1);
  EXPECT_EQ(e3::io::read_attr_ints(f, "layer_ids"), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(e3::io::read_attr_string(f, "final"), std::string("post-norm"));
  EXPECT_EQ(e3::io::read_attr_string(f, "model_type"), std::string("llama"));
  EXPECT_EQ(e3::io::read_attr_int(f, "hidden_size"), kH);
  EXPECT_EQ(e3::io::read_attr_int(f, "num_hidden_layers"), 4);
  EXPECT_EQ(e3::io::read_attr_string(f, "dtype"), std::string(e3::dtype_name(dtype)));
  EXPECT_EQ(e3::io::read_attr_int(f, "tp"), 2);
  EXPECT_EQ(e3::io::read_attr_string(f, "model"), std::string("/models/tiny"));
  EXPECT_EQ(e3::io::read_attr_string(f, "config_fingerprint"), std::string("cfg0123"));
  EXPECT_EQ(e3::io::read_attr_string(f, "run_fingerprint"), std::string("run4567"));
  EXPECT_EQ(e3::io::read_attr_string(f, "tool_version"), std::string("0.1.0-test"));
  EXPECT_EQ(e3::io::read_attr_int(f, "shard_index"), kShard);
  H5Id group(H5Gopen2(f, "samples", H5P_DEFAULT), H5Gclose);
  EXPECT_EQ(e3::io::list_links(group.get(), "samples"), (std::vector<std::string>{"00000006", "00000007"}));
}

TEST_P(Hdf5ShardRoundTrip, InspectReadsBackIndexSamplesAndFingerprint) {
  e3::test::TempDir dir;
  ShardWriter w(dir.path(), kShard, make_attrs(GetParam()));
  write(w, make_sample(6, "a", 3, 1));
  write(w, make_sample(7, "b", 4, 2));
  const e3::io::CommittedShard rec = w.commit();
  const e3::io::InspectedShard got = e3::io::inspect_shard(dir / rec.file);
  EXPECT_EQ(got.record.file, "shard-000003.h5");
  EXPECT_EQ(got.record.shard_index, kShard);
  EXPECT_EQ(got.record.samples, (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(got.record.num_tokens, 7);
  EXPECT_EQ(got.record.bytes, rec.bytes);
  EXPECT_EQ(got.run_fingerprint, "run4567");
}

INSTANTIATE_TEST_SUITE_P(Hdf5, Hdf5ShardRoundTrip, ::testing::Values(DType::BF16, DType::F16, DType::F32),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(e3::dtype_name(info.param));
                         });

TEST(Hdf5Shard, FinalNoneWritesNoLastHiddenState) {
  e3::test::TempDir dir;
  ShardWriter w(dir.path(), 0, make_attrs(DType::BF16, false));
  write(w, make_sample(0, "x", 2, 5), false);
  w.commit();
  H5Id file(H5Fopen((dir / "shard-000000.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  ASSERT_TRUE(static_cast<bool>(file));
  EXPECT_GT(H5Lexists(file.get(), "/samples/00000000/hidden_states", H5P_DEFAULT), 0);
  EXPECT_EQ(H5Lexists(file.get(), "/samples/00000000/last_hidden_state", H5P_DEFAULT), 0);
  EXPECT_EQ(e3::io::read_attr_string(file.get(), "final"), std::string("none"));
}

TEST(Hdf5Shard, DestroyedWithoutCommitLeavesNoFile) {
  e3::test::TempDir dir;
  fs::path temp;
  {
    ShardWriter w(dir.path(), kShard, make_attrs(DType::BF16));
    write(w, make_sample(0, "x", 3, 7));
    temp = w.temp_path();
    EXPECT_TRUE(fs::exists(temp));
  }
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_TRUE(dir_entries(dir.path()).empty());
}

TEST(Hdf5Shard, RejectsMismatchedSample) {
  e3::test::TempDir dir;
  ShardWriter w(dir.path(), 0, make_attrs(DType::F32));
  Sample s = make_sample(0, "x", 3, 8);
  s.loss_mask.pop_back();
  try {
    write(w, s);
    FAIL() << "expected an error";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Internal);
  }
}

TEST(Hdf5Shard, FileNames) {
  EXPECT_EQ(e3::io::shard_file_name(3), "shard-000003.h5");
  EXPECT_EQ(e3::io::shard_file_name(123456), "shard-123456.h5");
  EXPECT_EQ(e3::io::sample_group_name(42), "/samples/00000042");
}

TEST(Hdf5StorageType, IdentifiesTheThreeStorageTypes) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    H5Id type = e3::io::file_type_for(t);
    EXPECT_EQ(e3::io::storage_dtype_of(type.get()), t) << e3::dtype_name(t);
    EXPECT_EQ(H5Tget_size(type.get()), e3::dtype_size(t));
  }
  EXPECT_EQ(e3::io::storage_dtype_of(H5T_IEEE_F32LE), DType::F32);
  EXPECT_EQ(e3::io::storage_dtype_of(H5T_IEEE_F64LE), std::nullopt);
  EXPECT_EQ(e3::io::storage_dtype_of(H5T_STD_I32LE), std::nullopt);
  EXPECT_EQ(e3::io::storage_dtype_of(H5T_STD_U16LE), std::nullopt);
}

TEST(Hdf5StorageType, Bf16FileTypeConvertsLikeTheHostConversion) {
  // HDF5's own conversion from the bf16 file type must agree with bf16_to_float bit for bit.
  H5Id type = e3::io::file_type_for(DType::BF16);
  std::vector<uint16_t> raw;
  for (uint32_t h = 0; h <= 0xffff; ++h)
    if (!std::isnan(e3::bf16_to_float(static_cast<uint16_t>(h)))) raw.push_back(static_cast<uint16_t>(h));
  std::vector<float> buf(raw.size());
  std::memcpy(buf.data(), raw.data(), raw.size() * 2);  // H5Tconvert converts in place
  ASSERT_GE(H5Tconvert(type.get(), H5T_NATIVE_FLOAT, raw.size(), buf.data(), nullptr, H5P_DEFAULT), 0);
  for (size_t i = 0; i < raw.size(); ++i)
    ASSERT_EQ(buf[i], e3::bf16_to_float(raw[i])) << std::hex << raw[i];
}

TEST(Hdf5StorageType, Fp16FileTypeConvertsLikeTheHostConversion) {
  H5Id type = e3::io::file_type_for(DType::F16);
  std::vector<uint16_t> raw;
  for (uint32_t h = 0; h <= 0xffff; ++h)
    if (!std::isnan(e3::fp16_to_float(static_cast<uint16_t>(h)))) raw.push_back(static_cast<uint16_t>(h));
  std::vector<float> buf(raw.size());
  std::memcpy(buf.data(), raw.data(), raw.size() * 2);
  ASSERT_GE(H5Tconvert(type.get(), H5T_NATIVE_FLOAT, raw.size(), buf.data(), nullptr, H5P_DEFAULT), 0);
  for (size_t i = 0; i < raw.size(); ++i)
    ASSERT_EQ(buf[i], e3::fp16_to_float(raw[i])) << std::hex << raw[i];
}

TEST(Hdf5Inspect, RejectsAFileThatIsNotAShard) {
  e3::io::silence_hdf5_errors();
  e3::test::TempDir dir;
  e3::test::write_text(dir / "text.h5", "not hdf5 at all");
  {
    H5Id f(H5Fcreate((dir / "other.h5").c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    e3::io::write_attr(f.get(), "format", std::string("something-else"));
  }
  for (const char* name : {"text.h5", "other.h5", "absent.h5"}) {
    try {
      e3::io::inspect_shard(dir / name);
      ADD_FAILURE() << name << ": expected an error";
    } catch (const e3::Error& e) {
      EXPECT_EQ(e.kind(), e3::ErrorKind::Output) << name;
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

// Shards are written in HDF5 1.10's file format, whose superblock (version 3) and object
// headers carry checksums: a flipped bit in them is refused, not followed (1.8's version 0 has
// none).
TEST(Hdf5Shard, WritesTheChecksummedFileFormat) {
  e3::test::TempDir dir;
  ShardWriter w(dir.path(), 0, make_attrs(DType::BF16));
  write(w, make_sample(0, "x", 2, 5));
  w.commit();
  H5Id file(H5Fopen((dir / "shard-000000.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  ASSERT_TRUE(static_cast<bool>(file));
  H5F_info2_t info{};
  ASSERT_GE(H5Fget_info2(file.get(), &info), 0);
  EXPECT_EQ(info.super.version, 3u);
}

fs::path good_shard(const fs::path& dir) {
  ShardWriter w(dir, 0, make_attrs(DType::BF16));
  write(w, make_sample(0, "x", 2, 5));
  w.commit();
  return dir / "shard-000000.h5";
}

// "superblock" holds the letters "lock": a damaged file is not a file-system matter.
TEST(Hdf5Errors, ADamagedSuperblockIsNotTakenForAFileLockingProblem) {
  e3::io::silence_hdf5_errors();
  e3::test::TempDir dir;
  const fs::path path = good_shard(dir.path());
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(8);
    f.put('\x7f');  // the superblock's version, right after its signature
  }
  const H5Id fapl = e3::io::file_access_list();
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  ASSERT_FALSE(static_cast<bool>(file));
  const std::string text = e3::io::hdf5_error_text();
  EXPECT_NE(text.find("superblock"), std::string::npos) << text;
  EXPECT_EQ(text.find("HDF5_USE_FILE_LOCKING"), std::string::npos) << text;
}

// A lock that another holder has is one: the hint says what to do where locks do not work.
TEST(Hdf5Errors, AFileLockHeldElsewhereGetsTheLockingHint) {
  e3::io::silence_hdf5_errors();
  e3::test::TempDir dir;
  const fs::path path = good_shard(dir.path());
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  std::string text;
  {
    const H5Id fapl = e3::io::file_access_list();
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    EXPECT_FALSE(static_cast<bool>(file));
    text = e3::io::hdf5_error_text();
  }
  ::close(fd);
  EXPECT_NE(text.find("HDF5_USE_FILE_LOCKING=FALSE"), std::string::npos) << text;
}

TEST(Hdf5Shard, SampleGroupNamesAreEightOrMoreDigits) {
  using e3::io::sample_index_of_group;
  EXPECT_EQ(sample_index_of_group("00000003"), 3);
  EXPECT_EQ(sample_index_of_group("123456789"), 123456789);
  for (const char* bad : {"", "0000003", "0000000x", "-0000001", "+0000001", " 0000001", "0000000001234567890"})
    EXPECT_FALSE(sample_index_of_group(bad).has_value()) << bad;
}

// A group under /samples that the writer never names is a damaged or foreign shard: an output
// error naming the file and the name, not a failed number conversion.
TEST(Hdf5Inspect, RefusesASampleGroupThatIsNoNumber) {
  e3::io::silence_hdf5_errors();
  e3::test::TempDir dir;
  const fs::path path = good_shard(dir.path());
  {
    H5Id f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    H5Id g(H5Gcreate2(f.get(), "/samples/sample_x", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    ASSERT_TRUE(static_cast<bool>(g));
    e3::io::write_attr(g.get(), "num_tokens", int64_t{2});
  }
  try {
    e3::io::inspect_shard(path);
    FAIL() << "inspect_shard took sample_x for a sample";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Output) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'sample_x' is not a sample's group name"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// --dtype fp8: uint8 codes with the encoding attribute, and a float32 scale per token and
// capture, that decode (code table times scale) to what encode_e4m3_row made of the input.
TEST(Hdf5Shard, Fp8SchemaCodesScalesAndEncoding) {
  e3::test::TempDir dir;
  ShardWriter w(dir.path(), 0, make_attrs(DType::F8E4M3));
  const Sample s = make_sample(4, "f", 3, 300);
  write(w, s);
  w.commit();
  H5Id file(H5Fopen((dir / "shard-000000.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  ASSERT_TRUE(static_cast<bool>(file));
  EXPECT_EQ(e3::io::read_attr_string(file.get(), "dtype"), std::string("fp8"));
  const hsize_t T = 3, K = 2;
  H5Id hs = open_ds(file.get(), "/samples/00000004/hidden_states");
  H5Id last = open_ds(file.get(), "/samples/00000004/last_hidden_state");
  for (hid_t ds : {hs.get(), last.get()}) {
    H5Id type(H5Dget_type(ds), H5Tclose);
    EXPECT_EQ(H5Tget_class(type.get()), H5T_INTEGER);
    EXPECT_EQ(H5Tget_size(type.get()), 1u);
    EXPECT_EQ(H5Tget_sign(type.get()), H5T_SGN_NONE);
    EXPECT_EQ(e3::io::read_attr_string(ds, "encoding"), std::string("float8_e4m3fn"));
  }
  EXPECT_EQ(dims_of(hs.get()), (std::vector<hsize_t>{T, K, kH}));
  EXPECT_EQ(dims_of(last.get()), (std::vector<hsize_t>{T, kH}));
  H5Id hs_scale = open_ds(file.get(), "/samples/00000004/hidden_states_scale");
  H5Id last_scale = open_ds(file.get(), "/samples/00000004/last_hidden_state_scale");
  EXPECT_EQ(dims_of(hs_scale.get()), (std::vector<hsize_t>{T, K}));
  EXPECT_EQ(dims_of(last_scale.get()), (std::vector<hsize_t>{T}));
  H5Id scale_type(H5Dget_type(hs_scale.get()), H5Tclose);
  EXPECT_EQ(e3::io::storage_dtype_of(scale_type.get()), DType::F32);

  const auto codes = read_all<uint8_t>(hs.get(), H5T_NATIVE_UINT8);
  const auto scales = read_all<float>(hs_scale.get(), H5T_NATIVE_FLOAT);
  const auto last_codes = read_all<uint8_t>(last.get(), H5T_NATIVE_UINT8);
  const auto last_scales = read_all<float>(last_scale.get(), H5T_NATIVE_FLOAT);
  std::vector<uint8_t> want(kH + 4);
  for (hsize_t t = 0; t < T; ++t) {
    for (hsize_t k = 0; k <= K; ++k) {  // k == K: the final state
      const float* x = (k < K ? s.layers[k].data() : s.final_rows.data()) + t * kH;
      e3::encode_e4m3_row(x, kH, want.data());
      const uint8_t* got = k < K ? codes.data() + (t * K + k) * kH : last_codes.data() + t * kH;
      const float scale = k < K ? scales[t * K + k] : last_scales[t];
      float amax = 0;
      for (int64_t c = 0; c < kH; ++c) amax = std::max(amax, std::fabs(x[c]));
      EXPECT_EQ(scale, amax / 448.0f) << t << " " << k;
      EXPECT_EQ(scale, e3::e4m3_row_scale_of(want.data(), kH));
      for (int64_t c = 0; c < kH; ++c) {
        EXPECT_EQ(got[c], want[static_cast<size_t>(c)]) << t << " " << k << " " << c;
        EXPECT_NEAR(e3::e4m3fn_to_float(got[c]) * scale, x[c], std::fabs(x[c]) * 0.0625f + scale * 0.001f);
      }
    }
  }
}

TEST(Hdf5StorageType, Fp8IsUint8) {
  H5Id type = e3::io::file_type_for(DType::F8E4M3);
  EXPECT_EQ(e3::io::storage_dtype_of(type.get()), DType::F8E4M3);
  EXPECT_EQ(H5Tget_size(type.get()), 1u);
  EXPECT_EQ(e3::storage_codec(DType::F8E4M3).row_bytes(4096), 4100u);
  EXPECT_EQ(e3::storage_codec(DType::BF16).row_bytes(4096), 8192u);
}

}  // namespace
