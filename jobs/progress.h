// Progress of the whole job on the leader: samples, tokens/s, output written, ETA, and the
// slowest DP group, every interval. Fed by the step agreement (every group's counts); a timer
// thread prints on time between agreements too, so that a step of minutes (a large model on
// the CPU) does not leave the log silent: such a line says which step is running, and since when.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace e3::jobs {

class Progress {
 public:
  Progress(bool active, int64_t total_samples, std::vector<int64_t> tokens_by_group, int64_t bytes_per_token,
           double interval_s, int64_t total_steps = 0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(const std::vector<int64_t>& samples_by_group, const std::vector<int64_t>& tokens_by_group);
  void step_started(int64_t step_index);  // named by the lines printed while it runs
  void finish(bool stopped = false);      // the last line: "finished", or "stopped" early
  int64_t samples() const;                // every group's, as last agreed

 private:
  using Clock = std::chrono::steady_clock;
  void report(const char* what, bool mid_step);  // with mu_ held
  void tick();                                   // the timer thread
  const bool active_;
  const int64_t total_samples_;
  const std::vector<int64_t> total_tokens_by_group_;
  const int64_t bytes_per_token_;
  const double interval_s_;
  const int64_t total_steps_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool quit_ = false;
  std::vector<int64_t> samples_, tokens_;
  int64_t step_ = -1;
  Clock::time_point start_, last_, step_start_;
  std::thread timer_;
};

}  // namespace e3::jobs
