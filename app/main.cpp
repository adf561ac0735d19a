// eagle3_extract: entry point. Every failure ends here as one rank-tagged critical line,
// flushed, followed by an exit code from the README's table.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include <mpi.h>

#include <spdlog/spdlog.h>

#include "app/cli.h"
#include "io/hdf5.h"
#include "io/verify.h"
#include "jobs/backend_select.h"
#include "jobs/extract.h"
#include "jobs/info.h"
#include "jobs/logging.h"
#include "jobs/signals.h"
#include "core/error.h"
#include "parallel/agreement.h"
#include "parallel/mpi_env.h"

namespace {

using e3::Error;
using e3::ErrorKind;

// Ranks on this node, so that their verify threads share its cores.
int ranks_on_node() {
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) != MPI_SUCCESS) return 1;
  int n = 1;
  MPI_Comm_size(local, &n);
  MPI_Comm_free(&local);
  return std::max(n, 1);
}

// `verify DIR`: each rank reads its share of the shard files (index % ranks); rank 0 prints
// every problem found, one line each, and every rank exits with the same code. A failure
// is agreed on by a gather, never by MPI_Abort.
int run_verify(const e3::app::Request& req, const e3::parallel::MpiEnv& mpi) {
  e3::io::VerifyOptions options;
  options.rank = mpi.world_rank();
  options.ranks = mpi.world_size();
  options.collect_problems = true;
  options.threads = req.verify_threads > 0
                        ? req.verify_threads
                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_on_node());
  options.progress = [&](const e3::io::VerifyProgress& p) {
    if (p.finished) return;  // the summary line below says it
    const double mb_s = p.seconds > 0 ? p.bytes_done / 1e6 / p.seconds : 0;
    const double eta = mb_s > 0 ? (p.bytes_total - p.bytes_done) / 1e6 / mb_s : 0;
    spdlog::info("verify: {} of {} shards, {:.2f} of {:.2f} GB read, {:.0f} MB/s, ETA {:.0f} s", p.shards_done,
                 p.shards_total, p.bytes_done / 1e9, p.bytes_total / 1e9, mb_s, eta);
  };
  // Problems inside this rank's shard files go to rank 0; a problem of the manifests (or an
  // incomplete run) is found alike by every rank, so rank 0 reports its own.
  std::vector<e3::Error> found;
  std::optional<e3::Error> global;
  e3::io::VerifyReport r;
  try {
    r = e3::io::verify_output(req.verify_dir, options);
    found = std::move(r.problems);
    if (!req.verify_allow_incomplete) e3::io::require_complete(r, req.verify_dir);
  } catch (const Error& e) {
    global = e;
  } catch (const std::exception& e) {
    found.emplace_back(ErrorKind::Internal, e.what(), __FILE__, __LINE__);
  }
  std::string lines;
  for (e3::Error& e : found) {
    e.set_rank(mpi.world_rank());
    std::string text = e.describe();
    std::replace(text.begin(), text.end(), '\n', ' ');
    lines += fmt::format("{}\t{}\n", e3::exit_code(e.kind()), text);
  }
  const int size = mpi.world_size();
  const int length = static_cast<int>(lines.size());
  std::vector<int> lengths(size), offsets(size);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int i = 1; i < size; ++i) offsets[i] = offsets[i - 1] + lengths[i - 1];
  std::string all(mpi.world_rank() == 0 ? static_cast<size_t>(offsets[size - 1] + lengths[size - 1]) : 0, '\0');
  MPI_Gatherv(lines.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  double sums[2] = {static_cast<double>(r.bytes_read), static_cast<double>(r.shards_read)}, totals[2] = {0, 0};
  MPI_Reduce(sums, totals, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  double seconds = 0;
  MPI_Reduce(&r.seconds, &seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  int code = 0;
  if (mpi.world_rank() == 0) {
    for (size_t at = 0; at < all.size();) {
      const size_t tab = all.find('\t', at), end = all.find('\n', at);
      if (code == 0) code = std::stoi(all.substr(at, tab - at));
      spdlog::critical("{}", all.substr(tab + 1, end - tab - 1));
      at = end + 1;
    }
    if (global) {
      global->set_rank(0);
      spdlog::critical("{}", global->describe());
      if (code == 0) code = e3::exit_code(global->kind());
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
                   req.verify_dir.string(), r.shards, unlisted, r.samples, r.tokens, r.skipped, r.samples + r.skipped,
                   r.num_samples, parts, r.complete ? "" : " (run not complete)");
      if (!r.slots.empty()) {
        spdlog::info("verify {}: model {} ({}, {} layers, hidden {}); the stored states are:", req.verify_dir.string(),
                     r.model_path, r.model_type, r.num_hidden_layers, r.hidden_size);
        for (const std::string& slot : r.slots) spdlog::info("  {}", slot);
      }
      spdlog::info("verify {}: read {:.2f} GB of {} shard files in {:.1f} s: {:.0f} MB/s ({} rank{} x {} threads)",
                   req.verify_dir.string(), totals[0] / 1e9, static_cast<int64_t>(totals[1]), seconds,
                   seconds > 0 ? totals[0] / 1e6 / seconds : 0.0, size, size == 1 ? "" : "s", options.threads);
    }
    spdlog::default_logger()->flush();
  }
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return code;
}

// `export SRC DEST`: rank 0 prepares DEST, every rank exports its share of the shards (index %
// ranks), rank 0 finishes. Each phase ends in an agreement, so a failure on one rank ends every
// rank with that rank's message and exit code, and nobody waits in a collective.
int run_export(const e3::app::Request& req, const e3::parallel::MpiEnv& mpi) {
  e3::jobs::ExportOptions o = req.export_options;
  o.rank = mpi.world_rank();
  o.ranks = mpi.world_size();
  if (o.threads == 0) o.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_on_node());
  const auto phase = [&](const auto& body) {
    int code = 0;
    try {
      body();
    } catch (Error& e) {
      e.set_rank(mpi.world_rank());
      spdlog::critical("{}", e.describe());
      code = e3::exit_code(e.kind());
    } catch (const std::exception& e) {
      spdlog::critical("rank {}: export: internal error: {}", mpi.world_rank(), e.what());
      code = e3::exit_code(ErrorKind::Internal);
    }
    spdlog::default_logger()->flush();
    const e3::parallel::Failure f = e3::parallel::agree_on_failure(MPI_COMM_WORLD, code != 0, code);
    return f.rank < 0 ? 0 : f.code;
  };
  const char* format = e3::jobs::export_format_name(o.format);
  int nothing_to_do = 0;
  if (const int code = phase([&] {
        if (o.rank == 0) nothing_to_do = e3::jobs::prepare_export(o) ? 1 : 0;
      }))
    return code;
  MPI_Bcast(&nothing_to_do, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (nothing_to_do) {
    if (o.rank == 0)
      spdlog::info("export: {} already holds the {} export of {}: nothing to do", o.dest.string(), format,
                   o.src.string());
    return 0;
  }
  if (o.rank == 0)
    spdlog::info("export: {} -> {} ({}){}, {} rank{} x {} threads", o.src.string(), o.dest.string(), format,
                 o.skip_verify ? "" : ", verifying each shard first", o.ranks, o.ranks == 1 ? "" : "s", o.threads);
  e3::jobs::ExportReport r;
  const auto progress = [&](const e3::jobs::ExportProgress& p) {
    const double mb_s = p.seconds > 0 ? p.bytes_written / 1e6 / p.seconds : 0;
    const double eta =
        p.shards_done > 0 ? p.seconds * static_cast<double>(p.shards_total - p.shards_done) / p.shards_done : 0;
    spdlog::info("export: {} of {} shards, {} samples, {:.2f} GB written, {:.0f} MB/s, ETA {:.0f} s", p.shards_done,
                 p.shards_total, p.samples_done, p.bytes_written / 1e9, mb_s, eta);
  };
  if (const int code = phase([&] { r = e3::jobs::export_shards(o, progress); })) return code;
  double sums[4] = {static_cast<double>(r.samples), static_cast<double>(r.bytes_written),
                    static_cast<double>(r.bytes_read), static_cast<double>(r.shards_resumed)};
  double totals[4] = {};
  MPI_Reduce(sums, totals, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  double seconds = 0;
  MPI_Reduce(&r.seconds, &seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (const int code = phase([&] {
        if (o.rank == 0) e3::jobs::finish_export(o);
      }))
    return code;
  if (o.rank == 0)
    spdlog::info("export {} -> {} ({}): ok: {:.0f} samples in {:.0f} files{}, {:.2f} GB written in {:.1f} s "
                 "({:.0f} MB/s), {:.2f} GB read",
                 o.src.string(), o.dest.string(), format, totals[0], totals[0],
                 totals[3] > 0 ? fmt::format(" ({:.0f} shards done by an earlier run)", totals[3]) : "",
                 totals[1] / 1e9, seconds, seconds > 0 ? totals[1] / 1e6 / seconds : 0.0, totals[2] / 1e9);
  return 0;
}

// One MPI rank's whole life after MPI_Init.
int run(int argc, char** argv, const e3::parallel::MpiEnv& mpi) {
  const std::string world_tag = fmt::format("[r{}/{}]", mpi.world_rank(), mpi.world_size());
  e3::jobs::install_rank_logger(world_tag, spdlog::level::info);
  e3::io::silence_hdf5_errors();

  // Every rank parses the same argv, so a usage error is the same everywhere: rank 0 says it.
  e3::app::Request req;
  try {
    req = e3::app::parse_command_line(argc, argv);
  } catch (const Error& e) {
    if (mpi.world_rank() == 0) spdlog::critical("{}", e.describe());
    return e3::exit_code(e.kind());
  }
  if (req.command == e3::app::Command::Help) {
    if (mpi.world_rank() == 0) std::cout << req.help_text << std::flush;
    return 0;
  }
  if (req.command == e3::app::Command::Info) {
    if (mpi.world_rank() != 0) return 0;  // one report, whatever the launcher
    std::cout << e3::jobs::model_info(req.info) << std::flush;
    return 0;
  }
  if (req.command == e3::app::Command::Verify) {
    return run_verify(req, mpi);
  }
  if (req.command == e3::app::Command::Export) {
    return run_export(req, mpi);
  }

  if (req.command == e3::app::Command::Bench) {
    e3::parallel::Grid grid(0);
    e3::jobs::install_rank_logger(grid.tag(), spdlog::level::info);
    return e3::jobs::run_bench(req.bench, grid);
  }
  const e3::jobs::RunConfig& rc = req.run;
  const auto level = e3::jobs::spdlog_level(rc.log_level);
  // Every rank sees the same --tp and world size, so a grid that does not divide them is a
  // usage error on every rank alike, found before any collective: rank 0 says it once.
  std::optional<e3::parallel::Grid> grid_holder;
  try {
    grid_holder.emplace(rc.tp);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Usage) throw;
    if (mpi.world_rank() == 0) spdlog::critical("{}", e.describe());
    return e3::exit_code(e.kind());
  }
  const e3::parallel::Grid& grid = *grid_holder;
  e3::jobs::install_rank_logger(
      grid.tag(), level,
      rc.log_dir.empty() ? std::filesystem::path()
                         : rc.log_dir / e3::jobs::rank_log_name(grid.world_rank(), rc.part.index, rc.part.count));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  spdlog::info("eagle3_extract {} up: host {} pid {}, backend {}, TP rank {}/{}, DP group {}/{}, local rank {}/{}, "
               "log level {}{}{}{}",
               E3_VERSION_STRING, host, getpid(), e3::jobs::resolve_backend(rc.backend), grid.tp_rank(), grid.tp_size(),
               grid.dp_rank(), grid.dp_size(), grid.local_rank(), grid.local_size(), e3::jobs::name_of(rc.log_level),
               rc.log_dir.empty() ? "" : ", also logging to " + (rc.log_dir / e3::jobs::rank_log_name(
                                                                               grid.world_rank(), rc.part.index,
                                                                               rc.part.count)).string(),
               rc.env.get("CUDA_VISIBLE_DEVICES") ? fmt::format(", CUDA_VISIBLE_DEVICES={}",
                                                                *rc.env.get("CUDA_VISIBLE_DEVICES"))
                                                  : "",
               req.embedded_demo ? " (embedded demo: no --model given)" : "");
  e3::jobs::install_stop_handlers();
  return e3::jobs::run_extract(rc, grid);
}

}  // namespace

int main(int argc, char** argv) {
  e3::parallel::MpiEnv mpi(&argc, &argv);
  try {
    return run(argc, argv, mpi);
  } catch (Error& e) {
    e.set_rank(mpi.world_rank());
    spdlog::critical("{}", e.describe());
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    // Agreed failures end every rank together; anything else may leave peers inside a
    // collective, so the whole job is aborted.
    if (e.agreed() || mpi.world_size() == 1) return e3::exit_code(e.kind());
    e3::parallel::MpiEnv::abort(e3::exit_code(e.kind()));
  } catch (const e3::parallel::PeerFailed& p) {
    spdlog::debug("stopping: rank {} failed", p.rank);
    return p.code;
  } catch (const std::exception& e) {
    spdlog::critical("rank {}: internal error: {}", mpi.world_rank(), e.what());
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    e3::parallel::MpiEnv::abort(e3::exit_code(ErrorKind::Internal));
  }
}
