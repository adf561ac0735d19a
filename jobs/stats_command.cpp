#include "jobs/stats_command.h"

#include <algorithm>
#include <iostream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "io/shard_stats.h"
#include "io/tensor_file.h"
#include "jobs/stats_report.h"
#include "parallel/agreement.h"

namespace e3::jobs {
namespace {

// What a rank sends rank 0: 'P' and its partials, or 'E', the exit code, a tab and the message.
std::string failure_message(int code, const std::string& text) { return fmt::format("E{}\t{}", code, text); }

void write_figures(const std::filesystem::path& path, const std::string& text) {
  io::TempFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

// A figure file inside DIR would be a stray file in a directory that a running job, verify or
// export owns.
void require_outside(const std::filesystem::path& file, const std::filesystem::path& dir, const char* option) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::absolute(file, ec).parent_path();
  E3_REQUIRE(!std::filesystem::equivalent(parent, dir, ec), ErrorKind::Usage,
             "stats {} {}: that is inside {}, the output directory; give a path outside it", option, file.string(),
             dir.string());
}

}  // namespace

int run_stats(const StatsCommandOptions& o, const parallel::MpiEnv& mpi) {
  io::StatsOptions options;
  options.rank = mpi.world_rank();
  options.ranks = mpi.world_size();
  // The ranks on a node share its cores (as verify's).
  options.threads = o.threads > 0 ? o.threads
                                  : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                                    parallel::ranks_on_node(mpi.world()));
  io::StatsReport r;
  std::string mine;
  try {
    require_outside(o.svg, o.dir, "--svg");
    if (!o.json.empty()) require_outside(o.json, o.dir, "--json");
    r = io::collect_stats(o.dir, options);
    mine = 'P';
    mine += io::encode_partials(r.partials);
  } catch (Error& e) {
    e.set_rank(mpi.world_rank());
    mine = failure_message(exit_code(e.kind()), e.describe());
  } catch (const std::exception& e) {
    Error internal(ErrorKind::Internal, e.what(), __FILE__, __LINE__);
    internal.set_rank(mpi.world_rank());
    mine = failure_message(exit_code(ErrorKind::Internal), internal.describe());
  }
  const std::vector<std::string> by_rank = parallel::gather_to_root(mpi.world(), mine);
  const std::vector<double> totals = parallel::sum_to_root(mpi.world(), {static_cast<double>(r.bytes_read)});
  const double seconds = parallel::max_to_root(mpi.world(), r.seconds);
  int code = 0;
  if (mpi.world_rank() == 0) {
    // A problem of the manifests is found alike by every rank: said once.
    std::set<std::string> said;
    std::vector<io::ShardStats> all;
    for (const std::string& got : by_rank) {
      if (got.front() == 'P') {
        std::vector<io::ShardStats> partials = io::decode_partials(got.substr(1));
        std::move(partials.begin(), partials.end(), std::back_inserter(all));
        continue;
      }
      const size_t tab = got.find('\t');
      const std::string text = got.substr(tab + 1);
      if (code == 0) code = std::stoi(got.substr(1, tab - 1));
      const std::string what = text.substr(text.find(": ") + 2);  // without "rank N: "
      if (said.insert(what).second) spdlog::critical("{}", text);
    }
    if (code == 0) {
      try {
        r.combine(std::move(all));
        std::cout << stats_table(r) << std::flush;
        write_figures(o.svg, stats_svg(r));
        if (!o.json.empty()) write_figures(o.json, stats_json(r));
        const int size = mpi.world_size();
        spdlog::info("stats {}: read {:.2f} GB of {} shard files in {:.1f} s: {:.0f} MB/s ({} rank{} x {} threads); "
                     "figures in {}{}",
                     o.dir.string(), totals[0] / 1e9, r.shards_listed, seconds,
                     seconds > 0 ? totals[0] / 1e6 / seconds : 0.0, size, size == 1 ? "" : "s", options.threads,
                     o.svg.string(), o.json.empty() ? "" : " and " + o.json.string());
      } catch (Error& e) {
        e.set_rank(0);
        spdlog::critical("{}", e.describe());
        code = exit_code(e.kind());
      }
    }
    spdlog::default_logger()->flush();
  }
  return parallel::broadcast_from_root(mpi.world(), code);
}

}  // namespace e3::jobs
