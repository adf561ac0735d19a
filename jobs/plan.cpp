#include "jobs/plan.h"

#include "kernels/error.h"

namespace e3::jobs {

std::vector<const ShardPlan*> WorkPlan::pending_for(int dp_group) const {
  std::vector<const ShardPlan*> out;
  for (const ShardPlan& s : shards)
    if (s.dp_group == dp_group && !s.committed) out.push_back(&s);
  return out;
}

WorkPlan make_plan(const io::Dataset& data, int64_t samples_per_shard, int dp_size, const std::set<int64_t>& committed) {
  E3_REQUIRE(samples_per_shard > 0 && dp_size > 0, ErrorKind::Internal, "bad plan parameters");
  WorkPlan plan;
  const auto& samples = data.samples();
  const auto n = static_cast<int64_t>(samples.size());
  for (int64_t first = 0, index = 0; first < n; first += samples_per_shard, ++index) {
    ShardPlan s;
    s.index = index;
    s.first_sample = first;
    s.end_sample = std::min(n, first + samples_per_shard);
    s.dp_group = static_cast<int>(index % dp_size);
    s.committed = committed.count(index) != 0;
    for (int64_t i = s.first_sample; i < s.end_sample; ++i) {
      const io::SampleRecord& r = samples[static_cast<size_t>(i)];
      if (r.skipped) continue;
      ++s.samples_to_write;
      s.tokens_to_write += r.num_tokens;
    }
    if (s.committed) {
      plan.samples_committed += s.samples_to_write;
    } else {
      plan.samples_pending += s.samples_to_write;
      plan.tokens_pending += s.tokens_to_write;
    }
    plan.shards.push_back(s);
  }
  return plan;
}

}  // namespace e3::jobs
