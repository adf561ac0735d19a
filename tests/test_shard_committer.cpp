// ShardCommitter: shards are written in plan order and renamed into place (on the publisher
// thread) once their last sample is written; a stop drops the partial shard; a failure of the
// publisher, whatever its type, reaches the caller; non-finite samples stop the job or are
// left out and listed.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <system_error>
#include <vector>

#include "jobs/step_writer.h"
#include "support/step_rig.h"
#include "support/test_support.h"

namespace {

using e3::jobs::NonfiniteCheck;
using e3::jobs::OnNonfinite;
using e3::jobs::ShardCommitter;
using e3::test::StepRig;

bool has_temp_files(const std::filesystem::path& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() != ".h5") return true;
  return false;
}

TEST(ShardCommitter, CommitsEachShardOnceItsLastSampleIsWritten) {
  StepRig rig(2, 2, 3);
  std::mutex m;
  std::vector<int64_t> seen;
  ShardCommitter committer(rig.out(), rig.attrs(), rig.todo(), NonfiniteCheck{}, [&](const e3::io::CommittedShard& c) {
    std::lock_guard<std::mutex> lock(m);
    seen.push_back(c.shard_index);
  });
  auto [first, t0] = rig.step(0, 0, 3);  // shard 0 whole, and the first sample of shard 1
  committer.write(first, rig.capture(), 0);
  ASSERT_TRUE(e3::test::eventually([&] { return std::filesystem::exists(rig.shard_file(0)); }));
  EXPECT_FALSE(std::filesystem::exists(rig.shard_file(1)));
  auto [second, t1] = rig.step(1, 3, 1);
  committer.write(second, rig.capture(), 1);
  committer.finish(true);
  EXPECT_TRUE(std::filesystem::exists(rig.shard_file(1)));
  ASSERT_EQ(committer.committed().size(), 2u);
  EXPECT_EQ(committer.committed()[0].samples, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(committer.committed()[1].samples, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(committer.committed()[1].num_tokens, 6);
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(has_temp_files(rig.out()));
}

TEST(ShardCommitter, AStopDropsThePartialShard) {
  StepRig rig(2, 2, 3);
  ShardCommitter committer(rig.out(), rig.attrs(), rig.todo(), NonfiniteCheck{}, {});
  auto [step, ticket] = rig.step(0, 0, 3);
  committer.write(step, rig.capture(), 0);
  committer.finish(false);
  EXPECT_TRUE(std::filesystem::exists(rig.shard_file(0)));
  EXPECT_FALSE(std::filesystem::exists(rig.shard_file(1)));
  EXPECT_EQ(committer.committed().size(), 1u);
  EXPECT_FALSE(has_temp_files(rig.out())) << "the partial shard's temporary file was left";
}

TEST(ShardCommitter, APublisherFailureOfAnyTypeReachesTheCaller) {
  StepRig rig(2, 1, 2);
  ShardCommitter committer(rig.out(), rig.attrs(), rig.todo(), NonfiniteCheck{}, {}, [&](int64_t shard) {
    if (shard == 1)
      throw std::filesystem::filesystem_error("disk gone", rig.shard_file(1), std::make_error_code(std::errc::io_error));
  });
  auto [step, ticket] = rig.step(0, 0, 2);
  committer.write(step, rig.capture(), 0);
  EXPECT_THROW(committer.finish(true), std::filesystem::filesystem_error);
  EXPECT_TRUE(std::filesystem::exists(rig.shard_file(0)));
  EXPECT_FALSE(std::filesystem::exists(rig.shard_file(1)));
  ASSERT_EQ(committer.committed().size(), 1u);
  EXPECT_EQ(committer.committed()[0].shard_index, 0);
}

TEST(ShardCommitter, ANonFiniteSampleStopsTheJobNamingIt) {
  StepRig rig(1, 2, 3);
  ShardCommitter committer(rig.out(), rig.attrs(), rig.todo(), NonfiniteCheck{OnNonfinite::Error, "in.jsonl"}, {});
  auto [step, ticket] = rig.step(0, 0, 2, /*nan_sample=*/1);
  const auto e = e3::test::error_of([&] { committer.write(step, rig.capture(), 0); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind(), e3::ErrorKind::NonFinite);
  EXPECT_TRUE(e3::test::Contains(e->what(), "sample 1 (in.jsonl:2): NaN in capture id 1 at token 1 of 3"));
  committer.finish(false);
  EXPECT_FALSE(std::filesystem::exists(rig.shard_file(0)));
}

TEST(ShardCommitter, SkipLeavesANonFiniteSampleOutAndListsIt) {
  StepRig rig(1, 2, 3);
  ShardCommitter committer(rig.out(), rig.attrs(), rig.todo(), NonfiniteCheck{OnNonfinite::Skip, "in.jsonl"}, {});
  auto [step, ticket] = rig.step(0, 0, 2, /*nan_sample=*/0);
  committer.write(step, rig.capture(), 0);
  committer.finish(true);
  ASSERT_EQ(committer.committed().size(), 1u);
  EXPECT_EQ(committer.committed()[0].samples, (std::vector<int64_t>{1}));
  ASSERT_EQ(committer.committed()[0].skipped.size(), 1u);
  EXPECT_EQ(committer.committed()[0].skipped[0].index, 0);
}

}  // namespace
