// Never a silent hang: a thread that watches the communicator for asynchronous failures
// (NCCL) and each step for a time limit (--collective-timeout), and ends the whole job with
// a message naming the rank and what was stuck.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "parallel/communicator.h"

namespace e3::jobs {

struct WatchdogOptions {
  double poll_s = 0.1;
  std::function<int64_t()> now_ns;  // empty: the steady clock
  // Called once, on the watchdog's thread, with what was found. Empty: log it, abort the
  // communicator and end the job with the parallel error's exit code (never returns).
  std::function<void(const std::string& message)> on_failure;
};

class Watchdog {
 public:
  using Options = WatchdogOptions;
  Watchdog(parallel::Communicator& comm, double timeout_s, int world_rank, Options options = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void step_begin(int64_t step);
  void step_end();
  // The checks made so far: a test waits for more of them rather than for a time.
  int64_t checks() const { return checks_.load(); }

 private:
  void run();
  int64_t now_ns() const;
  [[noreturn]] void abort_job(const std::string& message);
  parallel::Communicator& comm_;
  double timeout_s_;
  int rank_;
  Options options_;
  std::atomic<int64_t> step_{-1};
  std::atomic<int64_t> began_ns_{0};
  std::atomic<int64_t> checks_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace e3::jobs
