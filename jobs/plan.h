// The work plan: samples -> shards -> DP groups, deterministic so that a rerun plans the
// same shards and can skip the committed ones.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "io/dataset.h"
#include "io/manifest.h"

namespace e3::jobs {

struct ShardPlan {
  int64_t index = 0;         // shard-<index>.h5
  int64_t first_sample = 0;  // samples [first_sample, end_sample) of the input
  int64_t end_sample = 0;
  int dp_group = -1;         // the DP group computing it (-1 once committed)
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

// Shard s holds samples [s * per_shard, (s + 1) * per_shard); this part's shards are planned.
// Pending shards go, in index order, to the DP group with the fewest tokens so far (ties to
// the lower group): balanced by tokens, and the same on every rank and every rerun.
WorkPlan make_plan(const io::Dataset& data, int64_t samples_per_shard, int dp_size, const std::set<int64_t>& committed,
                   const io::Part& part = {});
// The steps each DP group's shards take under the token budget (lockstep needs the longest).
std::vector<int64_t> steps_per_group(const WorkPlan& plan, const io::Dataset& data, int dp_size, int64_t budget);

}  // namespace e3::jobs
