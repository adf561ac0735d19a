// The last phase of an extraction: every group's commits in the final manifest, the summary
// line, and the verdict of --max-skipped-fraction.
#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "jobs/extract_phases.h"
#include "jobs/signals.h"
#include "core/error.h"
#include "parallel/agreement.h"

namespace e3::jobs {
namespace {

// Writers send the shards they committed in this run to the leader, as the manifest lists them.
std::vector<io::CommittedShard> gather_commits(const parallel::Grid& grid,
                                               const std::vector<io::CommittedShard>& mine) {
  const std::vector<std::string> texts =
      parallel::gather_to_root(grid.writers_comm(), io::shards_to_json(mine).dump());
  std::vector<io::CommittedShard> out;
  for (const std::string& text : texts)
    for (auto& s : io::shards_from_json(nlohmann::json::parse(text), "gathered shard list")) out.push_back(std::move(s));
  return out;
}

}  // namespace

// Samples over --max-seq-len do not count: they follow the user's own limit and are listed at
// the start; non-finite ones are the model's failure, and a run of mostly those is no training data.
std::string too_many_skipped_message(const RunConfig& rc, const WorkPlan& plan, int64_t nonfinite) {
  int64_t part_samples = 0;
  for (const ShardPlan& s : plan.shards) part_samples += s.end_sample - s.first_sample;
  if (static_cast<double>(nonfinite) <= rc.max_skipped_fraction * static_cast<double>(part_samples)) return {};
  return fmt::format(
      "{} of the {} samples{} ({:.1f}%) were left out (--on-nonfinite skip), more than --max-skipped-fraction {} "
      "allows: the output in {} is not usable training data as it is. The warnings above and the manifest's "
      "shards[].skipped name each sample; check the checkpoint, --dtype and the input, or rerun the same command "
      "with a larger --max-skipped-fraction to accept these samples left out",
      nonfinite, part_samples, rc.part.count > 1 ? " of this part" : "",
      100.0 * static_cast<double>(nonfinite) / static_cast<double>(std::max<int64_t>(part_samples, 1)),
      rc.max_skipped_fraction, rc.out_dir.string());
}

int finish_extract(const RunConfig& rc, const parallel::Grid& grid, const OutputPlan& out,
                   const StepOutcome& outcome, std::chrono::steady_clock::time_point started) {
  const auto gathered =
      grid.is_writer() ? gather_commits(grid, outcome.committed) : std::vector<io::CommittedShard>{};
  int64_t too_many_skipped = 0;  // the leader's verdict on --max-skipped-fraction, shared below
  std::string skipped_message;
  if (grid.is_leader()) {
    io::Manifest manifest = out.manifest;
    std::map<int64_t, io::CommittedShard> all;
    for (const auto& s : out.earlier.committed) all[s.shard_index] = s;
    for (const auto& s : gathered) all[s.shard_index] = s;
    manifest.shards.clear();
    for (auto& [idx, s] : all) manifest.shards.push_back(s);
    manifest.complete = static_cast<int64_t>(all.size()) == manifest.num_shards;
    io::write_manifest(rc.out_dir, manifest);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    int64_t computed = 0, nonfinite_now = 0, nonfinite_before = 0;
    for (const auto& s : gathered) {
      computed += static_cast<int64_t>(s.samples.size());
      nonfinite_now += static_cast<int64_t>(s.skipped.size());
    }
    for (const auto& s : out.earlier.committed) nonfinite_before += static_cast<int64_t>(s.skipped.size());
    const int64_t too_long = static_cast<int64_t>(manifest.skipped.size());
    spdlog::info("done: {} samples computed now, {} done before, {} skipped ({} over --max-seq-len, {} with non-finite "
                 "states); {} shards in {} ({}); {:.1f} s",
                 computed, out.plan.samples_committed - nonfinite_before,
                 too_long + nonfinite_now + nonfinite_before, too_long, nonfinite_now + nonfinite_before,
                 manifest.shards.size(), rc.out_dir.string(),
                 manifest.complete ? (rc.part.count > 1 ? "this part complete" : "complete") : "INCOMPLETE", secs);
    // Last, so that it is the line a user reads, whatever code the launcher returns.
    if (outcome.stopped_by) {
      // The "stopped:" progress line counts every sample computed; those of shards left
      // unfinished were not written, and the "done:" line does not count them.
      const int64_t unfinished = std::max<int64_t>(0, outcome.samples_computed - computed - nonfinite_now);
      const std::string lost =
          unfinished == 0 ? std::string()
                          : fmt::format(" The {} sample{} computed for shards not yet complete {} not kept: the rerun "
                                        "computes {} again.",
                                        unfinished, unfinished == 1 ? "" : "s", unfinished == 1 ? "was" : "were",
                                        unfinished == 1 ? "it" : "them");
      spdlog::warn("stopped by signal {} after the current step ({}); what was complete is committed.{} The run is "
                   "resumable: rerun the same command to continue (exit code {}; an mpirun that was signalled "
                   "itself returns 1)",
                   outcome.stopped_by, stop_signal_name(outcome.stopped_by), lost, exit_code(ErrorKind::Resumable));
    }
    else
      skipped_message = too_many_skipped_message(rc, out.plan, nonfinite_now + nonfinite_before);
    too_many_skipped = skipped_message.empty() ? 0 : 1;
  }
  if (parallel::broadcast_indices(grid, {too_many_skipped}).at(0)) {
    if (!grid.is_leader()) throw parallel::PeerFailed{0, exit_code(ErrorKind::NonFinite)};
    Error e(ErrorKind::NonFinite, skipped_message, __FILE__, __LINE__);
    e.set_agreed();
    throw e;
  }
  return outcome.stopped_by ? exit_code(ErrorKind::Resumable) : 0;
}

}  // namespace e3::jobs
