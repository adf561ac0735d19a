// Never a silent hang: a thread that watches the communicator for asynchronous failures
// (NCCL) and each step for a time limit (--collective-timeout), and ends the whole job with
// a message naming the rank and what was stuck.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "parallel/communicator.h"

namespace e3::jobs {

class Watchdog {
 public:
  Watchdog(parallel::Communicator& comm, double timeout_s, int world_rank);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void step_begin(int64_t step);
  void step_end();

 private:
  void run();
  [[noreturn]] void fail(const std::string& message);
  parallel::Communicator& comm_;
  double timeout_s_;
  int rank_;
  std::atomic<int64_t> step_{-1};
  std::atomic<int64_t> began_ns_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace e3::jobs
