// The manifest's structure as verify and a rerun both check it (io::check_manifest_structure),
// verify's verdict on incomplete runs, and what verify says about a directory that is no
// output directory at all.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "io/manifest.h"
#include "io/verify.h"
#include "core/error.h"
#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using e3::ErrorKind;
using e3::io::Manifest;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

// A finished run over 7 samples, 3 per shard: shard 0 = {0, 1, 2}, shard 1 = {3, 5} with 4
// left out for NaN, shard 2 = {} with 6 over --max-seq-len.
Manifest finished_run() {
  Manifest m;
  m.fingerprint.model_fingerprint = "m";
  m.fingerprint.layer_ids = {1, 2};
  m.fingerprint.final_mode = "post-norm";
  m.fingerprint.dtype = "bf16";
  m.fingerprint.max_seq_len = 16;
  m.fingerprint.on_long = "skip";
  m.fingerprint.samples_per_shard = 3;
  m.fingerprint.tool_version = "t";
  m.num_samples = 7;
  m.num_shards = 3;
  m.complete = true;
  m.shards.push_back({"shard-000000.h5", 0, {0, 1, 2}, 9, 100, "", {}});
  m.shards.push_back({"shard-000001.h5", 1, {3, 5}, 6, 100, "", {{4, 5, "NaN"}}});
  m.shards.push_back({"shard-000002.h5", 2, {}, 0, 100, "", {}});
  m.skipped.push_back({6, 7, "too long"});
  return m;
}

// The message of the error check_manifest_structure throws, after checking its kind.
std::string structure_error(const Manifest& m, ErrorKind kind = ErrorKind::Verify, std::string_view advice = {}) {
  const auto err = e3::test::error_of([&] { e3::io::check_manifest_structure(m, "DIR/manifest.json", kind, advice); });
  if (!err) {
    ADD_FAILURE() << "the manifest passed";
    return {};
  }
  EXPECT_EQ(err->kind(), kind) << err->what();
  return err->what();
}

TEST(ManifestStructure, AcceptsWhatARunWrites) {
  EXPECT_NO_THROW(e3::io::check_manifest_structure(finished_run(), "m", ErrorKind::Verify));
  Manifest partial = finished_run();
  partial.complete = false;
  partial.shards.pop_back();
  partial.shards.erase(partial.shards.begin());
  EXPECT_NO_THROW(e3::io::check_manifest_structure(partial, "m", ErrorKind::Verify));
}

TEST(ManifestStructure, ASampleListedTwiceAcrossShards) {
  Manifest m = finished_run();
  m.shards[1].samples = {3, 2, 5};
  const std::string msg = structure_error(m);
  EXPECT_HAS(msg, "DIR/manifest.json: sample 00000002 appears twice: in shard-000000.h5 and shard-000001.h5");
}

TEST(ManifestStructure, ASampleListedTwiceInOneShard) {
  Manifest m = finished_run();
  m.shards[0].samples = {0, 1, 1, 2};
  EXPECT_HAS(structure_error(m), "sample 00000001 appears twice: in shard-000000.h5 and shard-000000.h5");
}

TEST(ManifestStructure, SwappedShardIndexValues) {
  Manifest m = finished_run();
  std::swap(m.shards[0].shard_index, m.shards[1].shard_index);
  EXPECT_HAS(structure_error(m), "shard-000000.h5 has shard_index 1, which is the index of shard-000001.h5");
}

TEST(ManifestStructure, ASampleInAnotherShardsRange) {
  Manifest m = finished_run();
  m.shards[0].samples = {0, 1};
  m.shards[1].samples = {2, 3, 5};
  EXPECT_HAS(structure_error(m), "shard-000001.h5 (samples 3 to 5) lists sample 00000002, which belongs in shard-000000.h5");
  m = finished_run();
  m.shards[1].skipped[0].index = 6;
  m.skipped.clear();
  EXPECT_HAS(structure_error(m), "lists sample 00000006, which belongs in shard-000002.h5");
}

TEST(ManifestStructure, AShardIndexPastTheInput) {
  Manifest m = finished_run();
  m.complete = false;
  m.shards[2] = {"shard-000003.h5", 3, {}, 0, 100, "", {}};
  EXPECT_HAS(structure_error(m), "shard-000003.h5 has shard_index 3, but the plan of 7 samples has shards 0 to 2");
}

TEST(ManifestStructure, ASampleBothStoredAndSkipped) {
  Manifest m = finished_run();
  m.skipped.push_back({5, 6, "too long"});
  EXPECT_HAS(structure_error(m), "sample 00000005 is listed as skipped (the top-level skipped list) but is stored in shard-000001.h5");
}

TEST(ManifestStructure, CompleteButASampleUnaccounted) {
  Manifest m = finished_run();
  m.shards[1].samples = {3};
  EXPECT_HAS(structure_error(m), "says complete, but sample 00000005 is neither stored nor listed as skipped");
  m.complete = false;  // an interrupted run may lack it
  EXPECT_NO_THROW(e3::io::check_manifest_structure(m, "m", ErrorKind::Verify));
}

TEST(ManifestStructure, AShardCountThatDoesNotFitTheInput) {
  Manifest m = finished_run();
  m.num_shards = 4;
  EXPECT_HAS(structure_error(m), "num_shards is 4, but the plan of 7 samples makes 3 shards for part 0/1");
}

TEST(ManifestStructure, AnotherPartsShardOrSkip) {
  Manifest m = finished_run();
  m.part = {1, 2};  // owns shard 1 only
  m.num_shards = 1;
  m.complete = false;
  m.shards.erase(m.shards.begin());
  EXPECT_HAS(structure_error(m), "lists shard-000002.h5, which belongs to another part");
  m.shards.pop_back();
  EXPECT_HAS(structure_error(m), "skipped sample 00000006 belongs to shard-000002.h5, another part's shard");
  m.skipped.clear();
  m.complete = true;
  EXPECT_NO_THROW(e3::io::check_manifest_structure(m, "m", ErrorKind::Verify));
}

TEST(ManifestStructure, TheCallerChoosesTheKindAndAdvice) {
  Manifest m = finished_run();
  m.shards[1].samples = {3, 5, 5};
  const std::string msg = structure_error(m, ErrorKind::Output, "; move it aside");
  EXPECT_HAS(msg, "appears twice");
  EXPECT_TRUE(msg.ends_with("; move it aside")) << msg;
}

// ---------------------------------------------------------------- verify's verdict

TEST(VerifyVerdict, AnIncompleteRunFailsSayingHowMuchIsThere) {
  e3::io::VerifyReport r;
  r.samples = 280;
  r.skipped = 20;
  r.num_samples = 3000;
  r.parts = 1;
  r.part_count = 3;
  r.complete = false;
  const auto err = e3::test::error_of([&] { e3::io::require_complete(r, "/scratch/hs"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Verify);
  const std::string msg = err->what();
  EXPECT_HAS(msg, "/scratch/hs: the run is not complete: 300 of 3000 input samples accounted for (280 stored, 20 "
                  "skipped), 1 of 3 parts present");
  EXPECT_HAS(msg, "--allow-incomplete");
  r.complete = true;
  EXPECT_NO_THROW(e3::io::require_complete(r, "/scratch/hs"));
}

TEST(VerifyVerdict, ADirectoryWithoutManifestOrShardsIsNoOutputDirectory) {
  e3::test::TempDir dir;
  e3::test::write_text(dir / "notes.txt", "hello");
  const auto err = e3::test::error_of([&] { e3::io::verify_output(dir.path()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Verify);
  EXPECT_HAS(std::string(err->what()),
             dir.path().string() + " is not an eagle3_extract output directory: no manifest.json and no shard-*.h5");
  // Shards without their manifest are a damaged output directory, and said so.
  e3::test::write_text(dir / "shard-000000.h5", "x");
  const auto damaged = e3::test::error_of([&] { e3::io::verify_output(dir.path()); });
  ASSERT_TRUE(damaged.has_value());
  EXPECT_HAS(std::string(damaged->what()), "no manifest.json beside its shard files");
}

}  // namespace
