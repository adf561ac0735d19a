#include "jobs/plan.h"

#include <algorithm>

#include "jobs/output_dir.h"
#include "core/error.h"
#include "core/storage_codec.h"

namespace e3::jobs {

std::vector<const ShardPlan*> WorkPlan::pending_for(int dp_group) const {
  std::vector<const ShardPlan*> out;
  for (const ShardPlan& s : shards)
    if (s.dp_group == dp_group && !s.committed) out.push_back(&s);
  return out;
}

int64_t state_bytes_per_token(size_t capture_ids, size_t final_states, int64_t hidden_size, DType dtype) {
  return static_cast<int64_t>(capture_ids + final_states) *
         static_cast<int64_t>(storage_codec(dtype).row_bytes(hidden_size));
}

std::vector<std::pair<int64_t, int64_t>> shard_ranges(const io::Dataset& data, const ShardLimits& limits) {
  E3_REQUIRE(limits.max_samples > 0 && limits.max_bytes > 0 && limits.plan_groups > 0 &&
                 limits.state_bytes_per_token >= 0,
             ErrorKind::Internal, "bad shard limits");
  const auto& samples = data.samples();
  const auto n = static_cast<int64_t>(samples.size());
  // Sample i is in slice i * plan_groups / n: every slice is non-empty when n >= plan_groups
  // (their sizes differ by at most one), and every sample has a slice of its own otherwise.
  auto slice_of = [&](int64_t i) {
    return static_cast<int64_t>(static_cast<__int128>(i) * limits.plan_groups / n);
  };
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t first = 0, stored = 0, tokens = 0;  // the shard being filled
  for (int64_t i = 0; i < n; ++i) {
    const io::SampleRecord& r = samples[static_cast<size_t>(i)];
    bool cut = i > first && (slice_of(i) != slice_of(first) || i - first >= limits.max_samples);
    if (!cut && !r.skipped && stored > 0)
      cut = estimate_output_bytes(tokens + r.num_tokens, stored + 1, 1, limits.state_bytes_per_token) >
            limits.max_bytes;
    if (cut) {
      ranges.emplace_back(first, i);
      first = i;
      stored = tokens = 0;
    }
    if (!r.skipped) {
      ++stored;
      tokens += r.num_tokens;
    }
  }
  if (n > first) ranges.emplace_back(first, n);
  return ranges;
}

WorkPlan make_plan(const io::Dataset& data, const ShardLimits& limits, int dp_size, const std::set<int64_t>& committed,
                   const io::Part& part) {
  E3_REQUIRE(dp_size > 0 && part.count > 0 && part.index >= 0 && part.index < part.count, ErrorKind::Internal,
             "bad plan parameters");
  const auto ranges = shard_ranges(data, limits);
  WorkPlan plan;
  const auto& samples = data.samples();
  std::vector<int64_t> load(static_cast<size_t>(dp_size), 0);
  for (int64_t index = 0; index < static_cast<int64_t>(ranges.size()); ++index) {
    if (!part.owns(index)) continue;
    ShardPlan s;
    s.index = index;
    s.first_sample = ranges[static_cast<size_t>(index)].first;
    s.end_sample = ranges[static_cast<size_t>(index)].second;
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

StepPacker::StepPacker(const std::vector<io::SampleRecord>& samples, std::vector<const ShardPlan*> shards,
                       int64_t budget)
    : samples_(samples),
      shards_(std::move(shards)),
      budget_(budget),
      sample_pos_(shards_.empty() ? 0 : shards_[0]->first_sample) {}

std::vector<StepPacker::Item> StepPacker::next() {
  std::vector<Item> step;
  int64_t tokens = 0;
  while (shard_pos_ < shards_.size()) {
    const ShardPlan* s = shards_[shard_pos_];
    if (sample_pos_ >= s->end_sample) {
      if (++shard_pos_ < shards_.size()) sample_pos_ = shards_[shard_pos_]->first_sample;
      continue;
    }
    const io::SampleRecord& r = samples_[static_cast<size_t>(sample_pos_)];
    if (r.skipped) {
      ++sample_pos_;
      continue;
    }
    if (tokens > 0 && tokens + r.num_tokens > budget_) break;
    step.push_back({&r, s});
    tokens += r.num_tokens;
    ++sample_pos_;
  }
  return step;
}

std::vector<int64_t> steps_per_group(const WorkPlan& plan, const io::Dataset& data, int dp_size, int64_t budget) {
  std::vector<int64_t> steps(static_cast<size_t>(dp_size), 0);
  for (int g = 0; g < dp_size; ++g) {
    StepPacker packer(data.samples(), plan.pending_for(g), budget);
    while (!packer.next().empty()) ++steps[static_cast<size_t>(g)];
  }
  return steps;
}

std::optional<int64_t> recorded_plan_groups(const std::filesystem::path& out, const io::Part& part) {
  std::vector<std::filesystem::path> paths = io::list_manifests(out);
  // This part's own manifest first: it is the one a resume must match.
  std::stable_partition(paths.begin(), paths.end(),
                        [&](const auto& p) { return p.filename() == io::manifest_name(part); });
  for (const auto& path : paths) {
    const io::Manifest m = io::read_manifest_file(path);
    if (m.fingerprint.plan_groups > 0) return m.fingerprint.plan_groups;
  }
  return std::nullopt;
}

void check_plan_groups_unchanged(const std::filesystem::path& out, const io::Part& part, int64_t plan_groups) {
  for (const auto& path : io::list_manifests(out)) {
    if (path.filename() == io::manifest_name(part)) continue;
    const int64_t recorded = io::read_manifest_file(path).fingerprint.plan_groups;
    E3_REQUIRE(recorded == plan_groups, ErrorKind::Output,
               "refusing to write into {}: {} appeared while this job started and cuts the shards for other plan "
               "groups (plan groups (DP groups x parts of the first run): {} (in the directory) vs {} (this run)); "
               "rerun this job: it keeps the recorded plan",
               out.string(), path.string(), recorded, plan_groups);
  }
}

}  // namespace e3::jobs
