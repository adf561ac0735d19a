#include "jobs/progress.h"

#include <spdlog/spdlog.h>

namespace e3::jobs {

Progress::Progress(bool active, int64_t total_samples, int64_t total_tokens, double interval_s)
    : active_(active),
      total_samples_(total_samples),
      total_tokens_(total_tokens),
      interval_s_(interval_s),
      start_(Clock::now()),
      last_(start_) {
  if (active_) spdlog::info("this DP group: {} samples, {} tokens to compute", total_samples_, total_tokens_);
}

void Progress::step(int64_t samples, int64_t tokens) {
  samples_ += samples;
  tokens_ += tokens;
  const auto now = Clock::now();
  if (std::chrono::duration<double>(now - last_).count() >= interval_s_) {
    last_ = now;
    report("progress");
  }
}

void Progress::finish() { report("finished"); }

void Progress::report(const char* what) {
  if (!active_) return;
  const double secs = std::max(1e-9, std::chrono::duration<double>(Clock::now() - start_).count());
  const double rate = static_cast<double>(tokens_) / secs;
  const double pct = total_samples_ ? 100.0 * static_cast<double>(samples_) / static_cast<double>(total_samples_) : 100.0;
  const double eta = rate > 0 ? static_cast<double>(total_tokens_ - tokens_) / rate : 0.0;
  spdlog::info("{}: {}/{} samples ({:.1f}%), {} tokens, {:.0f} tok/s, elapsed {:.1f} s, ETA {:.0f} s", what, samples_,
               total_samples_, pct, tokens_, rate, secs, eta);
}

}  // namespace e3::jobs
