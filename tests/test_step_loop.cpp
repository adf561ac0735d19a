// The packing of samples into forward steps: the plan's step count per DP group (which every
// rank walks in lockstep) must equal the steps the extraction loop forms, or ranks hang in a
// collective; and the loop's steps hold every pending sample once, in order, within budget.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "io/dataset.h"
#include "jobs/plan.h"
#include "jobs/step_loop.h"
#include "support/test_support.h"

namespace {

using e3::io::Dataset;
using e3::jobs::ShardLimits;
using e3::jobs::StepPacker;

Dataset write_dataset(const e3::test::TempDir& dir, const std::vector<int>& lengths, int64_t max_seq_len) {
  std::string text;
  for (size_t i = 0; i < lengths.size(); ++i) {
    text += "{\"id\": \"s" + std::to_string(i) + "\", \"input_ids\": [";
    for (int t = 0; t < lengths[i]; ++t) text += (t ? ", " : "") + std::to_string((t * 7 + static_cast<int>(i)) % 50);
    text += "]}\n";
  }
  e3::test::write_text(dir / "data.jsonl", text);
  e3::io::DatasetOptions opts;
  opts.vocab_size = 100;
  opts.max_seq_len = max_seq_len;
  opts.on_long = e3::io::OnLong::Skip;
  return Dataset::open(dir / "data.jsonl", opts);
}

TEST(StepLoop, FormsAsManyStepsAsThePlanCountsForRandomInputs) {
  std::mt19937_64 rng(20261201);
  const e3::test::TempDir dir;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 40)(rng);
    const int64_t max_seq_len = std::uniform_int_distribution<int64_t>(1, 24)(rng);
    std::vector<int> lengths(static_cast<size_t>(n));
    for (int& len : lengths) len = std::uniform_int_distribution<int>(1, 30)(rng);  // some over max_seq_len: skipped
    const Dataset data = write_dataset(dir, lengths, max_seq_len);
    // The loop needs a whole sample to fit one step (--max-tokens-per-step >= --max-seq-len).
    const int64_t budget = max_seq_len + std::uniform_int_distribution<int64_t>(0, 60)(rng);
    const int dp = std::uniform_int_distribution<int>(1, 4)(rng);
    ShardLimits limits;
    limits.max_samples = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    limits.plan_groups = dp;
    std::set<int64_t> committed;
    for (int64_t s = 0; s < n; ++s)
      if (rng() % 4 == 0) committed.insert(s);
    const e3::jobs::WorkPlan plan = e3::jobs::make_plan(data, limits, dp, committed);
    const std::vector<int64_t> planned = e3::jobs::steps_per_group(plan, data, dp, budget);
    ASSERT_EQ(planned.size(), static_cast<size_t>(dp));
    for (int g = 0; g < dp; ++g) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " group " + std::to_string(g) + " budget " +
                   std::to_string(budget));
      // Every pending sample of the group, in order, as the loop must write them.
      std::vector<int64_t> want;
      for (const e3::jobs::ShardPlan* s : plan.pending_for(g))
        for (int64_t i = s->first_sample; i < s->end_sample; ++i)
          if (!data.samples()[static_cast<size_t>(i)].skipped) want.push_back(i);
      StepPacker packer(data.samples(), plan.pending_for(g), budget);
      e3::model::HostBatch batch;
      std::vector<e3::jobs::StepSample> step;
      std::vector<int64_t> got;
      int64_t steps = 0;
      while (e3::jobs::read_next_step(packer, data, batch, step)) {
        ++steps;
        EXPECT_LE(batch.num_tokens(), budget);
        int64_t offset = 0;
        for (const e3::jobs::StepSample& ss : step) {
          EXPECT_EQ(ss.offset, offset);
          EXPECT_EQ(static_cast<int64_t>(ss.ids.size()), ss.record->num_tokens);
          offset += ss.record->num_tokens;
          got.push_back(ss.record->index);
        }
        EXPECT_EQ(offset, batch.num_tokens());
        // Full: the next sample would not have fit.
        if (got.size() < want.size()) {
          EXPECT_GT(batch.num_tokens() + data.samples()[static_cast<size_t>(want[got.size()])].num_tokens, budget);
        }
      }
      EXPECT_EQ(steps, planned[static_cast<size_t>(g)]);
      EXPECT_EQ(got, want);
      EXPECT_FALSE(e3::jobs::read_next_step(packer, data, batch, step)) << "the packer restarted";
    }
  }
}

TEST(StepLoop, ASampleAsLongAsTheBudgetFillsAStepAlone) {
  const e3::test::TempDir dir;
  const Dataset data = write_dataset(dir, {4, 1, 4, 2, 2}, 4);
  ShardLimits limits;
  const e3::jobs::WorkPlan plan = e3::jobs::make_plan(data, limits, 1, {});
  StepPacker packer(data.samples(), plan.pending_for(0), 4);
  std::vector<std::vector<int64_t>> steps;
  for (auto items = packer.next(); !items.empty(); items = packer.next()) {
    steps.emplace_back();
    for (const auto& item : items) steps.back().push_back(item.record->index);
  }
  EXPECT_EQ(steps, (std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3, 4}}));
  EXPECT_EQ(e3::jobs::steps_per_group(plan, data, 1, 4), std::vector<int64_t>{4});
}

}  // namespace
