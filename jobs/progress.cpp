#include "jobs/progress.h"

#include <numeric>

#include <spdlog/spdlog.h>

namespace e3::jobs {

Progress::Progress(bool active, int64_t total_samples, std::vector<int64_t> tokens_by_group, int64_t bytes_per_token,
                   double interval_s)
    : active_(active),
      total_samples_(total_samples),
      total_tokens_by_group_(std::move(tokens_by_group)),
      bytes_per_token_(bytes_per_token),
      interval_s_(interval_s),
      samples_(total_tokens_by_group_.size(), 0),
      tokens_(total_tokens_by_group_.size(), 0),
      start_(Clock::now()),
      last_(start_) {}

void Progress::update(const std::vector<int64_t>& samples_by_group, const std::vector<int64_t>& tokens_by_group) {
  samples_ = samples_by_group;
  tokens_ = tokens_by_group;
  const auto now = Clock::now();
  if (std::chrono::duration<double>(now - last_).count() >= interval_s_) {
    last_ = now;
    report("progress");
  }
}

void Progress::finish(bool stopped) { report(stopped ? "stopped" : "finished"); }

void Progress::report(const char* what) {
  if (!active_) return;
  const double secs = std::max(1e-9, std::chrono::duration<double>(Clock::now() - start_).count());
  const int64_t samples = std::accumulate(samples_.begin(), samples_.end(), int64_t{0});
  const int64_t tokens = std::accumulate(tokens_.begin(), tokens_.end(), int64_t{0});
  const int64_t total = std::accumulate(total_tokens_by_group_.begin(), total_tokens_by_group_.end(), int64_t{0});
  const double rate = static_cast<double>(tokens) / secs;
  // The slowest group decides when the job ends.
  size_t slowest = 0;
  double slowest_frac = 2.0, eta = 0.0;
  for (size_t g = 0; g < tokens_.size(); ++g) {
    const double want = static_cast<double>(total_tokens_by_group_[g]);
    const double frac = want > 0 ? static_cast<double>(tokens_[g]) / want : 1.0;
    if (frac < slowest_frac) {
      slowest_frac = frac;
      slowest = g;
    }
    if (tokens_[g] > 0) eta = std::max(eta, (want - static_cast<double>(tokens_[g])) * secs / static_cast<double>(tokens_[g]));
  }
  const double pct = total_samples_ ? 100.0 * static_cast<double>(samples) / static_cast<double>(total_samples_) : 100.0;
  spdlog::info("{}: {}/{} samples ({:.1f}%), {}/{} tokens, {:.0f} tok/s, {:.2f} GB written, elapsed {:.0f} s, ETA {:.0f} s; "
               "slowest DP group {} at {:.1f}%",
               what, samples, total_samples_, pct, tokens, total, rate,
               static_cast<double>(tokens * bytes_per_token_) / 1e9, secs, eta, slowest, 100.0 * std::min(slowest_frac, 1.0));
}

}  // namespace e3::jobs
