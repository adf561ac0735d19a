// SIGTERM, SIGINT (Ctrl-C) and SIGUSR1 (Slurm sends one before the time limit with --signal)
// ask the job to stop after the current step, commit what is complete and exit with the
// resumable code. So does a SIGCONT that does not end a stop (Ctrl-Z, Slurm's suspend): it is
// how Open MPI's mpirun begins ending a job when it is signalled itself (Ctrl-C in its
// terminal): SIGCONT at once, SIGTERM odls_base_sigkill_timeout seconds later (default 1),
// SIGKILL as many seconds after that.
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/environment.h"

namespace e3::jobs {

// Installs the handlers and runs a watcher thread (one per rank) for as long as it lives.
// The thread keeps the heartbeat that tells a SIGCONT which ends a stop from one that
// does not, and calls `on_stop` with the first stop signal, within a tenth of a second of it:
// the leader says at once what is happening, not at the end of a step that may take minutes.
class StopSignals {
 public:
  using OnStop = std::function<void(int sig)>;
  explicit StopSignals(OnStop on_stop);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void watch();
  OnStop on_stop_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool quit_ = false;
  std::thread watcher_;
};

// The signal that asked to stop, or 0.
int stop_signal();
// "SIGTERM", "SIGINT", "SIGUSR1", "SIGCONT", else "a signal".
const char* stop_signal_name(int sig);
// The leader's line on the first stop signal: the job is stopping, committed shards in `out`
// are safe, how to resume; for mpirun's SIGCONT, when its SIGKILL will come (from the
// OMPI_MCA_odls_base_sigkill_timeout mpirun passes on) and the flag that gives a step more time.
std::string stop_announcement(int sig, const std::filesystem::path& out, const Environment& env);
// mpirun does not forward its ranks' output while it waits out its kill timeouts (its event
// loop sleeps), so the leader's line would reach the terminal only after SIGKILL. Where the
// process has a controlling terminal (Ctrl-C came from it) and stdout is not that terminal,
// the line is also written there directly. Returns whether it was.
bool tell_terminal(const std::string& line);

}  // namespace e3::jobs
