// AsyncStepWriter: steps are written on the writer's thread, a slot is free again once its
// step is written, and after a failure the loop is never left waiting: acquire returns,
// error() holds the first failure, submit and finish rethrow it.
#include <gtest/gtest.h>

#include <filesystem>

#include "jobs/step_writer.h"
#include "support/step_rig.h"
#include "support/test_support.h"

namespace {

using e3::jobs::AsyncStepWriter;
using e3::jobs::NonfiniteCheck;
using e3::jobs::OnNonfinite;
using e3::jobs::ShardCommitter;
using e3::test::StepRig;

TEST(AsyncStepWriter, WritesEveryStepAndReusesTheSlots) {
  StepRig rig(3, 2, 2);
  ShardCommitter committer(rig.out(), rig.attrs(), rig.todo(), NonfiniteCheck{}, {});
  AsyncStepWriter writer(committer, rig.capture(), rig.backend());
  for (int64_t s = 0; s < 6; ++s) {  // more steps than slots: each slot is acquired again
    const int slot = static_cast<int>(s % StepRig::kSlots);
    writer.acquire(slot);
    ASSERT_EQ(writer.error(), nullptr);
    auto [samples, ticket] = rig.step(slot, s, 1);
    writer.submit(s, slot, ticket, std::move(samples));
  }
  writer.finish(true);
  ASSERT_EQ(committer.committed().size(), 3u);
  for (int64_t shard = 0; shard < 3; ++shard) {
    EXPECT_TRUE(std::filesystem::exists(rig.shard_file(shard)));
    EXPECT_EQ(committer.committed()[static_cast<size_t>(shard)].samples,
              (std::vector<int64_t>{2 * shard, 2 * shard + 1}));
  }
}

TEST(AsyncStepWriter, AFailureNeverLeavesTheLoopWaiting) {
  StepRig rig(2, 2, 2);
  ShardCommitter committer(rig.out(), rig.attrs(), rig.todo(), NonfiniteCheck{OnNonfinite::Error, "in.jsonl"}, {});
  AsyncStepWriter writer(committer, rig.capture(), rig.backend());
  writer.acquire(0);
  auto [bad, t0] = rig.step(0, 0, 2, /*nan_sample=*/1);
  writer.submit(0, 0, t0, std::move(bad));
  ASSERT_TRUE(e3::test::eventually([&] { return writer.error() != nullptr; }));
  writer.acquire(0);  // returns: the failed step's slot is released
  writer.acquire(1);
  auto [next, t1] = rig.step(1, 2, 1);
  try {
    writer.submit(1, 1, t1, std::move(next));
    FAIL() << "submit after the failure was accepted";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::NonFinite);
  }
  const auto e = e3::test::error_of([&] { writer.finish(false); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(e3::test::Contains(e->what(), "sample 1 (in.jsonl:2)"));
  EXPECT_FALSE(std::filesystem::exists(rig.shard_file(0))) << "a shard moved on past the failure";
}

}  // namespace
