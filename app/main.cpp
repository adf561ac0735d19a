// eagle3_extract: entry point. Every failure ends here as one rank-tagged critical line,
// flushed, followed by an exit code from the README's table.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include <spdlog/spdlog.h>

#include "app/cli.h"
#include "core/cpu_share.h"
#include "core/environment.h"
#include "core/error.h"
#include "io/hdf5.h"
#include "jobs/backend_select.h"
#include "jobs/export_command.h"
#include "jobs/extract.h"
#include "jobs/info.h"
#include "jobs/logging.h"
#include "jobs/signals.h"
#include "jobs/stats_command.h"
#include "jobs/tokenize_command.h"
#include "jobs/verify_command.h"
#include "parallel/mpi_env.h"
#include "parallel/agreement.h"

namespace e3::app {
namespace {

using parallel::MpiEnv;

int help_command(const Request& req, const MpiEnv& mpi) {
  if (mpi.world_rank() == 0) std::cout << req.help_text << std::flush;
  return 0;
}

int info_command(const Request& req, const MpiEnv& mpi) {
  if (mpi.world_rank() != 0) return 0;  // one report, whatever the launcher
  std::cout << jobs::model_info(req.info) << std::flush;
  return 0;
}

int verify_command(const Request& req, const MpiEnv& mpi) { return jobs::run_verify(req.verify, mpi); }

int stats_command(const Request& req, const MpiEnv& mpi) { return jobs::run_stats(req.stats, mpi); }

int export_command(const Request& req, const MpiEnv& mpi) { return jobs::run_export(req.export_options, mpi); }

int tokenize_command(const Request& req, const MpiEnv& mpi) { return jobs::run_tokenize(req.tokenize, mpi); }

int bench_command(const Request& req, const MpiEnv&) {
  parallel::Grid grid(0);
  jobs::install_rank_logger(grid.tag(), spdlog::level::info);
  return jobs::run_bench(req.bench, grid);
}

// A run (no subcommand): the extraction.
int run_command(const Request& req, const MpiEnv& mpi) {
  const jobs::RunConfig& rc = req.run;
  const auto level = jobs::spdlog_level(rc.log_level);
  // Every rank sees the same --tp and world size, so a grid that does not divide them is a
  // usage error on every rank alike, found before any collective: rank 0 says it once.
  std::optional<parallel::Grid> grid_holder;
  try {
    grid_holder.emplace(rc.tp);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Usage) throw;
    if (mpi.world_rank() == 0) spdlog::critical("{}", e.describe(level <= spdlog::level::debug));
    return exit_code(e.kind());
  }
  const parallel::Grid& grid = *grid_holder;
  jobs::install_rank_logger(
      grid.tag(), level,
      rc.log_dir.empty() ? std::filesystem::path()
                         : rc.log_dir / jobs::rank_log_name(grid.world_rank(), rc.part.index, rc.part.count));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  spdlog::info("eagle3_extract {} up: host {} pid {}, backend {}, TP rank {}/{}, DP group {}/{}, local rank {}/{}, "
               "log level {}{}{}{}",
               E3_VERSION_STRING, host, getpid(), jobs::resolve_backend(rc.backend), grid.tp_rank(), grid.tp_size(),
               grid.dp_rank(), grid.dp_size(), grid.local_rank(), grid.local_size(), name_of(rc.log_level),
               rc.log_dir.empty() ? "" : ", also logging to " + (rc.log_dir / jobs::rank_log_name(
                                                                               grid.world_rank(), rc.part.index,
                                                                               rc.part.count)).string(),
               rc.env.get("CUDA_VISIBLE_DEVICES") ? fmt::format(", CUDA_VISIBLE_DEVICES={}",
                                                                *rc.env.get("CUDA_VISIBLE_DEVICES"))
                                                  : "",
               req.embedded_demo ? " (embedded demo: no --model given)" : "");
  jobs::StopSignals::OnStop announce;
  if (grid.is_leader())
    announce = [&rc](int sig) {
      const std::string line = jobs::stop_announcement(sig, rc.out_dir, rc.env);
      spdlog::warn("{}", line);
      if (sig == SIGCONT) jobs::tell_terminal(line);  // mpirun holds back our output while it stops the job
    };
  const jobs::StopSignals stops(std::move(announce));
  return jobs::run_extract(rc, grid);
}

// Each command and what runs it on every rank; the function returns the rank's exit code.
struct CommandRow {
  Command command;
  int (*run)(const Request&, const MpiEnv&);
};
constexpr CommandRow kCommands[] = {
    {Command::Run, run_command},     {Command::Verify, verify_command}, {Command::Stats, stats_command},
    {Command::Info, info_command},
    {Command::Bench, bench_command}, {Command::Export, export_command}, {Command::Tokenize, tokenize_command},
    {Command::Help, help_command},
};

// One MPI rank's whole life after MPI_Init.
int run(int argc, char** argv, const MpiEnv& mpi) {
  const std::string world_tag = fmt::format("[r{}/{}]", mpi.world_rank(), mpi.world_size());
  jobs::install_rank_logger(world_tag, spdlog::level::info);
  io::silence_hdf5_errors();

  // Every rank parses the same argv, so a usage error is the same everywhere: rank 0 says it.
  Request req;
  try {
    req = parse_command_line(argc, argv);
  } catch (const Error& e) {
    if (mpi.world_rank() == 0) spdlog::critical("{}", e.describe());
    return exit_code(e.kind());
  }
  const Environment env = Environment::of_process();
  if (req.command != Command::Help && req.command != Command::Info)
    parallel::require_world_of_launch(env, mpi.world_size());
  // The commands whose threads read, check and write the data (tokenize's and info's output is
  // stdout itself, help's too); the first rank of each node speaks for the node.
  const bool threaded = req.command == Command::Run || req.command == Command::Export ||
                        req.command == Command::Verify || req.command == Command::Stats || req.command == Command::Bench;
  if (threaded) {
    const parallel::NodePlace place = parallel::node_place(mpi.world());
    if (const auto warning = cpu_binding_warning(usable_cpus(), job_cpus(env), place.ranks); warning && place.rank == 0)
      spdlog::warn("{}", *warning);
  }
  for (const CommandRow& row : kCommands)
    if (row.command == req.command) return row.run(req, mpi);
  E3_THROW(ErrorKind::Internal, "no function runs command {}", static_cast<int>(req.command));
}

}  // namespace
}  // namespace e3::app

int main(int argc, char** argv) {
  e3::parallel::MpiEnv mpi(&argc, &argv, e3::Environment::of_process());
  try {
    return e3::app::run(argc, argv, mpi);
  } catch (e3::Error& e) {
    e.set_rank(mpi.world_rank());
    // Where in the code an error was raised helps whoever debugs it (--log-level debug), not a user.
    spdlog::critical("{}", e.describe(spdlog::default_logger()->should_log(spdlog::level::debug)));
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
    e3::parallel::MpiEnv::abort(e3::exit_code(e3::ErrorKind::Internal));
  }
}
