#include "jobs/plan.h"

#include <algorithm>

#include "kernels/error.h"

namespace e3::jobs {

std::vector<const ShardPlan*> WorkPlan::pending_for(int dp_group) const {
  std::vector<const ShardPlan*> out;
  for (const ShardPlan& s : shards)
    if (s.dp_group == dp_group && !s.committed) out.push_back(&s);
  return out;
}

WorkPlan make_plan(const io::Dataset& data, int64_t samples_per_shard, int dp_size, const std::set<int64_t>& committed,
                   const io::Part& part) {
  E3_REQUIRE(samples_per_shard > 0 && dp_size > 0 && part.count > 0 && part.index >= 0 && part.index < part.count,
             ErrorKind::Internal, "bad plan parameters");
  WorkPlan plan;
  const auto& samples = data.samples();
  const auto n = static_cast<int64_t>(samples.size());
  std::vector<int64_t> load(static_cast<size_t>(dp_size), 0);
  for (int64_t first = 0, index = 0; first < n; first += samples_per_shard, ++index) {
    if (!part.owns(index)) continue;
    ShardPlan s;
    s.index = index;
    s.first_sample = first;
    s.end_sample = std::min(n, first + samples_per_shard);
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
      s.dp_group = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[static_cast<size_t>(s.dp_group)] += s.tokens_to_write;
    }
    plan.shards.push_back(s);
  }
  return plan;
}

std::vector<int64_t> steps_per_group(const WorkPlan& plan, const io::Dataset& data, int dp_size, int64_t budget) {
  std::vector<int64_t> steps(static_cast<size_t>(dp_size), 0);
  for (int g = 0; g < dp_size; ++g) {
    int64_t tokens = 0;  // tokens of the step being filled, as the extraction loop fills it
    for (const ShardPlan* s : plan.pending_for(g))
      for (int64_t i = s->first_sample; i < s->end_sample; ++i) {
        const io::SampleRecord& r = data.samples()[static_cast<size_t>(i)];
        if (r.skipped) continue;
        if (tokens > 0 && tokens + r.num_tokens > budget) {
          ++steps[static_cast<size_t>(g)];
          tokens = 0;
        }
        tokens += r.num_tokens;
      }
    if (tokens > 0) ++steps[static_cast<size_t>(g)];
  }
  return steps;
}

}  // namespace e3::jobs
