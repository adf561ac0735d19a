#include "jobs/watchdog.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

Watchdog::Watchdog(parallel::Communicator& comm, double timeout_s, int world_rank, Options options)
    : comm_(comm), timeout_s_(timeout_s), rank_(world_rank), options_(std::move(options)), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

int64_t Watchdog::now_ns() const {
  if (options_.now_ns) return options_.now_ns();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Watchdog::step_begin(int64_t step) {
  began_ns_.store(now_ns());
  step_.store(step);
}

void Watchdog::step_end() { step_.store(-1); }

void Watchdog::abort_job(const std::string& message) {
  spdlog::critical("rank {}: {}: {}; aborting the job", rank_, kind_name(ErrorKind::Parallel), message);
  spdlog::default_logger()->flush();
  comm_.abort();
  parallel::MpiEnv::abort_from_any_thread(exit_code(ErrorKind::Parallel));
}

void Watchdog::run() {
  const auto poll = std::chrono::duration<double>(options_.poll_s);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, poll, [this] { return stop_; })) {
    std::string failure;
    const std::string err = comm_.async_error();
    const int64_t step = step_.load();
    if (!err.empty())
      failure = fmt::format("{} communicator failed: {}", comm_.name(), err);
    else if (step >= 0 && static_cast<double>(now_ns() - began_ns_.load()) / 1e9 > timeout_s_)
      failure = fmt::format("step {} did not finish within --collective-timeout {} s (a collective is stuck; is a "
                            "peer rank dead?)",
                            step, timeout_s_);
    ++checks_;
    if (failure.empty()) continue;
    if (!options_.on_failure) abort_job(failure);
    options_.on_failure(failure);
    return;  // one failure ends the job: nothing more to watch
  }
}

}  // namespace e3::jobs
