// Progress lines of one DP group: samples, tokens/s and ETA, at most every interval.
#pragma once

#include <chrono>
#include <cstdint>

namespace e3::jobs {

class Progress {
 public:
  Progress(bool active, int64_t total_samples, int64_t total_tokens, double interval_s);
  void step(int64_t samples, int64_t tokens);
  void finish();

 private:
  void report(const char* what);
  using Clock = std::chrono::steady_clock;
  bool active_;
  int64_t total_samples_, total_tokens_;
  double interval_s_;
  int64_t samples_ = 0, tokens_ = 0;
  Clock::time_point start_, last_;
};

}  // namespace e3::jobs
