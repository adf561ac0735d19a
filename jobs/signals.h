// SIGTERM, SIGINT (Ctrl-C) and SIGUSR1 (Slurm sends one before the time limit with --signal)
// ask the job to stop after the current step, commit what is complete and exit with the
// resumable code.
#pragma once

namespace e3::jobs {

void install_stop_handlers();
// The signal that asked to stop, or 0.
int stop_signal();
// "SIGTERM", "SIGINT", "SIGUSR1", else "a signal".
const char* stop_signal_name(int sig);

}  // namespace e3::jobs
