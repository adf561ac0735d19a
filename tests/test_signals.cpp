// Stop signals (jobs/signals.h): a SIGCONT that does not end a stop is how mpirun begins ending
// a job when it is signalled itself (Ctrl-C in its terminal), and stops the run; one that ends
// a stop (Ctrl-Z, Slurm's suspend) does not; the leader's announcement. Each case runs in a
// child process: the stop note lives as long as the process.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "core/environment.h"
#include "jobs/signals.h"
#include "support/test_support.h"

namespace {

using e3::jobs::StopSignals;

// Waits (up to a generous bound on a loaded machine) until `done` holds.
template <class F>
bool wait_for(F done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Runs `body` in a child process and returns its exit status: the stop note set there does
// not reach the other tests of this binary.
template <class F>
int in_child(F body) {
  const pid_t pid = fork();
  if (pid == 0) std::_Exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

char process_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t paren = s.rfind(')');
  return paren == std::string::npos || paren + 2 >= s.size() ? '?' : s[paren + 2];
}

TEST(StopSignals, ContinueWithoutAStopAsksToStopAndIsAnnouncedAtOnce) {
  const int status = in_child([] {
        std::atomic<int> announced{0};
        const StopSignals stops([&](int sig) { announced = sig; });
        raise(SIGCONT);
        const bool seen = wait_for([&] { return announced.load() != 0; });
        std::fprintf(stderr, "seen %d announced %d stop %d\n", seen, announced.load(), e3::jobs::stop_signal());
        return seen && announced == SIGCONT && e3::jobs::stop_signal() == SIGCONT ? 3 : 1;
      });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "status " << status;
}

TEST(StopSignals, ContinueThatEndsAStopIsNotAStop) {
  const int status = in_child([] {
        std::atomic<int> announced{0};
        const StopSignals stops([&](int sig) { announced = sig; });
        const pid_t self = getpid();
        const pid_t waker = fork();
        if (waker == 0) {  // keeps this process stopped for longer than the watcher's limit, then resumes it
          while (process_state(self) != 'T') std::this_thread::sleep_for(std::chrono::milliseconds(5));
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          kill(self, SIGCONT);
          _exit(0);
        }
        raise(SIGSTOP);  // as Ctrl-Z or Slurm's suspend would
        int status = 0;
        waitpid(waker, &status, 0);
        const bool ignored = e3::jobs::stop_signal() == 0;
        // A stop signal after that still stops, and is the one announced.
        raise(SIGTERM);
        const bool seen = wait_for([&] { return announced.load() != 0; });
        std::fprintf(stderr, "ignored %d seen %d announced %d\n", ignored, seen, announced.load());
        return ignored && seen && announced == SIGTERM ? 3 : 1;
      });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "status " << status;
}

TEST(StopSignals, AnnouncementSaysCommittedShardsAreSafeAndHowToResume) {
  const std::string term = e3::jobs::stop_announcement(SIGTERM, "/scratch/hs", e3::Environment());
  EXPECT_TRUE(e3::test::Contains(term, "stopping (SIGTERM)")) << term;
  EXPECT_TRUE(e3::test::Contains(term, "already committed in /scratch/hs are safe")) << term;
  EXPECT_TRUE(e3::test::Contains(term, "Rerun the same command to resume")) << term;
  const std::string cont = e3::jobs::stop_announcement(
      SIGCONT, "/scratch/hs",
      e3::Environment(std::map<std::string, std::string>{{"OMPI_MCA_odls_base_sigkill_timeout", "30"}}));
  EXPECT_TRUE(e3::test::Contains(cont, "Ctrl-C in mpirun's terminal")) << cont;
  EXPECT_TRUE(e3::test::Contains(cont, "mpirun sends SIGTERM in 30 s and SIGKILL in 60 s")) << cont;
  EXPECT_TRUE(e3::test::Contains(cont, "--mca odls_base_sigkill_timeout")) << cont;
  const std::string cont_default = e3::jobs::stop_announcement(SIGCONT, "/scratch/hs", e3::Environment());
  EXPECT_TRUE(e3::test::Contains(cont_default, "SIGTERM in 1 s and SIGKILL in 2 s")) << cont_default;
}

}  // namespace
