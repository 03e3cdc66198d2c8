// Graceful stops for mds-train under SLURM: SIGUSR1 (what `sbatch --signal=USR1@<secs>` sends
// before the time limit), SIGTERM (scancel, and the time limit itself, KillWait seconds before
// SIGKILL) and SIGINT set a flag that the training loop reads between iterations; it then saves
// (when --save is given), flushes TensorBoard and emissions.csv, and exits 0. A second SIGINT or
// SIGTERM while stopping ends the process at once, as without the handlers.
#pragma once

namespace mds::trainer {

// Also ignores SIGPIPE, so that a write to a dead peer's socket is an error the collective reports. A log line
// that finds standard output closed (the reader of a pipe gone: `mds-train ... | tee log` with tee killed) asks
// for the same graceful stop instead, as SIGPIPE (print_line, request_stop).
void install_stop_signal_handlers();
// The same stop as a received `sig`, asked from inside the process; the first stop asked or received wins.
void request_stop(int sig);
// The signal received or asked for (SIGUSR1, SIGTERM, SIGINT, SIGPIPE), or 0.
int stop_signal_received();
// "SIGUSR1" ...; for messages.
const char* signal_name(int sig);
// For tests: forget a received signal.
void reset_stop_signal();

}  // namespace mds::trainer
