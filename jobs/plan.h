// The work plan: samples -> shards -> DP groups, deterministic so that a rerun plans the
// same shards and can skip the committed ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "io/dataset.h"
#include "io/manifest.h"
#include "core/dtype.h"

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

// What bounds a shard. All of it is in the run fingerprint: it decides which samples each
// shard index holds.
struct ShardLimits {
  int64_t max_samples = 1000;        // --samples-per-shard
  uint64_t max_bytes = UINT64_MAX;   // --shard-size, estimated as the free-space check does
  int64_t state_bytes_per_token = 0;
  // DP groups x parts of the run that first planned the directory: the input is cut into this
  // many slices of near-equal sample counts, and no shard spans two, so that there are at
  // least min(samples, plan_groups) shards and every group of that run gets work.
  int64_t plan_groups = 1;
};

// Bytes one token's states take in a shard: each capture id, plus each final state stored
// (none, one, or two with --final both). The shard cap and the free-space estimate both use it.
int64_t state_bytes_per_token(size_t capture_ids, size_t final_states, int64_t hidden_size, DType dtype);

// The shards of the whole input (every part's), in order, as [first, end) sample ranges. A
// shard takes samples while its estimated bytes stay within max_bytes, its sample count
// within max_samples, and it stays in its slice; a single sample over max_bytes gets a shard
// of its own. Skipped samples weigh nothing but still belong to a shard.
std::vector<std::pair<int64_t, int64_t>> shard_ranges(const io::Dataset& data, const ShardLimits& limits);

// This part's shards of shard_ranges. Pending shards go, in index order, to the DP group with
// the fewest tokens so far (ties to the lower group): balanced by tokens, and the same on
// every rank and every rerun.
WorkPlan make_plan(const io::Dataset& data, const ShardLimits& limits, int dp_size, const std::set<int64_t>& committed,
                   const io::Part& part = {});
// The one rule that packs a DP group's samples into forward steps: whole samples, in plan
// order, skipped ones left out, each step up to `budget` tokens (one sample alone may fill a
// step). The extraction loop walks it and steps_per_group counts with it: were there two
// rules, ranks could walk different step counts and hang in a collective.
class StepPacker {
 public:
  struct Item {
    const io::SampleRecord* record;
    const ShardPlan* shard;
  };
  StepPacker(const std::vector<io::SampleRecord>& samples, std::vector<const ShardPlan*> shards, int64_t budget);
  // The samples of the next step; empty once every sample is packed.
  std::vector<Item> next();

 private:
  const std::vector<io::SampleRecord>& samples_;
  std::vector<const ShardPlan*> shards_;
  int64_t budget_;
  size_t shard_pos_ = 0;
  int64_t sample_pos_ = 0;
};

// The steps each DP group's shards take under the token budget (lockstep needs the longest).
std::vector<int64_t> steps_per_group(const WorkPlan& plan, const io::Dataset& data, int dp_size, int64_t budget);

// The plan groups recorded in --out by the run that first planned it: this part's manifest
// if there is one, else any other part's (manifest names in order). nullopt when no manifest
// records them.
std::optional<int64_t> recorded_plan_groups(const std::filesystem::path& out, const io::Part& part);
// Throws an output error when another part's manifest in --out records other plan groups:
// parts started together into an empty directory each plan for themselves, and the one that
// gets here second must not write shards cut another way. Its rerun keeps the recorded plan.
void check_plan_groups_unchanged(const std::filesystem::path& out, const io::Part& part, int64_t plan_groups);

}  // namespace e3::jobs
