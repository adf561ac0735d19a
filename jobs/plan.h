// The work plan: samples -> shards -> DP groups, deterministic so that a rerun plans the
// same shards and can skip the committed ones.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "io/dataset.h"

namespace e3::jobs {

struct ShardPlan {
  int64_t index = 0;         // shard-<index>.h5
  int64_t first_sample = 0;  // samples [first_sample, end_sample) of the input
  int64_t end_sample = 0;
  int dp_group = 0;
  bool committed = false;    // already in the output directory
  int64_t samples_to_write = 0;  // not skipped
  int64_t tokens_to_write = 0;
};

struct WorkPlan {
  std::vector<ShardPlan> shards;
  int64_t samples_pending = 0;
  int64_t tokens_pending = 0;
  int64_t samples_committed = 0;

  // The shards of one DP group that still need work, in order.
  std::vector<const ShardPlan*> pending_for(int dp_group) const;
};

// Shard s holds samples [s * per_shard, (s + 1) * per_shard). Shards go to DP groups
// round-robin by index.
WorkPlan make_plan(const io::Dataset& data, int64_t samples_per_shard, int dp_size, const std::set<int64_t>& committed);

}  // namespace e3::jobs
