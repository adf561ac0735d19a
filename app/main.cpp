// eagle3_extract: entry point. Every failure ends here as one rank-tagged critical line,
// flushed, followed by an exit code from the README's table.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include <spdlog/spdlog.h>

#include "app/cli.h"
#include "io/hdf5.h"
#include "io/verify.h"
#include "jobs/backend_select.h"
#include "jobs/extract.h"
#include "jobs/info.h"
#include "jobs/logging.h"
#include "jobs/signals.h"
#include "kernels/error.h"
#include "parallel/agreement.h"
#include "parallel/mpi_env.h"

namespace {

using e3::Error;
using e3::ErrorKind;

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
  if (req.command == e3::app::Command::Verify || req.command == e3::app::Command::Info) {
    if (mpi.world_rank() != 0) return 0;  // one report, whatever the launcher
    if (req.command == e3::app::Command::Info) {
      std::cout << e3::jobs::model_info(req.info) << std::flush;
      return 0;
    }
    const e3::io::VerifyReport r = e3::io::verify_output(req.verify_dir);
    if (!req.verify_allow_incomplete) e3::io::require_complete(r, req.verify_dir);
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
    return 0;
  }

  if (req.command == e3::app::Command::Bench) {
    e3::parallel::Grid grid(0);
    e3::jobs::install_rank_logger(grid.tag(), spdlog::level::info);
    return e3::jobs::run_bench(req.bench, grid);
  }
  const e3::jobs::RunConfig& rc = req.run;
  const auto level = e3::jobs::parse_log_level(rc.log_level);
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
               grid.dp_rank(), grid.dp_size(), grid.local_rank(), grid.local_size(), rc.log_level,
               rc.log_dir.empty() ? "" : ", also logging to " + (rc.log_dir / e3::jobs::rank_log_name(
                                                                               grid.world_rank(), rc.part.index,
                                                                               rc.part.count)).string(),
               std::getenv("CUDA_VISIBLE_DEVICES") ? fmt::format(", CUDA_VISIBLE_DEVICES={}",
                                                                 std::getenv("CUDA_VISIBLE_DEVICES"))
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
