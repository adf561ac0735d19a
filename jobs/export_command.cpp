#include "jobs/export_command.h"

#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "parallel/agreement.h"

namespace e3::jobs {

int run_export(ExportOptions o, const parallel::MpiEnv& mpi) {
  o.rank = mpi.world_rank();
  o.ranks = mpi.world_size();
  // The ranks on a node share its cores.
  if (o.threads == 0)
    o.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / parallel::ranks_on_node(mpi.world()));
  const std::string_view format = name_of(o.format);
  int start = 0;
  std::optional<DirLock> lock;  // rank 0's, to the end of the export
  parallel::agreed_phase(mpi.world(), [&] {
    if (o.rank == 0) start = static_cast<int>(prepare_export(o, &lock));
  });
  start = parallel::broadcast_from_root(mpi.world(), start);
  if (start != static_cast<int>(ExportStart::Export)) {
    if (o.rank == 0)
      spdlog::info("export: {} already holds the {} export of {}: {}", o.dest.string(), format, o.src.string(),
                   start == static_cast<int>(ExportStart::VocabRewritten)
                       ? "only its draft vocabulary was rewritten, for the size asked"
                       : "nothing to do");
    return 0;
  }
  if (o.rank == 0)
    spdlog::info("export: {} -> {} ({}){}, {} rank{} x {} threads", o.src.string(), o.dest.string(), format,
                 o.skip_verify ? "" : ", verifying each shard first", o.ranks, o.ranks == 1 ? "" : "s", o.threads);
  ExportReport r;
  const auto progress = [&](const ExportProgress& p) {
    const double mb_s = p.seconds > 0 ? p.bytes_written / 1e6 / p.seconds : 0;
    const double eta =
        p.shards_done > 0 ? p.seconds * static_cast<double>(p.shards_total - p.shards_done) / p.shards_done : 0;
    spdlog::info("export: {} of {} shards, {} samples, {:.2f} GB written, {:.0f} MB/s, ETA {:.0f} s", p.shards_done,
                 p.shards_total, p.samples_done, p.bytes_written / 1e9, mb_s, eta);
  };
  parallel::agreed_phase(mpi.world(), [&] { r = export_shards(o, progress); });
  const std::vector<double> totals =
      parallel::sum_to_root(mpi.world(), {static_cast<double>(r.samples), static_cast<double>(r.bytes_written),
                                          static_cast<double>(r.bytes_read), static_cast<double>(r.shards_resumed)});
  const double seconds = parallel::max_to_root(mpi.world(), r.seconds);
  const ExportStages& st = r.stages;
  const std::vector<double> stage_sums = parallel::sum_to_root(
      mpi.world(), {st.read, st.checksum, st.metadata, st.values, st.queued, st.convert, st.write, st.sync,
                    static_cast<double>(r.threads), static_cast<double>(r.writers)});
  parallel::agreed_phase(mpi.world(), [&] {
    if (o.rank == 0) finish_export(o);
  });
  if (o.rank == 0)
    spdlog::info("export {} -> {} ({}): ok: {:.0f} samples in {:.0f} files{}, {:.2f} GB written in {:.1f} s "
                 "({:.0f} MB/s), {:.2f} GB read",
                 o.src.string(), o.dest.string(), format, totals[0], totals[0],
                 totals[3] > 0 ? fmt::format(" ({:.0f} shards done by an earlier run)", totals[3]) : "",
                 totals[1] / 1e9, seconds, seconds > 0 ? totals[1] / 1e6 / seconds : 0.0, totals[2] / 1e9);
  if (o.rank == 0) {
    // Where the time went (issue 21): each stage's seconds summed over every rank's threads.
    const ExportStages sum{stage_sums[0], stage_sums[1], stage_sums[2], stage_sums[3],
                           stage_sums[4], stage_sums[5], stage_sums[6], stage_sums[7]};
    spdlog::info("export: {:.2f} GB read, {:.2f} GB written in {:.1f} s: {}", totals[2] / 1e9, totals[1] / 1e9, seconds,
                 stages_text(sum, static_cast<int>(stage_sums[8]), static_cast<int>(stage_sums[9])));
  }
  return 0;
}

}  // namespace e3::jobs
