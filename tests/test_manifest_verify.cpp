// manifest.json and `verify`: a directory built with the real writers must verify, and each
// kind of damage must be reported as a verify error that names what is wrong.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <mutex>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/hdf5.h"
#include "io/manifest.h"
#include "io/shard_writer.h"
#include "io/verify.h"
#include "core/error.h"
#include "core/dtype.h"
#include "core/e4m3.h"
#include "support/shard_samples.h"
#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using e3::ErrorKind;
using e3::io::CommittedShard;
using e3::io::Manifest;
using e3::io::RunFingerprint;
using e3::io::ShardAttributes;
using e3::io::ShardWriter;
using e3::io::SkippedSample;
using e3::io::H5Id;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

RunFingerprint make_fingerprint() {
  RunFingerprint f;
  f.model_fingerprint = "model-abc";
  f.layer_ids = {0, 2};
  f.final_mode = "post-norm";
  f.dtype = "bf16";
  f.max_seq_len = 4096;
  f.on_long = "skip";
  f.samples_per_shard = 2;
  f.shard_size = 1 << 20;
  f.plan_groups = 4;
  f.tool_version = "0.1.0";
  return f;
}

// ---------------------------------------------------------------- manifest

Manifest make_manifest() {
  Manifest m;
  m.fingerprint = make_fingerprint();
  m.model_path = "/models/m";
  m.data_path = "/data/d.jsonl";
  m.data_fingerprint = "data-123";
  m.num_samples = 5;
  m.num_shards = 3;
  m.complete = true;
  m.shards.push_back({"shard-000000.h5", 0, {0, 1}, 17, 4096, "00112233445566ff", {}});
  m.shards.push_back({"shard-000002.h5", 2, {4}, 3, 2048, "", {{5, 7, "NaN in capture id 0 at token 1 of 2, column 7"}}});
  m.skipped.push_back({3, 5, "longer than --max-seq-len"});
  return m;
}

void expect_same(const Manifest& a, const Manifest& b) {
  EXPECT_TRUE(a.fingerprint.differences(b.fingerprint).empty());
  EXPECT_EQ(a.fingerprint.digest(), b.fingerprint.digest());
  EXPECT_EQ(a.model_path, b.model_path);
  EXPECT_EQ(a.data_path, b.data_path);
  EXPECT_EQ(a.data_fingerprint, b.data_fingerprint);
  EXPECT_EQ(a.num_samples, b.num_samples);
  EXPECT_EQ(a.num_shards, b.num_shards);
  EXPECT_EQ(a.complete, b.complete);
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (size_t i = 0; i < a.shards.size(); ++i) {
    EXPECT_EQ(a.shards[i].file, b.shards[i].file);
    EXPECT_EQ(a.shards[i].shard_index, b.shards[i].shard_index);
    EXPECT_EQ(a.shards[i].samples, b.shards[i].samples);
    EXPECT_EQ(a.shards[i].num_tokens, b.shards[i].num_tokens);
    EXPECT_EQ(a.shards[i].bytes, b.shards[i].bytes);
    EXPECT_EQ(a.shards[i].checksum, b.shards[i].checksum);
    ASSERT_EQ(a.shards[i].skipped.size(), b.shards[i].skipped.size());
    for (size_t k = 0; k < a.shards[i].skipped.size(); ++k) {
      EXPECT_EQ(a.shards[i].skipped[k].index, b.shards[i].skipped[k].index);
      EXPECT_EQ(a.shards[i].skipped[k].reason, b.shards[i].skipped[k].reason);
    }
  }
  EXPECT_EQ(a.part, b.part);
  ASSERT_EQ(a.skipped.size(), b.skipped.size());
  for (size_t i = 0; i < a.skipped.size(); ++i) {
    EXPECT_EQ(a.skipped[i].index, b.skipped[i].index);
    EXPECT_EQ(a.skipped[i].line, b.skipped[i].line);
    EXPECT_EQ(a.skipped[i].reason, b.skipped[i].reason);
  }
}

TEST(ManifestJson, RoundTripsThroughJson) {
  const Manifest m = make_manifest();
  const nlohmann::json j = e3::io::to_json(m);
  EXPECT_EQ(j.at("format"), e3::io::kManifestFormat);
  EXPECT_EQ(j.at("run_fingerprint"), m.fingerprint.digest());
  EXPECT_EQ(j.at("shards").at(0).at("num_samples"), 2);
  expect_same(e3::io::manifest_from_json(nlohmann::json::parse(j.dump()), "test"), m);
}

TEST(ManifestJson, TheShardListAloneIsTheManifestsShardsArray) {
  const Manifest m = make_manifest();
  const nlohmann::json list = e3::io::shards_to_json(m.shards);
  EXPECT_EQ(list, e3::io::to_json(m).at("shards"));
  Manifest back = m;
  back.shards = e3::io::shards_from_json(nlohmann::json::parse(list.dump()), "gathered");
  expect_same(back, m);
  EXPECT_TRUE(e3::io::shards_from_json(e3::io::shards_to_json({}), "gathered").empty());
  // Read alone, a bad list is an output error naming `where`, as inside a manifest.
  nlohmann::json bad = list;
  bad[1]["file"] = "../victim.h5";
  auto err = e3::test::error_of([&] { e3::io::shards_from_json(bad, "gathered shard list"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_HAS(std::string(err->what()), "gathered shard list: shard entry 1 has \"file\": \"../victim.h5\"");
  bad = list;
  bad[0]["skipped"] = 7;  // not a list: the JSON library's error, as an output error
  err = e3::test::error_of([&] { e3::io::shards_from_json(bad, "gathered shard list"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_HAS(std::string(err->what()), "gathered shard list: ");
}

TEST(ManifestFingerprint, TheShardAttributesTakeTheRunsFactsFromItsFingerprint) {
  const RunFingerprint fp = make_fingerprint();
  const e3::io::ModelAttributes model{.model_type = "qwen3", .hidden_size = 64, .num_hidden_layers = 6, .tp = 2,
                                      .model_path = "/models/q", .config_fingerprint = "cfg9"};
  const ShardAttributes a = e3::io::shard_attributes(fp, model);
  EXPECT_EQ(a.layer_ids, fp.layer_ids);
  EXPECT_EQ(a.final_mode, "post-norm");
  EXPECT_EQ(a.dtype, e3::DType::BF16);
  EXPECT_EQ(a.tool_version, "0.1.0");
  EXPECT_EQ(a.run_fingerprint, fp.digest());
  EXPECT_EQ(a.model_type, "qwen3");
  EXPECT_EQ(a.hidden_size, 64);
  EXPECT_EQ(a.num_hidden_layers, 6);
  EXPECT_EQ(a.tp, 2);
  EXPECT_EQ(a.model_path, "/models/q");
  EXPECT_EQ(a.config_fingerprint, "cfg9");
  RunFingerprint fp8 = fp;
  fp8.dtype = "fp8";
  fp8.plan_groups = 8;  // a field the shards do not carry but whose digest they do
  const ShardAttributes b = e3::io::shard_attributes(fp8, model);
  EXPECT_EQ(b.dtype, e3::DType::F8E4M3);
  EXPECT_NE(b.run_fingerprint, a.run_fingerprint);
}

TEST(ManifestJson, ShardSizeAndPlanGroupsRoundTrip) {
  const Manifest m = make_manifest();
  const nlohmann::json j = e3::io::to_json(m);
  EXPECT_EQ(j.at("fingerprint").at("shard_size"), 1 << 20);
  EXPECT_EQ(j.at("fingerprint").at("plan_groups"), 4);
  const Manifest back = e3::io::manifest_from_json(j, "test");
  EXPECT_EQ(back.fingerprint.shard_size, uint64_t{1} << 20);
  EXPECT_EQ(back.fingerprint.plan_groups, 4);
}

TEST(ManifestJson, ManifestWithoutShardSizeReadsAsAnotherRun) {
  // A manifest of a version before --shard-size: readable (verify still works on it), and a
  // resume into it names the fields it lacks.
  nlohmann::json j = e3::io::to_json(make_manifest());
  j["fingerprint"].erase("shard_size");
  j["fingerprint"].erase("plan_groups");
  const Manifest old = e3::io::manifest_from_json(j, "test");
  EXPECT_EQ(old.fingerprint.shard_size, 0u);
  EXPECT_EQ(old.fingerprint.plan_groups, 0);
  const auto d = old.fingerprint.differences(make_fingerprint());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], "shard-size: 0 (in the directory) vs 1048576 (this run)");
}

TEST(ManifestJson, RoundTripsThroughTheDirectory) {
  e3::test::TempDir dir;
  EXPECT_FALSE(e3::io::read_manifest(dir.path()).has_value());
  const Manifest m = make_manifest();
  e3::io::write_manifest(dir.path(), m);
  // Written atomically: nothing but the manifest is left behind.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"manifest.json"});
  const auto back = e3::io::read_manifest(dir.path());
  ASSERT_TRUE(back.has_value());
  expect_same(*back, m);
}

TEST(ManifestJson, RejectsForeignOrBrokenManifests) {
  e3::test::TempDir dir;
  auto expect_output_error = [&](const std::string& text, const std::string& part) {
    e3::test::write_text(dir / "manifest.json", text);
    try {
      e3::io::read_manifest(dir.path());
      ADD_FAILURE() << "accepted: " << text;
    } catch (const e3::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Output) << e.what();
      EXPECT_HAS(std::string(e.what()), part);
    }
  };
  expect_output_error("{not json", "invalid JSON");
  expect_output_error(R"({"format": "something-else"})", "not an eagle3_extract manifest");
  nlohmann::json j = e3::io::to_json(make_manifest());
  j.erase("num_samples");
  expect_output_error(j.dump(), "num_samples");
  j = e3::io::to_json(make_manifest());
  j["complete"] = "yes";
  expect_output_error(j.dump(), "complete");
}

// Read with the JSON of the manifest, on disk: each case must be an output error (exit 5) that
// names the manifest, never an exception of the JSON library (exit 1) or a crash.
void expect_manifest_error(const std::string& text, const std::string& part) {
  e3::test::TempDir dir;
  e3::test::write_text(dir / "manifest.json", text);
  const auto err = e3::test::error_of([&] { e3::io::read_manifest(dir.path()); });
  ASSERT_TRUE(err.has_value()) << "accepted: " << text.substr(0, 200);
  EXPECT_EQ(err->kind(), ErrorKind::Output) << err->what();
  EXPECT_HAS(std::string(err->what()), (dir / "manifest.json").string());
  EXPECT_HAS(std::string(err->what()), part);
}

TEST(ManifestJson, ShardFileNamesMustStayInTheDirectory) {
  for (const std::string& name : {std::string("../victim.h5"), std::string("/etc/passwd"), std::string(""),
                                  std::string("sub/shard-000000.h5"), std::string(".."), std::string(".")}) {
    SCOPED_TRACE(name);
    nlohmann::json j = e3::io::to_json(make_manifest());
    j["shards"][1]["file"] = name;
    expect_manifest_error(j.dump(), fmt::format("shard entry 1 has \"file\": \"{}\", which is not a file name", name));
  }
  nlohmann::json j = e3::io::to_json(make_manifest());
  j["shards"][0]["file"] = std::string("shard\0.h5", 8);
  expect_manifest_error(j.dump(), "shard entry 0 has");
}

TEST(ManifestJson, HostileJsonIsAnOutputError) {
  nlohmann::json j = e3::io::to_json(make_manifest());
  std::string text = j.dump();
  const std::string key = "\"num_samples\":5";
  ASSERT_NE(text.find(key), std::string::npos);
  text.replace(text.find(key), key.size(), "\"num_samples\":1e400");
  expect_manifest_error(text, "num_samples");

  j = e3::io::to_json(make_manifest());
  j["part_index"] = "zero";  // read with a default: the library's type error before
  expect_manifest_error(j.dump(), "part_index");

  text = e3::io::to_json(make_manifest()).dump();
  text.insert(1, "\"deep\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  expect_manifest_error(text, "nested deeper than 64 levels");
}

TEST(ManifestJson, FifoManifestIsRefusedWithoutBlocking) {
  e3::test::TempDir dir;
  const auto fifo = dir / "manifest.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto result = std::async(std::launch::async,
                           [&] { return e3::test::error_of([&] { e3::io::read_manifest_file(fifo); }); });
  if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked on the FIFO";
    // Opening the write end releases a reader stuck in open(), so that the test ends.
    while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  const auto err = result.get();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_HAS(std::string(err->what()), "a FIFO, not a regular file");
}

TEST(ManifestFingerprint, EqualFingerprintsHaveNoDifferences) {
  EXPECT_TRUE(make_fingerprint().differences(make_fingerprint()).empty());
  EXPECT_EQ(make_fingerprint().digest(), make_fingerprint().digest());
}

TEST(ManifestFingerprint, DifferencesNameEachFieldWithBothValues) {
  const RunFingerprint was = make_fingerprint();
  RunFingerprint now = was;
  now.model_fingerprint = "model-xyz";
  now.layer_ids = {0, 3};
  now.final_mode = "none";
  now.dtype = "fp32";
  now.max_seq_len = 2048;
  now.on_long = "truncate";
  now.samples_per_shard = 8;
  now.shard_size = 4096;
  now.plan_groups = 2;
  now.tool_version = "0.2.0";
  const std::vector<std::string> d = was.differences(now);
  const std::vector<std::string> want{
      "model: model-abc (in the directory) vs model-xyz (this run)",
      "layers: [0,2] (in the directory) vs [0,3] (this run)",
      "final: post-norm (in the directory) vs none (this run)",
      "dtype: bf16 (in the directory) vs fp32 (this run)",
      "max-seq-len: 4096 (in the directory) vs 2048 (this run)",
      "on-long: skip (in the directory) vs truncate (this run)",
      "samples-per-shard: 2 (in the directory) vs 8 (this run)",
      "shard-size: 1048576 (in the directory) vs 4096 (this run)",
      "plan groups (DP groups x parts of the first run): 4 (in the directory) vs 2 (this run)",
      "tool version: 0.1.0 (in the directory) vs 0.2.0 (this run)",
  };
  EXPECT_EQ(d, want);
  EXPECT_NE(was.digest(), now.digest());
}

TEST(ManifestFingerprint, EachFieldAloneIsReportedAndChangesTheDigest) {
  const RunFingerprint base = make_fingerprint();
  std::vector<RunFingerprint> variants(10, base);
  variants[0].model_fingerprint = "m2";
  variants[1].layer_ids = {0, 2, 4};
  variants[2].final_mode = "pre-norm";
  variants[3].dtype = "fp16";
  variants[4].max_seq_len = 1;
  variants[5].on_long = "error";
  variants[6].samples_per_shard = 3;
  variants[7].tool_version = "x";
  variants[8].shard_size = 5;
  variants[9].plan_groups = 1;
  const char* names[] = {"model:", "layers:", "final:", "dtype:", "max-seq-len:", "on-long:", "samples-per-shard:",
                         "tool version:", "shard-size:", "plan groups"};
  for (size_t i = 0; i < variants.size(); ++i) {
    const auto d = base.differences(variants[i]);
    ASSERT_EQ(d.size(), 1u) << names[i];
    EXPECT_EQ(d[0].rfind(names[i], 0), 0u) << d[0];
    EXPECT_NE(base.digest(), variants[i].digest()) << names[i];
  }
}

// ---------------------------------------------------------------- verify

constexpr int64_t kH = 8;

int64_t tokens_of(int64_t sample) { return 2 + sample % 3; }

ShardAttributes attrs_for(const RunFingerprint& fp) {
  return e3::io::shard_attributes(
      fp, {.model_type = "llama", .hidden_size = kH, .num_hidden_layers = 4, .model_path = "/models/m",
           .config_fingerprint = "cfg"});
}

// Writes and commits one shard holding `samples`; `nan_at` puts a NaN into one sample's
// hidden states.
CommittedShard write_shard(const fs::path& dir, const RunFingerprint& fp, int64_t index,
                           const std::vector<int64_t>& samples, int64_t nan_at = -1) {
  ShardWriter w(dir, index, attrs_for(fp));
  const size_t K = fp.layer_ids.size();
  for (int64_t s : samples) {
    const int64_t T = tokens_of(s);
    std::vector<int32_t> ids(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>(s * 10 + t);
    std::vector<uint8_t> mask(static_cast<size_t>(T), 1);
    std::vector<std::vector<float>> layers;
    for (size_t k = 0; k < K; ++k) layers.push_back(e3::test::random_floats(T * kH, 100 * s + k));
    if (s == nan_at) layers.back()[3] = std::numeric_limits<float>::quiet_NaN();
    std::vector<const float*> ptrs;
    for (const auto& l : layers) ptrs.push_back(l.data());
    const auto final_rows = e3::test::random_floats(T * kH, 100 * s + 99);
    const auto prenorm_rows = e3::test::random_floats(T * kH, 100 * s + 98);
    std::vector<const float*> finals{final_rows.data(), prenorm_rows.data()};
    finals.resize(e3::io::final_datasets(fp.final_mode).size());
    const std::string id = fmt::format("s{}", s);
    e3::test::write_float_sample(w, s, &id, ids, mask, ptrs, finals);
  }
  return w.commit();
}

// A finished run over 5 input samples, 2 per shard, sample 3 skipped:
// shard 0 = {0, 1}, shard 1 = {2}, shard 2 = {4}.
class VerifyOutput : public ::testing::Test {
 protected:
  void SetUp() override {
    fp_ = make_fingerprint();
    m_.fingerprint = fp_;
    m_.model_path = "/models/m";
    m_.data_path = "/data/d.jsonl";
    m_.data_fingerprint = "data";
    m_.num_samples = 5;
    m_.num_shards = 3;
    m_.complete = true;
    m_.skipped.push_back({3, 4, "longer than --max-seq-len"});
  }

  void build_good(int64_t nan_at = -1) {
    m_.shards.push_back(write_shard(dir_.path(), fp_, 0, {0, 1}, nan_at));
    m_.shards.push_back(write_shard(dir_.path(), fp_, 1, {2}, nan_at));
    m_.shards.push_back(write_shard(dir_.path(), fp_, 2, {4}, nan_at));
    e3::io::write_manifest(dir_.path(), m_);
  }

  // verify_output's message, after checking that it fails with a verify error.
  std::string verify_error() {
    try {
      e3::io::verify_output(dir_.path());
    } catch (const e3::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Verify) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "verify passed";
    return {};
  }

  e3::test::TempDir dir_;
  RunFingerprint fp_;
  Manifest m_;
};

TEST_F(VerifyOutput, PassesOnACompleteDirectory) {
  build_good();
  const e3::io::VerifyReport r = e3::io::verify_output(dir_.path());
  EXPECT_EQ(r.shards, 3);
  EXPECT_EQ(r.samples, 4);
  EXPECT_EQ(r.tokens, tokens_of(0) + tokens_of(1) + tokens_of(2) + tokens_of(4));
  EXPECT_EQ(r.skipped, 1);
  EXPECT_EQ(r.num_samples, 5);
  EXPECT_TRUE(r.complete);
}

TEST_F(VerifyOutput, PassesForEveryStorageDtypeAndFinalNone) {
  for (const char* dtype : {"fp16", "fp32", "fp8"}) {
    e3::test::TempDir other;
    RunFingerprint fp = fp_;
    fp.dtype = dtype;
    fp.final_mode = "none";
    Manifest m = m_;
    m.fingerprint = fp;
    m.shards = {write_shard(other.path(), fp, 0, {0, 1}), write_shard(other.path(), fp, 1, {2}),
                write_shard(other.path(), fp, 2, {4})};
    e3::io::write_manifest(other.path(), m);
    EXPECT_NO_THROW(e3::io::verify_output(other.path())) << dtype;
  }
}

TEST_F(VerifyOutput, PassesOnAnIncompleteRunAndIgnoresTemporaryFiles) {
  // An interrupted run: one shard committed, another one's temporary file left behind.
  m_.complete = false;
  m_.shards.push_back(write_shard(dir_.path(), fp_, 0, {0, 1}));
  e3::io::write_manifest(dir_.path(), m_);
  e3::test::write_text(dir_ / "shard-000001.h5.tmp.12345", "partial");
  const e3::io::VerifyReport r = e3::io::verify_output(dir_.path());
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.samples, 2);
}

TEST_F(VerifyOutput, FailsOnMissingShardFile) {
  build_good();
  fs::remove(dir_ / "shard-000001.h5");
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "shard-000001.h5");
  EXPECT_HAS(msg, "missing");
}

TEST_F(VerifyOutput, FailsOnSizeMismatch) {
  build_good();
  {
    std::ofstream out(dir_ / "shard-000002.h5", std::ios::binary | std::ios::app);
    out << "trailing bytes";
  }
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "shard-000002.h5");
  EXPECT_HAS(msg, "bytes");
}

TEST_F(VerifyOutput, FailsOnAByteChangedInPlace) {
  build_good();
  ASSERT_FALSE(m_.shards[1].checksum.empty());
  {
    std::fstream f(dir_ / "shard-000001.h5", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-64, std::ios::end);
    f.put('\x5a');
  }
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "shard-000001.h5: checksum");
  EXPECT_HAS(msg, "changed after it was written");
}

// Without checksums in the manifest (manifests of earlier versions have none) a damaged object
// header is found by HDF5's own checksum of it: still a verify error (exit code 6), naming the
// shard, whichever of the shard's objects it is.
TEST_F(VerifyOutput, DamagedMetadataWithoutAChecksumIsAVerifyError) {
  e3::io::silence_hdf5_errors();
  build_good();
  for (auto& s : m_.shards) s.checksum.clear();
  e3::io::write_manifest(dir_.path(), m_);
  const fs::path shard = dir_ / "shard-000001.h5";
  std::string bytes;
  {
    std::ifstream in(shard, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  int headers = 0;
  for (size_t at = bytes.find("OHDR"); at != std::string::npos; at = bytes.find("OHDR", at + 1), ++headers) {
    std::string damaged = bytes;
    damaged[at + 6] = static_cast<char>(damaged[at + 6] ^ 0x10);  // past the signature and version
    {
      std::ofstream out(shard, std::ios::binary | std::ios::trunc);
      out << damaged;
    }
    const std::string msg = verify_error();
    EXPECT_HAS(msg, "shard-000001.h5");
  }
  EXPECT_GE(headers, 5) << "the shard's object headers (v2, signature OHDR) were not found";
}

TEST_F(VerifyOutput, FailsOnNanInHiddenStates) {
  build_good(/*nan_at=*/2);
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "shard-000001.h5");
  EXPECT_HAS(msg, "00000002");
  EXPECT_HAS(msg, "hidden_states");
  EXPECT_HAS(msg, "non-finite");
}

TEST_F(VerifyOutput, FailsOnANonFiniteFp8Scale) {
  // The writer's own encoding of a row holding NaN: a NaN scale (the pipeline never stores
  // one, its non-finite check runs first; a shard holding one is damaged).
  fp_.dtype = "fp8";
  m_.fingerprint = fp_;
  build_good(/*nan_at=*/2);
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "shard-000001.h5");
  EXPECT_HAS(msg, "00000002");
  EXPECT_HAS(msg, "hidden_states_scale has a negative or non-finite scale");
}

TEST_F(VerifyOutput, FailsOnSampleInTwoShards) {
  m_.complete = false;
  m_.shards.push_back(write_shard(dir_.path(), fp_, 0, {0, 1}));
  m_.shards.push_back(write_shard(dir_.path(), fp_, 1, {1, 2}));
  e3::io::write_manifest(dir_.path(), m_);
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "00000001");
  EXPECT_HAS(msg, "twice");
  EXPECT_HAS(msg, "shard-000000.h5");
  EXPECT_HAS(msg, "shard-000001.h5");
}

TEST_F(VerifyOutput, FailsOnStrayShardNotInManifest) {
  build_good();
  write_shard(dir_.path(), fp_, 9, {0});
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "shard-000009.h5");
  EXPECT_HAS(msg, "no manifest lists");
}

TEST_F(VerifyOutput, FailsWithoutManifest) {
  write_shard(dir_.path(), fp_, 0, {0, 1});
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "manifest.json");
}

TEST_F(VerifyOutput, FailsOnUnreadableManifest) {
  build_good();
  e3::test::write_text(dir_ / "manifest.json", "{truncated");
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "manifest.json");
}

TEST_F(VerifyOutput, FailsWhenCompleteButASampleIsUnaccounted) {
  // Sample 3 neither stored nor skipped: the counts no longer add up.
  m_.skipped.clear();
  build_good();
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "complete");
}

TEST_F(VerifyOutput, FailsWhenASkipNamesASamplePastTheInput) {
  // The counts add up (4 stored + 1 skipped = 5) but the skip names a sample past the input,
  // so sample 3 is neither stored nor skipped.
  m_.skipped = {{7, 9, "bogus"}};
  build_good();
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "skipped sample 7 is outside the input");
}

TEST_F(VerifyOutput, FailsWhenAShardHoldsASamplePastTheInput) {
  m_.shards.push_back(write_shard(dir_.path(), fp_, 0, {0, 1, 2}));
  m_.shards.push_back(write_shard(dir_.path(), fp_, 1, {9}));
  e3::io::write_manifest(dir_.path(), m_);
  EXPECT_HAS(verify_error(), "holds sample 9, but the input has 5 samples");
}

TEST_F(VerifyOutput, FailsWhenASkippedSampleIsStored) {
  m_.skipped = {{2, 3, "too long"}};
  m_.num_samples = 5;
  build_good();
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "00000002");
  EXPECT_HAS(msg, "skipped");
}

TEST_F(VerifyOutput, FailsOnFingerprintMismatchWithShardAttributes) {
  m_.shards.push_back(write_shard(dir_.path(), fp_, 0, {0, 1}));
  m_.complete = false;
  m_.fingerprint.layer_ids = {0, 1};  // the shard says [0, 2]
  e3::io::write_manifest(dir_.path(), m_);
  const std::string msg = verify_error();
  EXPECT_HAS(msg, "layer_ids");
}

TEST_F(VerifyOutput, FailsOnANonDirectory) {
  const std::string msg = [&] {
    try {
      e3::io::verify_output(dir_ / "nope");
    } catch (const e3::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Verify);
      return std::string(e.what());
    }
    ADD_FAILURE() << "verify passed";
    return std::string();
  }();
  EXPECT_HAS(msg, "nope");
}

// ---------------------------------------------------------------- parts and skipped samples

TEST(ManifestParts, NamesAndListing) {
  EXPECT_EQ(e3::io::manifest_name({}), "manifest.json");
  EXPECT_EQ(e3::io::manifest_name({3, 8}), "manifest.part-0003-of-0008.json");
  e3::test::TempDir dir;
  Manifest a = make_manifest();
  a.part = {1, 2};
  e3::io::write_manifest(dir.path(), a);
  std::ofstream(dir / "manifest.json.tmp.123") << "{}";
  std::ofstream(dir / "notes.json") << "{}";
  const auto listed = e3::io::list_manifests(dir.path());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].filename(), "manifest.part-0001-of-0002.json");
  EXPECT_FALSE(e3::io::read_manifest(dir.path()).has_value());  // part 0/1 has none
  const auto back = e3::io::read_manifest(dir.path(), {1, 2});
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->part, (e3::io::Part{1, 2}));
}

// The same 5-sample run cut in two parts: part 0 owns shards 0 and 2, part 1 owns shard 1.
class VerifyParts : public VerifyOutput {
 protected:
  Manifest part(int index) {
    Manifest m = m_;
    m.part = {index, 2};
    m.num_shards = index == 0 ? 2 : 1;
    m.skipped.clear();
    return m;
  }
};

TEST_F(VerifyParts, TwoCompletePartsMakeACompleteDirectory) {
  Manifest p0 = part(0), p1 = part(1);
  p0.shards.push_back(write_shard(dir_.path(), fp_, 0, {0, 1}));
  p0.shards.push_back(write_shard(dir_.path(), fp_, 2, {4}));
  p1.shards.push_back(write_shard(dir_.path(), fp_, 1, {2}));
  p1.skipped.push_back({3, 4, "longer than --max-seq-len"});
  e3::io::write_manifest(dir_.path(), p0);
  auto r = e3::io::verify_output(dir_.path());
  EXPECT_FALSE(r.complete);  // part 1 is missing
  EXPECT_EQ(r.parts, 1);
  EXPECT_EQ(r.part_count, 2);
  e3::io::write_manifest(dir_.path(), p1);
  r = e3::io::verify_output(dir_.path());
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.parts, 2);
  EXPECT_EQ(r.samples, 4);
  EXPECT_EQ(r.skipped, 1);
}

TEST_F(VerifyParts, FailsWhenAPartListsAnotherPartsShard) {
  Manifest p0 = part(0);
  p0.shards.push_back(write_shard(dir_.path(), fp_, 1, {2}));
  e3::io::write_manifest(dir_.path(), p0);
  EXPECT_HAS(verify_error(), "belongs to another part");
}

TEST_F(VerifyParts, FailsWhenPartCountsDiffer) {
  Manifest p0 = part(0), other = part(0);
  other.part = {1, 3};
  e3::io::write_manifest(dir_.path(), p0);
  e3::io::write_manifest(dir_.path(), other);
  EXPECT_HAS(verify_error(), "different numbers of parts");
}

TEST_F(VerifyParts, FailsWhenPartsComeFromDifferentRuns) {
  Manifest p0 = part(0), p1 = part(1);
  p1.fingerprint.dtype = "fp16";
  e3::io::write_manifest(dir_.path(), p0);
  e3::io::write_manifest(dir_.path(), p1);
  EXPECT_HAS(verify_error(), "dtype");
}

TEST_F(VerifyOutput, ASampleSkippedForNonFiniteStatesIsAccountedFor) {
  // Shard 1 holds sample 2 and records sample 3 as left out; no manifest-level skip.
  m_.skipped.clear();
  m_.shards.push_back(write_shard(dir_.path(), fp_, 0, {0, 1}));
  {
    ShardWriter w(dir_.path(), 1, attrs_for(fp_));
    w.skip_sample({3, 4, "NaN in capture id 2 at token 0 of 3, column 1"});
    m_.shards.push_back(w.commit());
  }
  m_.shards.push_back(write_shard(dir_.path(), fp_, 2, {4}));
  m_.shards[1].samples.clear();
  // Sample 2 is missing now: the directory is incomplete, so make the manifest say so.
  m_.complete = false;
  e3::io::write_manifest(dir_.path(), m_);
  auto r = e3::io::verify_output(dir_.path());
  EXPECT_EQ(r.skipped, 1);
  ASSERT_EQ(m_.shards[1].skipped.size(), 1u);
  EXPECT_EQ(m_.shards[1].skipped[0].index, 3);

  const auto inspected = e3::io::inspect_shard(dir_ / "shard-000001.h5");
  ASSERT_EQ(inspected.record.skipped.size(), 1u);
  EXPECT_EQ(inspected.record.skipped[0].index, 3);
  EXPECT_EQ(inspected.record.skipped[0].line, 4);
  EXPECT_HAS(inspected.record.skipped[0].reason, "NaN in capture id 2");

  // The manifest and the shard must agree on what was left out.
  m_.shards[1].skipped.clear();
  e3::io::write_manifest(dir_.path(), m_);
  EXPECT_HAS(verify_error(), "/skipped holds [00000003], the manifest lists []");
}

// ---------------------------------------------------------------- reading at the storage's speed

TEST(StoredBits, DecodeBf16Fp16AndFp8) {
  EXPECT_EQ(e3::bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(e3::bf16_to_float(0xC040), -3.0f);
  EXPECT_TRUE(std::isinf(e3::bf16_to_float(0x7F80)));
  EXPECT_EQ(e3::fp16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(e3::fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(e3::fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(e3::fp16_to_float(0x8400), -std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(e3::fp16_to_float(0xFC00)));
  EXPECT_TRUE(std::isnan(e3::fp16_to_float(0x7E00)));
  EXPECT_EQ(e3::e4m3fn_to_float(0x38), 1.0f);
  EXPECT_EQ(e3::e4m3fn_to_float(0x7E), 448.0f);
  EXPECT_EQ(e3::e4m3fn_to_float(0xFE), -448.0f);
  EXPECT_EQ(e3::e4m3fn_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e3::e4m3fn_to_float(0x07), 7.0f * std::ldexp(1.0f, -9));  // subnormal
  EXPECT_EQ(e3::e4m3fn_to_float(0x0F), 1.875f * std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(e3::e4m3fn_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e3::e4m3fn_to_float(0xFF)));
}

void write_u8(hid_t g, const char* name, const std::vector<hsize_t>& dims, const std::vector<uint8_t>& v) {
  const H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  const H5Id ds(H5Dcreate2(g, name, H5T_STD_U8LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  ASSERT_GE(H5Dwrite(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  e3::io::write_attr(ds.get(), "encoding", std::string("float8_e4m3fn"));
}

void write_f32(hid_t g, const char* name, const std::vector<hsize_t>& dims, const std::vector<float>& v) {
  const H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  const H5Id ds(H5Dcreate2(g, name, H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  ASSERT_GE(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
}

// An fp8 shard as the DESIGN.md schema has it, made with the HDF5 C API: hidden_states
// uint8 [T, K, H] (encoding float8_e4m3fn) with float32 hidden_states_scale [T, K], and
// last_hidden_state [T, H] with last_hidden_state_scale [T]. `poke` may spoil it.
CommittedShard write_fp8_shard(const fs::path& dir, const RunFingerprint& fp, int64_t index,
                               const std::vector<int64_t>& samples,
                               const std::function<void(int64_t, std::vector<uint8_t>&, std::vector<float>&)>& poke) {
  const fs::path path = dir / e3::io::shard_file_name(index);
  CommittedShard rec{path.filename().string(), index, samples, 0, 0, "", {}};
  {
    const H5Id f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    e3::io::write_attr(f.get(), "format", std::string(e3::io::kFormatName));
    e3::io::write_attr(f.get(), "format_version", e3::io::kFormatVersion);
    e3::io::write_attr(f.get(), "layer_ids", fp.layer_ids);
    e3::io::write_attr(f.get(), "final", fp.final_mode);
    e3::io::write_attr(f.get(), "dtype", std::string("fp8"));
    e3::io::write_attr(f.get(), "shard_index", index);
    e3::io::write_attr(f.get(), "hidden_size", kH);
    e3::io::write_attr(f.get(), "run_fingerprint", fp.digest());
    const H5Id g(H5Gcreate2(f.get(), "samples", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    for (int64_t s : samples) {
      const hsize_t T = static_cast<hsize_t>(tokens_of(s)), K = fp.layer_ids.size(), H = kH;
      const H5Id sg(H5Gcreate2(g.get(), fmt::format("{:08d}", s).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    H5Gclose);
      std::vector<int32_t> ids(T, 7);
      const H5Id space(H5Screate_simple(1, &T, nullptr), H5Sclose);
      const H5Id ds(H5Dcreate2(sg.get(), "input_ids", H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT), H5Dclose);
      H5Dwrite(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data());
      write_u8(sg.get(), "loss_mask", {T}, std::vector<uint8_t>(T, 1));
      e3::io::write_attr(sg.get(), "num_tokens", static_cast<int64_t>(T));
      std::vector<uint8_t> hs(T * K * H), last(T * H);
      for (size_t i = 0; i < hs.size(); ++i) hs[i] = static_cast<uint8_t>(i * 37 % 0x7F);  // never 0x7F
      for (size_t i = 0; i < last.size(); ++i) last[i] = static_cast<uint8_t>(0x80 | (i * 11 % 0x7F));
      std::vector<float> hs_scale(T * K, 0.5f), last_scale(T, 2.0f);
      poke(s, hs, last_scale);
      write_u8(sg.get(), "hidden_states", {T, K, H}, hs);
      write_f32(sg.get(), "hidden_states_scale", {T, K}, hs_scale);
      write_u8(sg.get(), "last_hidden_state", {T, H}, last);
      write_f32(sg.get(), "last_hidden_state_scale", {T}, last_scale);
      rec.num_tokens += static_cast<int64_t>(T);
    }
  }
  rec.bytes = fs::file_size(path);
  rec.checksum = e3::io::file_checksum(path);
  return rec;
}

TEST_F(VerifyOutput, ChecksFp8ShardsWithTheirScales) {
  fp_.dtype = "fp8";
  m_.fingerprint = fp_;
  const auto build = [&](const std::function<void(int64_t, std::vector<uint8_t>&, std::vector<float>&)>& poke) {
    m_.shards.clear();
    m_.shards.push_back(write_fp8_shard(dir_.path(), fp_, 0, {0, 1}, poke));
    m_.shards.push_back(write_fp8_shard(dir_.path(), fp_, 1, {2}, poke));
    m_.shards.push_back(write_fp8_shard(dir_.path(), fp_, 2, {4}, poke));
    e3::io::write_manifest(dir_.path(), m_);
  };
  build([](int64_t, std::vector<uint8_t>&, std::vector<float>&) {});
  const e3::io::VerifyReport r = e3::io::verify_output(dir_.path());
  EXPECT_EQ(r.samples, 4);
  EXPECT_EQ(r.shards_read, 3);
  // 0xFF is NaN in e4m3fn (0x7F too); there is no infinity.
  build([](int64_t s, std::vector<uint8_t>& hs, std::vector<float>&) {
    if (s == 2) hs[5] = 0xFF;
  });
  std::string msg = verify_error();
  EXPECT_HAS(msg, "shard-000001.h5 sample 00000002: hidden_states has a non-finite value (-nan) at flat index 5");
  build([](int64_t s, std::vector<uint8_t>&, std::vector<float>& last_scale) {
    if (s == 4) last_scale[1] = -1.0f;
  });
  msg = verify_error();
  EXPECT_HAS(msg, "shard-000002.h5 sample 00000004: last_hidden_state_scale has a negative or non-finite scale (-1)");
}

// Runs `f` on another thread; fails the test (and releases the reader) if it blocks on `fifo`.
std::optional<e3::Error> error_without_blocking(const fs::path& fifo, const std::function<void()>& f) {
  auto result = std::async(std::launch::async, [&] { return e3::test::error_of(f); });
  if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked on the FIFO";
    while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  return result.get();
}

TEST_F(VerifyOutput, AFifoNamedLikeAListedShardIsRefusedWithoutBlocking) {
  build_good();
  const fs::path shard = dir_ / "shard-000001.h5";
  fs::remove(shard);
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
  const auto err = error_without_blocking(shard, [&] { e3::io::verify_output(dir_.path()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Verify);
  EXPECT_HAS(std::string(err->what()), "shard-000001.h5: is a FIFO, not a regular file");
}

TEST_F(VerifyOutput, AnUnlistedFifoNamedLikeAShardIsRefusedWithoutBlocking) {
  build_good();
  const fs::path stray = dir_ / "shard-000009.h5";
  ASSERT_EQ(::mkfifo(stray.c_str(), 0600), 0);
  const auto err = error_without_blocking(stray, [&] { e3::io::verify_output(dir_.path()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Verify);
  EXPECT_HAS(std::string(err->what()), "shard-000009.h5: is a FIFO, not a regular file");
}

void flip_byte_near_end(const fs::path& path) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(-64, std::ios::end);
  f.put('\x5a');
}

TEST_F(VerifyOutput, EveryDamagedShardIsReportedAndRanksShareTheShards) {
  build_good();
  flip_byte_near_end(dir_ / "shard-000000.h5");
  flip_byte_near_end(dir_ / "shard-000002.h5");
  e3::io::VerifyOptions options;
  options.threads = 2;
  options.collect_problems = true;
  e3::io::VerifyReport r = e3::io::verify_output(dir_.path(), options);
  ASSERT_EQ(r.problems.size(), 2u);
  EXPECT_HAS(std::string(r.problems[0].what()), "shard-000000.h5: checksum");
  EXPECT_HAS(std::string(r.problems[1].what()), "shard-000002.h5: checksum");
  EXPECT_EQ(r.shards_read, 3);
  EXPECT_EQ(r.bytes_read, m_.shards[0].bytes + m_.shards[1].bytes + m_.shards[2].bytes);
  // Rank 1 of 2 reads shard 1 only (index % 2), which is whole; the counts cover all.
  options.rank = 1;
  options.ranks = 2;
  r = e3::io::verify_output(dir_.path(), options);
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.shards_read, 1);
  EXPECT_EQ(r.bytes_read, m_.shards[1].bytes);
  EXPECT_EQ(r.samples, 4);
  options.rank = 0;
  r = e3::io::verify_output(dir_.path(), options);
  EXPECT_EQ(r.shards_read, 2);
  EXPECT_EQ(r.problems.size(), 2u);
}

// A shard in the page cache is mapped and checked where it lies (the default), or read with
// pread: the same bytes are counted and the same problems found, by checksum and by value.
TEST_F(VerifyOutput, MappedAndReadShardsShowTheSameProblems) {
  build_good(/*nan_at=*/2);
  for (auto& s : m_.shards) s.checksum.clear();  // the NaN first, with no checksum to find the flip
  e3::io::write_manifest(dir_.path(), m_);
  const auto problems = [&](bool map_cached) {
    e3::io::VerifyOptions options;
    options.threads = 2;
    options.map_cached = map_cached;
    options.collect_problems = true;
    const e3::io::VerifyReport r = e3::io::verify_output(dir_.path(), options);
    // The bytes counted: without checksums the states' only, else every byte of the files.
    std::vector<std::string> what{std::to_string(r.bytes_read)};
    for (const e3::Error& e : r.problems) what.push_back(e.what());
    return what;
  };
  const std::vector<std::string> alone = problems(false);
  ASSERT_EQ(alone.size(), 2u);
  EXPECT_HAS(alone[1], "00000002");
  EXPECT_HAS(alone[1], "non-finite");
  EXPECT_EQ(problems(true), alone);

  // With checksums again, a byte flipped in shard 0 is found the same way.
  m_.shards.clear();
  build_good();
  flip_byte_near_end(dir_ / "shard-000000.h5");
  const std::vector<std::string> flipped = problems(false);
  ASSERT_EQ(flipped.size(), 2u);
  EXPECT_EQ(flipped[0], std::to_string(m_.shards[0].bytes + m_.shards[1].bytes + m_.shards[2].bytes));
  EXPECT_HAS(flipped[1], "shard-000000.h5: checksum");
  EXPECT_EQ(problems(true), flipped);
}

TEST_F(VerifyOutput, ProgressCountsShardsAndBytesUpToTheTotal) {
  build_good();
  std::vector<e3::io::VerifyProgress> seen;
  std::mutex m;
  e3::io::VerifyOptions options;
  options.threads = 2;
  options.progress_interval_s = 1e-4;
  options.progress = [&](const e3::io::VerifyProgress& p) {
    std::lock_guard<std::mutex> lock(m);
    seen.push_back(p);
  };
  e3::io::verify_output(dir_.path(), options);
  const uint64_t total = m_.shards[0].bytes + m_.shards[1].bytes + m_.shards[2].bytes;
  ASSERT_FALSE(seen.empty());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].shards_total, 3);
    EXPECT_EQ(seen[i].bytes_total, total);
    EXPECT_LE(seen[i].bytes_done, total);
    EXPECT_EQ(seen[i].finished, i + 1 == seen.size());
    if (i > 0) {
      EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
    }
  }
  EXPECT_EQ(seen.back().shards_done, 3);
  EXPECT_EQ(seen.back().bytes_done, total);
}

}  // namespace
