// Progress of the whole job on the leader: samples, tokens/s, output written, ETA, and the
// slowest DP group, at most every interval. Fed by the step agreement (every group's counts).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace e3::jobs {

class Progress {
 public:
  Progress(bool active, int64_t total_samples, std::vector<int64_t> tokens_by_group, int64_t bytes_per_token,
           double interval_s);
  void update(const std::vector<int64_t>& samples_by_group, const std::vector<int64_t>& tokens_by_group);
  void finish(bool stopped = false);  // the last line: "finished", or "stopped" early

 private:
  void report(const char* what);
  using Clock = std::chrono::steady_clock;
  bool active_;
  int64_t total_samples_;
  std::vector<int64_t> total_tokens_by_group_;
  int64_t bytes_per_token_;
  double interval_s_;
  std::vector<int64_t> samples_, tokens_;
  Clock::time_point start_, last_;
};

}  // namespace e3::jobs
