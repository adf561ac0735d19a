// The work plan must be a pure function of the input and the settings: a resumed run plans
// the same shards, skips the committed ones, and counts only samples that will be written.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "io/dataset.h"
#include "io/manifest.h"
#include "jobs/output_dir.h"
#include "jobs/plan.h"
#include "core/error.h"
#include "support/test_support.h"

namespace {

using e3::io::Dataset;
using e3::io::DatasetOptions;
using e3::io::OnLong;
using e3::jobs::ShardLimits;
using e3::jobs::ShardPlan;
using e3::jobs::WorkPlan;

// Token counts of the samples; with max_seq_len 4, samples 1 (5 tokens) and 5 (6 tokens) are
// too long. A blank line sits between samples 3 and 4: it is not a sample.
const std::vector<int> kLengths{2, 5, 3, 1, 4, 6, 2};

Dataset open_dataset(const e3::test::TempDir& dir, OnLong on_long = OnLong::Skip,
                     const std::vector<int>& lengths = kLengths) {
  std::string text;
  for (size_t i = 0; i < lengths.size(); ++i) {
    text += "{\"id\": \"s" + std::to_string(i) + "\", \"input_ids\": [";
    for (int t = 0; t < lengths[i]; ++t) text += (t ? ", " : "") + std::to_string(t + 1);
    text += "]}\n";
    if (i == 3) text += "\n";
  }
  e3::test::write_text(dir / "data.jsonl", text);
  DatasetOptions opts;
  opts.vocab_size = 100;
  opts.max_seq_len = 4;
  opts.on_long = on_long;
  return Dataset::open(dir / "data.jsonl", opts);
}

// Shards bounded by sample count alone, as one DP group of one part plans them.
e3::jobs::ShardLimits by_count(int64_t per_shard) {
  e3::jobs::ShardLimits l;
  l.max_samples = per_shard;
  return l;
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// 995 state bytes per token: 1000 bytes a token with input_ids and loss_mask.
ShardLimits by_bytes(uint64_t max_bytes) {
  ShardLimits l;
  l.max_bytes = max_bytes;
  l.state_bytes_per_token = 995;
  return l;
}

std::vector<int64_t> indices(const std::vector<const ShardPlan*>& shards) {
  std::vector<int64_t> out;
  for (const ShardPlan* s : shards) out.push_back(s->index);
  return out;
}

TEST(PlanShards, RangesCoverTheInputInOrder) {
  e3::test::TempDir dir;
  const Dataset data = open_dataset(dir);
  ASSERT_EQ(data.samples().size(), kLengths.size());
  const WorkPlan plan = e3::jobs::make_plan(data, by_count(3), 1, {});
  ASSERT_EQ(plan.shards.size(), 3u);
  const int64_t first[] = {0, 3, 6}, end[] = {3, 6, 7};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.shards[i].index, static_cast<int64_t>(i));
    EXPECT_EQ(plan.shards[i].first_sample, first[i]) << i;
    EXPECT_EQ(plan.shards[i].end_sample, end[i]) << i;
    EXPECT_FALSE(plan.shards[i].committed);
  }
}

TEST(PlanShards, SkippedSamplesAreNotCounted) {
  e3::test::TempDir dir;
  const WorkPlan plan = e3::jobs::make_plan(open_dataset(dir), by_count(3), 1, {});
  // Shard 0: samples 0, 1 (skipped), 2. Shard 1: 3, 4, 5 (skipped). Shard 2: 6.
  EXPECT_EQ(plan.shards[0].samples_to_write, 2);
  EXPECT_EQ(plan.shards[0].tokens_to_write, 2 + 3);
  EXPECT_EQ(plan.shards[1].samples_to_write, 2);
  EXPECT_EQ(plan.shards[1].tokens_to_write, 1 + 4);
  EXPECT_EQ(plan.shards[2].samples_to_write, 1);
  EXPECT_EQ(plan.shards[2].tokens_to_write, 2);
  EXPECT_EQ(plan.samples_pending, 5);
  EXPECT_EQ(plan.tokens_pending, 12);
  EXPECT_EQ(plan.samples_committed, 0);
}

TEST(PlanShards, TruncatedSamplesCountTheirTruncatedTokens) {
  e3::test::TempDir dir;
  const WorkPlan plan = e3::jobs::make_plan(open_dataset(dir, OnLong::Truncate), by_count(3), 1, {});
  EXPECT_EQ(plan.shards[0].samples_to_write, 3);
  EXPECT_EQ(plan.shards[0].tokens_to_write, 2 + 4 + 3);
  EXPECT_EQ(plan.shards[1].tokens_to_write, 1 + 4 + 4);
  EXPECT_EQ(plan.samples_pending, 7);
  EXPECT_EQ(plan.tokens_pending, 9 + 9 + 2);
}

TEST(PlanShards, ShardOfOnlySkippedSamplesStillExists) {
  // The shard keeps its place, so shard indices stay a function of sample indices alone.
  e3::test::TempDir dir;
  const WorkPlan plan = e3::jobs::make_plan(open_dataset(dir, OnLong::Skip, {2, 9, 9, 1}), by_count(1), 1, {});
  ASSERT_EQ(plan.shards.size(), 4u);
  EXPECT_EQ(plan.shards[1].samples_to_write, 0);
  EXPECT_EQ(plan.shards[1].tokens_to_write, 0);
  EXPECT_EQ(plan.samples_pending, 2);
}

TEST(PlanShards, OneShardWhenPerShardExceedsInput) {
  e3::test::TempDir dir;
  const WorkPlan plan = e3::jobs::make_plan(open_dataset(dir), by_count(100), 4, {});
  ASSERT_EQ(plan.shards.size(), 1u);
  EXPECT_EQ(plan.shards[0].first_sample, 0);
  EXPECT_EQ(plan.shards[0].end_sample, 7);
  EXPECT_EQ(indices(plan.pending_for(0)), std::vector<int64_t>{0});
  for (int g = 1; g < 4; ++g) EXPECT_TRUE(plan.pending_for(g).empty()) << g;
}

TEST(PlanShards, EmptyInputPlansNothing) {
  // Dataset::open refuses a file without samples; an empty dataset still plans nothing.
  const WorkPlan plan = e3::jobs::make_plan(Dataset(), by_count(2), 2, {});
  EXPECT_TRUE(plan.shards.empty());
  EXPECT_EQ(plan.samples_pending, 0);
  EXPECT_TRUE(plan.pending_for(0).empty());
}

TEST(PlanDp, ShardsBalanceTokens) {
  e3::test::TempDir dir;
  const WorkPlan plan = e3::jobs::make_plan(open_dataset(dir), by_count(2), 3, {});
  ASSERT_EQ(plan.shards.size(), 4u);
  const int groups[] = {0, 1, 2, 0};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(plan.shards[i].dp_group, groups[i]) << i;
  EXPECT_EQ(indices(plan.pending_for(0)), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(indices(plan.pending_for(1)), std::vector<int64_t>{1});
  EXPECT_EQ(indices(plan.pending_for(2)), std::vector<int64_t>{2});
  EXPECT_TRUE(plan.pending_for(3).empty());
}

TEST(PlanDp, SingleGroupGetsEveryShard) {
  e3::test::TempDir dir;
  const WorkPlan plan = e3::jobs::make_plan(open_dataset(dir), by_count(2), 1, {});
  EXPECT_EQ(indices(plan.pending_for(0)), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(PlanResume, CommittedShardsAreExcluded) {
  e3::test::TempDir dir;
  const Dataset data = open_dataset(dir);
  const WorkPlan fresh = e3::jobs::make_plan(data, by_count(3), 2, {});
  const WorkPlan plan = e3::jobs::make_plan(data, by_count(3), 2, {0});
  // Same shards as a fresh plan; the pending ones are balanced again (5 and 2 tokens).
  ASSERT_EQ(plan.shards.size(), fresh.shards.size());
  for (size_t i = 0; i < plan.shards.size(); ++i) {
    EXPECT_EQ(plan.shards[i].first_sample, fresh.shards[i].first_sample);
    EXPECT_EQ(plan.shards[i].end_sample, fresh.shards[i].end_sample);
    EXPECT_EQ(plan.shards[i].committed, i == 0);
  }
  EXPECT_EQ(indices(fresh.pending_for(0)), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(indices(plan.pending_for(0)), std::vector<int64_t>{1});
  EXPECT_EQ(indices(plan.pending_for(1)), std::vector<int64_t>{2});
  EXPECT_EQ(plan.samples_committed, 2);
  EXPECT_EQ(plan.samples_pending, 3);
  EXPECT_EQ(plan.tokens_pending, 5 + 2);
}

TEST(PlanDp, HeavyShardsSpreadByTokensNotCount) {
  // Shards of 9, 1, 1, 1 tokens over 2 groups: token balance gives {0} and {1, 2, 3}.
  e3::test::TempDir dir;
  const WorkPlan plan = e3::jobs::make_plan(open_dataset(dir, OnLong::Skip, {4, 4, 1, 1, 1}), by_count(2), 2, {});
  ASSERT_EQ(plan.shards.size(), 3u);
  EXPECT_EQ(indices(plan.pending_for(0)), std::vector<int64_t>{0});
  EXPECT_EQ(indices(plan.pending_for(1)), (std::vector<int64_t>{1, 2}));
}

TEST(PlanParts, PartsTakeDisjointShardsCoveringAll) {
  e3::test::TempDir dir;
  const Dataset data = open_dataset(dir);
  std::set<int64_t> seen;
  for (int i = 0; i < 3; ++i) {
    const WorkPlan plan = e3::jobs::make_plan(data, by_count(1), 2, {}, {i, 3});
    for (const ShardPlan& s : plan.shards) {
      EXPECT_EQ(s.index % 3, i);
      EXPECT_TRUE(seen.insert(s.index).second) << "shard " << s.index << " in two parts";
    }
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(PlanSteps, StepsPerGroupFollowTheBudget) {
  e3::test::TempDir dir;
  const Dataset data = open_dataset(dir);  // kept tokens 2, 3, 1, 4, 2
  const WorkPlan plan = e3::jobs::make_plan(data, by_count(100), 1, {});
  EXPECT_EQ(e3::jobs::steps_per_group(plan, data, 1, 4), (std::vector<int64_t>{4}));  // [2] [3,1] [4] [2]
  EXPECT_EQ(e3::jobs::steps_per_group(plan, data, 1, 100), (std::vector<int64_t>{1}));
}

TEST(PlanResume, EverythingCommittedLeavesNoWork) {
  e3::test::TempDir dir;
  const WorkPlan plan = e3::jobs::make_plan(open_dataset(dir), by_count(3), 2, {0, 1, 2});
  EXPECT_TRUE(plan.pending_for(0).empty());
  EXPECT_TRUE(plan.pending_for(1).empty());
  EXPECT_EQ(plan.samples_pending, 0);
  EXPECT_EQ(plan.tokens_pending, 0);
  EXPECT_EQ(plan.samples_committed, 5);
}

TEST(PlanResume, UnknownCommittedIndicesAreIgnored) {
  e3::test::TempDir dir;
  const WorkPlan plan = e3::jobs::make_plan(open_dataset(dir), by_count(3), 1, {7, 42});
  for (const ShardPlan& s : plan.shards) EXPECT_FALSE(s.committed) << s.index;
  EXPECT_EQ(plan.samples_pending, 5);
}

TEST(PlanErrors, RejectsNonPositiveParameters) {
  e3::test::TempDir dir;
  const Dataset data = open_dataset(dir);
  for (auto [per_shard, dp] : {std::pair<int64_t, int>{0, 1}, {3, 0}, {-1, 2}}) {
    try {
      e3::jobs::make_plan(data, by_count(per_shard), dp, {});
      ADD_FAILURE() << per_shard << " per shard, dp " << dp << ": expected an error";
    } catch (const e3::Error& e) {
      EXPECT_EQ(e.kind(), e3::ErrorKind::Internal);
    }
  }
}

// ---------------------------------------------------------------- --shard-size

TEST(PlanShardSize, BytesPerTokenCountEveryStoredState) {
  using e3::DType;
  EXPECT_EQ(e3::jobs::state_bytes_per_token(3, 1, 4096, DType::BF16), 4 * 4096 * 2);
  EXPECT_EQ(e3::jobs::state_bytes_per_token(3, 0, 4096, DType::BF16), 3 * 4096 * 2);
  EXPECT_EQ(e3::jobs::state_bytes_per_token(3, 1, 4096, DType::F32), 4 * 4096 * 4);
  EXPECT_EQ(e3::jobs::state_bytes_per_token(1, 1, 7168, DType::F16), 2 * 7168 * 2);
  EXPECT_EQ(e3::jobs::state_bytes_per_token(3, 2, 4096, DType::BF16), 5 * 4096 * 2);  // --final both
}

TEST(PlanShardSize, ShardsStayWithinTheEstimatedBytes) {
  // Kept tokens 2, -, 3, 1, 4, -, 2 (samples 1 and 5 skipped). The cap fits one file with two
  // samples of 4 tokens in all: {0, 1}, {2, 3}, {4, 5}, {6}. Skipped samples weigh nothing.
  e3::test::TempDir dir;
  const Dataset data = open_dataset(dir);
  const uint64_t cap = e3::jobs::estimate_output_bytes(4, 2, 1, 995);
  EXPECT_EQ(e3::jobs::shard_ranges(data, by_bytes(cap)), (Ranges{{0, 2}, {2, 4}, {4, 6}, {6, 7}}));
  // Every shard's estimate is within the cap.
  const WorkPlan plan = e3::jobs::make_plan(data, by_bytes(cap), 1, {});
  for (const ShardPlan& s : plan.shards)
    EXPECT_LE(e3::jobs::estimate_output_bytes(s.tokens_to_write, s.samples_to_write, 1, 995), cap) << s.index;
  // A byte more does not change the cut; the samples-per-shard bound still applies on top.
  EXPECT_EQ(e3::jobs::shard_ranges(data, by_bytes(cap + 1)), (Ranges{{0, 2}, {2, 4}, {4, 6}, {6, 7}}));
  ShardLimits both = by_bytes(UINT64_MAX);
  both.max_samples = 3;
  EXPECT_EQ(e3::jobs::shard_ranges(data, both), (Ranges{{0, 3}, {3, 6}, {6, 7}}));
}

TEST(PlanShardSize, ASampleOverTheCapGetsAShardOfItsOwn) {
  // Even a 1-byte cap makes progress: one stored sample per shard, skipped ones riding along.
  e3::test::TempDir dir;
  EXPECT_EQ(e3::jobs::shard_ranges(open_dataset(dir), by_bytes(1)), (Ranges{{0, 2}, {2, 3}, {3, 4}, {4, 6}, {6, 7}}));
}

TEST(PlanShardSize, SkippedSamplesBeforeABigOneShareItsShard) {
  // Samples 0 and 1 are skipped; the cap holds 3 tokens. Sample 2 (4 tokens) is over it but
  // does not leave 0 and 1 in a shard of nothing.
  e3::test::TempDir dir;
  const Dataset data = open_dataset(dir, OnLong::Skip, {9, 9, 4, 1});
  const uint64_t cap = e3::jobs::estimate_output_bytes(3, 1, 1, 995);
  EXPECT_EQ(e3::jobs::shard_ranges(data, by_bytes(cap)), (Ranges{{0, 3}, {3, 4}}));
}

// ---------------------------------------------------------------- plan groups

TEST(PlanGroups, EveryGroupGetsAShardWhenThereAreEnoughSamples) {
  // For every input size and group count: at least min(N, G) shards, consecutive, covering the
  // input; with G DP groups each gets one; and no more shards than G needs (the samples bound
  // is out of the way here).
  e3::test::TempDir dir;
  for (int n = 1; n <= 12; ++n) {
    const Dataset data = open_dataset(dir, OnLong::Skip, std::vector<int>(static_cast<size_t>(n), 2));
    for (int g = 1; g <= 6; ++g) {
      SCOPED_TRACE(testing::Message() << n << " samples, " << g << " groups");
      ShardLimits l;
      l.plan_groups = g;
      const Ranges r = e3::jobs::shard_ranges(data, l);
      EXPECT_EQ(static_cast<int>(r.size()), std::min(n, g));
      int64_t next = 0;
      for (const auto& [first, end] : r) {
        EXPECT_EQ(first, next);
        EXPECT_GT(end, first);
        EXPECT_LE(end - first, (n + g - 1) / g);
        next = end;
      }
      EXPECT_EQ(next, n);
      const WorkPlan plan = e3::jobs::make_plan(data, l, g, {});
      for (int group = 0; group < std::min(n, g); ++group) EXPECT_FALSE(plan.pending_for(group).empty()) << group;
    }
  }
}

TEST(PlanGroups, FiveSamplesFourGroupsMakeFourShards) {
  // Capping shards at ceil(5 / 4) = 2 samples would make 3 shards and leave a group idle.
  e3::test::TempDir dir;
  ShardLimits l;
  l.plan_groups = 4;
  EXPECT_EQ(e3::jobs::shard_ranges(open_dataset(dir, OnLong::Skip, {1, 1, 1, 1, 1}), l),
            (Ranges{{0, 2}, {2, 3}, {3, 4}, {4, 5}}));
}

TEST(PlanGroups, EveryDpGroupOfEveryPartGetsWork) {
  // 2 parts of 2 DP groups: 4 plan groups over 7 samples; each part's groups both compute.
  e3::test::TempDir dir;
  const Dataset data = open_dataset(dir, OnLong::Truncate);
  ShardLimits l;
  l.plan_groups = 4;
  for (int part = 0; part < 2; ++part) {
    const WorkPlan plan = e3::jobs::make_plan(data, l, 2, {}, {part, 2});
    EXPECT_FALSE(plan.pending_for(0).empty()) << part;
    EXPECT_FALSE(plan.pending_for(1).empty()) << part;
  }
}

TEST(PlanGroups, SlicesAndBytesCutTogether) {
  // Kept tokens 2, -, 3, 1, 4, -, 2 and a cap of 5 tokens in 2 samples: bytes alone cut
  // {0..2} {3..5} {6}; two slices, {0..3} and {4..6}, also cut at 4.
  e3::test::TempDir dir;
  ShardLimits l = by_bytes(e3::jobs::estimate_output_bytes(5, 2, 1, 995));
  EXPECT_EQ(e3::jobs::shard_ranges(open_dataset(dir), l), (Ranges{{0, 3}, {3, 6}, {6, 7}}));
  l.plan_groups = 2;
  EXPECT_EQ(e3::jobs::shard_ranges(open_dataset(dir), l), (Ranges{{0, 3}, {3, 4}, {4, 6}, {6, 7}}));
  l.max_bytes = UINT64_MAX;
  EXPECT_EQ(e3::jobs::shard_ranges(open_dataset(dir), l), (Ranges{{0, 4}, {4, 7}}));
}

TEST(PlanGroups, RecordedGroupsComeFromThisPartsManifestFirst) {
  e3::test::TempDir dir;
  EXPECT_FALSE(e3::jobs::recorded_plan_groups(dir.path(), {1, 3}).has_value());
  e3::io::Manifest other;
  other.part = {0, 3};
  other.fingerprint.plan_groups = 6;
  e3::io::write_manifest(dir.path(), other);
  EXPECT_EQ(e3::jobs::recorded_plan_groups(dir.path(), {1, 3}), 6);  // another part's, as none of its own
  e3::io::Manifest mine;
  mine.part = {1, 3};
  mine.fingerprint.plan_groups = 9;
  e3::io::write_manifest(dir.path(), mine);
  EXPECT_EQ(e3::jobs::recorded_plan_groups(dir.path(), {1, 3}), 9);
  EXPECT_EQ(e3::jobs::recorded_plan_groups(dir.path(), {2, 3}), 6);
}

TEST(PlanGroups, APartThatPlannedForOtherGroupsMeanwhileIsRefused) {
  // Parts 0/2 (4 groups) and 1/2 (2 groups) started together into an empty directory; part 0
  // wrote its manifest first: part 1 must not write shards cut for 2 groups.
  e3::test::TempDir dir;
  e3::io::Manifest first;
  first.part = {0, 2};
  first.fingerprint.plan_groups = 4;
  e3::io::write_manifest(dir.path(), first);
  EXPECT_NO_THROW(e3::jobs::check_plan_groups_unchanged(dir.path(), {1, 2}, 4));
  EXPECT_NO_THROW(e3::jobs::check_plan_groups_unchanged(dir.path(), {0, 2}, 2));  // its own manifest is not "another"
  const auto err = e3::test::error_of([&] { e3::jobs::check_plan_groups_unchanged(dir.path(), {1, 2}, 2); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), e3::ErrorKind::Output);
  EXPECT_TRUE(e3::test::Contains(err->what(), "manifest.part-0000-of-0002.json appeared while this job started"));
  EXPECT_TRUE(e3::test::Contains(err->what(), "plan groups (DP groups x parts of the first run): 4 (in the directory) "
                                              "vs 2 (this run)"));
}

TEST(PlanGroups, ManifestWithoutPlanGroupsRecordsNone) {
  e3::test::TempDir dir;
  e3::io::write_manifest(dir.path(), e3::io::Manifest{});
  EXPECT_FALSE(e3::jobs::recorded_plan_groups(dir.path(), {}).has_value());
}

}  // namespace
