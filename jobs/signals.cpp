#include "jobs/signals.h"

#include <csignal>

namespace e3::jobs {
namespace {

// A signal handler can only leave a note in a lock-free flag of static storage; this one
// flag is that note, read at step boundaries.
volatile std::sig_atomic_t& pending() {
  static volatile std::sig_atomic_t signal_number = 0;
  return signal_number;
}

extern "C" void on_stop_signal(int sig) { pending() = sig; }

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  // Also where a launcher or a non-interactive shell started the rank with SIGINT ignored:
  // Ctrl-C on a rank must stop it cleanly rather than leave it to be killed mid-write.
  sigaction(SIGINT, &sa, nullptr);
}

int stop_signal() { return pending(); }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

}  // namespace e3::jobs
