#include "jobs/verify_command.h"

#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "io/verify.h"
#include "parallel/agreement.h"

namespace e3::jobs {

int run_verify(const VerifyCommandOptions& o, const parallel::MpiEnv& mpi) {
  io::VerifyOptions options;
  options.rank = mpi.world_rank();
  options.ranks = mpi.world_size();
  options.collect_problems = true;
  // The ranks on a node share its cores.
  options.threads = o.threads > 0 ? o.threads
                                  : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                                    parallel::ranks_on_node(mpi.world()));
  options.progress = [&](const io::VerifyProgress& p) {
    if (p.finished) return;  // the summary line below says it
    const double mb_s = p.seconds > 0 ? p.bytes_done / 1e6 / p.seconds : 0;
    const double eta = mb_s > 0 ? (p.bytes_total - p.bytes_done) / 1e6 / mb_s : 0;
    spdlog::info("verify: {} of {} shards, {:.2f} of {:.2f} GB read, {:.0f} MB/s, ETA {:.0f} s", p.shards_done,
                 p.shards_total, p.bytes_done / 1e9, p.bytes_total / 1e9, mb_s, eta);
  };
  // Problems inside this rank's shard files go to rank 0; a problem of the manifests (or an
  // incomplete run) is found alike by every rank, so rank 0 reports its own.
  std::vector<Error> found;
  std::optional<Error> global;
  io::VerifyReport r;
  try {
    r = io::verify_output(o.dir, options);
    found = std::move(r.problems);
    if (!o.allow_incomplete) io::require_complete(r, o.dir);
  } catch (const Error& e) {
    global = e;
  } catch (const std::exception& e) {
    found.emplace_back(ErrorKind::Internal, e.what(), __FILE__, __LINE__);
  }
  // One "code<TAB>message" line per problem.
  std::string lines;
  for (Error& e : found) {
    e.set_rank(mpi.world_rank());
    std::string text = e.describe();
    std::replace(text.begin(), text.end(), '\n', ' ');
    lines += fmt::format("{}\t{}\n", exit_code(e.kind()), text);
  }
  const std::vector<std::string> by_rank = parallel::gather_to_root(mpi.world(), lines);
  const std::vector<double> totals =
      parallel::sum_to_root(mpi.world(), {static_cast<double>(r.bytes_read), static_cast<double>(r.shards_read)});
  const double seconds = parallel::max_to_root(mpi.world(), r.seconds);
  const int size = mpi.world_size();
  int code = 0;
  if (mpi.world_rank() == 0) {
    for (const std::string& all : by_rank)
      for (size_t at = 0; at < all.size();) {
        const size_t tab = all.find('\t', at), end = all.find('\n', at);
        if (code == 0) code = std::stoi(all.substr(at, tab - at));
        spdlog::critical("{}", all.substr(tab + 1, end - tab - 1));
        at = end + 1;
      }
    if (global) {
      global->set_rank(0);
      spdlog::critical("{}", global->describe());
      if (code == 0) code = exit_code(global->kind());
    }
    if (code == 0) {
      const std::string parts =
          r.part_count == 1 ? "" : fmt::format(", {} of {} parts present", r.parts, r.part_count);
      const std::string unlisted =
          r.unlisted == 0 ? ""
                          : fmt::format(", {} of them committed after the last manifest update (a rerun lists them)",
                                        r.unlisted);
      spdlog::info("verify {}: ok: {} shards{}, {} samples, {} tokens, {} skipped, {} of {} input samples accounted "
                   "for{}{}",
                   o.dir.string(), r.shards, unlisted, r.samples, r.tokens, r.skipped, r.samples + r.skipped,
                   r.num_samples, parts, r.complete ? "" : " (run not complete)");
      if (!r.slots.empty()) {
        spdlog::info("verify {}: model {} ({}, {} layers, hidden {}); the stored states are:", o.dir.string(),
                     r.model_path, r.model_type, r.num_hidden_layers, r.hidden_size);
        for (const std::string& slot : r.slots) spdlog::info("  {}", slot);
      }
      spdlog::info("verify {}: read {:.2f} GB of {} shard files in {:.1f} s: {:.0f} MB/s ({} rank{} x {} threads)",
                   o.dir.string(), totals[0] / 1e9, static_cast<int64_t>(totals[1]), seconds,
                   seconds > 0 ? totals[0] / 1e6 / seconds : 0.0, size, size == 1 ? "" : "s", options.threads);
    }
    spdlog::default_logger()->flush();
  }
  return parallel::broadcast_from_root(mpi.world(), code);
}

}  // namespace e3::jobs
