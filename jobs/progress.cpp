#include "jobs/progress.h"

#include <numeric>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace e3::jobs {

Progress::Progress(bool active, int64_t total_samples, std::vector<int64_t> tokens_by_group, int64_t bytes_per_token,
                   double interval_s, int64_t total_steps)
    : active_(active),
      total_samples_(total_samples),
      total_tokens_by_group_(std::move(tokens_by_group)),
      bytes_per_token_(bytes_per_token),
      interval_s_(interval_s),
      total_steps_(total_steps),
      samples_(total_tokens_by_group_.size(), 0),
      tokens_(total_tokens_by_group_.size(), 0),
      start_(Clock::now()),
      last_(start_),
      step_start_(start_) {
  // With no interval every agreement prints; there is nothing to time.
  if (active_ && interval_s_ > 0) timer_ = std::thread([this] { tick(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  wake_.notify_all();
  if (timer_.joinable()) timer_.join();
}

void Progress::tick() {
  const auto interval = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s_));
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    const Clock::time_point due = last_ + interval;
    if (Clock::now() < due) {
      wake_.wait_until(lock, due);
      continue;  // woken early, or last_ moved: look again
    }
    last_ = Clock::now();
    report("progress", true);
  }
}

void Progress::update(const std::vector<int64_t>& samples_by_group, const std::vector<int64_t>& tokens_by_group) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_ = samples_by_group;
  tokens_ = tokens_by_group;
  const auto now = Clock::now();
  if (std::chrono::duration<double>(now - last_).count() >= interval_s_) {
    last_ = now;
    report("progress", false);
  }
}

void Progress::step_started(int64_t step_index) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step_index;
  step_start_ = Clock::now();
}

void Progress::finish(bool stopped) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;  // the last line is the last
    report(stopped ? "stopped" : "finished", false);
  }
  wake_.notify_all();
}

int64_t Progress::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::accumulate(samples_.begin(), samples_.end(), int64_t{0});
}

void Progress::report(const char* what, bool mid_step) {
  if (!active_) return;
  const auto now = Clock::now();
  const double secs = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
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
  // Counts change only at step boundaries; between them the line says what is running.
  const std::string running =
      mid_step && step_ >= 0
          ? fmt::format("; step {}/{} running for {:.0f} s", step_ + 1, total_steps_,
                        std::chrono::duration<double>(now - step_start_).count())
          : std::string();
  spdlog::info("{}: {}/{} samples ({:.1f}%), {}/{} tokens, {:.0f} tok/s, {:.2f} GB written, elapsed {:.0f} s, ETA {:.0f} s; "
               "slowest DP group {} at {:.1f}%{}",
               what, samples, total_samples_, pct, tokens, total, rate,
               static_cast<double>(tokens * bytes_per_token_) / 1e9, secs, eta, slowest, 100.0 * std::min(slowest_frac, 1.0),
               running);
}

}  // namespace e3::jobs
