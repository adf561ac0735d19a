#include "jobs/signals.h"

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <ctime>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace e3::jobs {
namespace {

// A signal handler can only leave a note in lock-free variables of static storage; these are
// those notes, read at step boundaries (pending) and by the watcher thread.
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free);
std::atomic<int>& pending() {
  static std::atomic<int> signal_number{0};
  return signal_number;
}
std::atomic<int64_t>& heartbeat_ns() {  // the watcher's last tick
  static std::atomic<int64_t> t{0};
  return t;
}
std::atomic<int64_t>& thawed_ns() {  // when the watcher last found it had been frozen
  static std::atomic<int64_t> t{0};
  return t;
}

constexpr int64_t kTickNs = 50'000'000;
// A tick this late means the whole process was stopped (SIGSTOP, Ctrl-Z, Slurm's suspend), so
// the SIGCONT that follows ends that stop. A loaded machine that delays the watcher this much
// only makes a launcher's SIGCONT ignored: its SIGTERM follows.
constexpr int64_t kFrozenNs = 1'000'000'000;

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

extern "C" void on_stop_signal(int sig) { pending() = sig; }

extern "C" void on_continue(int) {
  const int64_t now = monotonic_ns();
  if (now - heartbeat_ns().load() > kFrozenNs || now - thawed_ns().load() < kFrozenNs) return;
  int none = 0;
  pending().compare_exchange_strong(none, SIGCONT);
}

void install(int sig, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, nullptr);
}

}  // namespace

StopSignals::StopSignals(OnStop on_stop) : on_stop_(std::move(on_stop)) {
  heartbeat_ns() = monotonic_ns();
  watcher_ = std::thread([this] { watch(); });
  install(SIGTERM, on_stop_signal);
  install(SIGUSR1, on_stop_signal);
  // Also where a launcher or a non-interactive shell started the rank with SIGINT ignored:
  // Ctrl-C on a rank must stop it cleanly rather than leave it to be killed mid-write.
  install(SIGINT, on_stop_signal);
  install(SIGCONT, on_continue);
}

StopSignals::~StopSignals() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  wake_.notify_all();
  watcher_.join();
  // A SIGCONT from now on finds the heartbeat stale and leaves no note.
}

void StopSignals::watch() {
  // The stop signals are taken by the other threads: a SIGCONT that ends a stop is then judged
  // by a thread that was frozen too, never by this one just after its heartbeat.
  sigset_t stops;
  sigemptyset(&stops);
  // SIGTTOU too: with the terminal's tostop set, tell_terminal (on this thread) would stop the rank.
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGCONT, SIGTTOU}) sigaddset(&stops, sig);
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);
  bool announced = false;
  int64_t last = monotonic_ns();
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    wake_.wait_for(lock, std::chrono::nanoseconds(kTickNs));
    const int64_t now = monotonic_ns();
    if (now - last > kFrozenNs) thawed_ns() = now;  // before the heartbeat: the handler reads them the other way round
    heartbeat_ns() = now;
    last = now;
    const int sig = pending();
    if (sig && !announced) {
      announced = true;
      if (on_stop_) on_stop_(sig);
    }
  }
}

int stop_signal() { return pending(); }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGCONT: return "SIGCONT";
    default: return "a signal";
  }
}

std::string stop_announcement(int sig, const std::filesystem::path& out, const Environment& env) {
  std::string line = fmt::format(
      "stopping ({}): every rank finishes its current step and commits the shards that are complete; the shards "
      "already committed in {} are safe. Rerun the same command to resume",
      sig == SIGCONT ? "SIGCONT: the launcher is ending the job, e.g. Ctrl-C in mpirun's terminal"
                     : stop_signal_name(sig),
      out.string());
  if (sig != SIGCONT) return line;
  int timeout_s = 1;  // Open MPI 4.1's default
  if (const auto v = env.get("OMPI_MCA_odls_base_sigkill_timeout")) {
    int parsed = 0;
    const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), parsed);
    if (ec == std::errc() && p == v->data() + v->size() && parsed > 0) timeout_s = parsed;
  }
  line += fmt::format(
      ". mpirun sends SIGTERM in {} s and SIGKILL in {} s: a step still running then is cut short and computed "
      "again by the rerun (mpirun --mca odls_base_sigkill_timeout S gives a step S seconds)",
      timeout_s, 2 * timeout_s);
  return line;
}

bool tell_terminal(const std::string& line) {
  const int fd = open("/dev/tty", O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;  // no controlling terminal: a batch job
  // mpirun gives its ranks a pty of its own for stdout: only stdout that is this very terminal
  // already shows the line.
  struct stat tty {}, out {};
  const bool same = fstat(fd, &tty) == 0 && fstat(STDOUT_FILENO, &out) == 0 && S_ISCHR(out.st_mode) &&
                    out.st_rdev == tty.st_rdev;
  const std::string text = "eagle3_extract: " + line + "\r\n";
  const bool whole = !same && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return whole;
}

}  // namespace e3::jobs
