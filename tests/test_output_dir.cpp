// Odd things in --out: a rerun refuses them with an output error naming the path, and never
// opens what is not a plain file (a FIFO would block the job forever).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "io/manifest.h"
#include "jobs/output_dir.h"
#include "core/error.h"
#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using e3::ErrorKind;

// prepare_output_dir on `dir` (as part `part`) fails with an output error naming `path`.
void expect_refused(const fs::path& dir, const fs::path& path, e3::io::Part part = {}) {
  const auto err = e3::test::error_of([&] { e3::jobs::prepare_output_dir(dir, e3::test::small_run_fingerprint(), "data", part); });
  ASSERT_TRUE(err.has_value()) << path << " was accepted";
  EXPECT_EQ(err->kind(), ErrorKind::Output) << err->what();
  EXPECT_NE(std::string(err->what()).find(path.string()), std::string::npos) << err->what();
}

TEST(OutputDirOddNames, AShardIndexTooLargeForAnyShard) {
  EXPECT_FALSE(e3::jobs::shard_index_of("shard-99999999999999999999.h5").has_value());
  e3::test::TempDir dir;
  e3::test::write_text(dir / "shard-99999999999999999999.h5", "x");
  expect_refused(dir.path(), dir / "shard-99999999999999999999.h5");
  expect_refused(dir.path(), dir / "shard-99999999999999999999.h5", {1, 2});
}

TEST(OutputDirOddNames, AForeignH5File) {
  e3::test::TempDir dir;
  e3::test::write_text(dir / "notes.h5", "not ours");
  expect_refused(dir.path(), dir / "notes.h5");
  EXPECT_TRUE(fs::exists(dir / "notes.h5"));  // refused, not moved aside as if it were a broken shard
  expect_refused(dir.path(), dir / "notes.h5", {0, 2});
}

TEST(OutputDirOddNames, ADirectoryNamedLikeAShard) {
  e3::test::TempDir dir;
  fs::create_directories(dir / "shard-000000.h5");
  expect_refused(dir.path(), dir / "shard-000000.h5");
  EXPECT_TRUE(fs::is_directory(dir / "shard-000000.h5"));
}

TEST(OutputDirOddNames, AFifoNamedLikeAShardIsNeverOpened) {
  e3::test::TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "shard-000000.h5").c_str(), 0644), 0);
  expect_refused(dir.path(), dir / "shard-000000.h5");
}

TEST(OutputDirOddNames, AManifestListedShardThatIsNotAPlainFile) {
  e3::test::TempDir dir;
  e3::io::Manifest m;
  m.fingerprint = e3::test::small_run_fingerprint();
  m.data_fingerprint = "data";
  m.num_samples = 1;
  m.num_shards = 1;
  e3::io::CommittedShard s;
  s.shard_index = 0;
  s.file = "shard-000000.h5";
  s.samples = {0};
  s.bytes = 10;
  m.shards.push_back(s);
  e3::io::write_manifest(dir.path(), m);
  ASSERT_EQ(::mkfifo((dir / "shard-000000.h5").c_str(), 0644), 0);
  expect_refused(dir.path(), dir / "shard-000000.h5");
  fs::remove(dir / "shard-000000.h5");
  fs::create_directories(dir / "shard-000000.h5");
  expect_refused(dir.path(), dir / "shard-000000.h5");
}

TEST(OutputDirOddNames, ATemporaryNameThatCannotBeRemoved) {
  e3::test::TempDir dir;
  fs::create_directories(dir / "shard-000000.h5.tmp.12/inside");
  expect_refused(dir.path(), dir / "shard-000000.h5.tmp.12");
}

TEST(OutputDirState, AFinishedRunsManifestIsCurrent) {
  e3::test::TempDir dir;
  e3::io::Manifest m;
  m.fingerprint = e3::test::small_run_fingerprint();
  m.data_fingerprint = "data";
  m.num_samples = 1;  // skipped as too long: a complete run that stored nothing
  m.num_shards = 1;
  m.skipped.push_back({0, 1, "too long"});
  m.complete = true;
  e3::io::write_manifest(dir.path(), m);
  EXPECT_TRUE(e3::jobs::prepare_output_dir(dir.path(), e3::test::small_run_fingerprint(), "data").manifest_current);
  m.complete = false;
  e3::io::write_manifest(dir.path(), m);
  EXPECT_FALSE(e3::jobs::prepare_output_dir(dir.path(), e3::test::small_run_fingerprint(), "data").manifest_current);
}

}  // namespace
