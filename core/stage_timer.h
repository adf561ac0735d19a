// Per-stage accounts of where a job's time goes: each stage a counter of nanoseconds that the
// threads doing it add their scopes' wall time to, so the sum over threads is what one reads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace e3 {

// Adds the wall time from construction to destruction (or to stop()) to `ns`.
class ScopeTimer {
 public:
  explicit ScopeTimer(std::atomic<uint64_t>* ns) : ns_(ns), start_(std::chrono::steady_clock::now()) {}
  ~ScopeTimer() { stop(); }
  ScopeTimer(const ScopeTimer&) = delete;
  ScopeTimer& operator=(const ScopeTimer&) = delete;
  void stop() {
    if (!ns_) return;
    const auto d = std::chrono::steady_clock::now() - start_;
    ns_->fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()),
                   std::memory_order_relaxed);
    ns_ = nullptr;
  }

 private:
  std::atomic<uint64_t>* ns_;  // null: not timed (or already stopped)
  std::chrono::steady_clock::time_point start_;
};

inline double stage_seconds(const std::atomic<uint64_t>& ns) { return static_cast<double>(ns.load()) / 1e9; }

}  // namespace e3
