#include "mds/trainer/stop_signals.h"

#include <atomic>
#include <csignal>
#include <cstring>

namespace mds::trainer {
namespace {

std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) {
    int expected = 0;
    if (!g_signal.compare_exchange_strong(expected, sig) && sig != SIGUSR1) {
        // Already stopping: a second SIGINT/SIGTERM means now.
        std::signal(sig, SIG_DFL);
        std::raise(sig);
    }
}

}  // namespace

void install_stop_signal_handlers() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGUSR1, SIGTERM, SIGINT}) sigaction(sig, &sa, nullptr);
    // A write to a peer that died (Gloo's writev to a killed rank's socket) must fail with EPIPE, which becomes the
    // collective's error naming the rank, not end this process silently with SIGPIPE: ignored, as the Python
    // interpreter that runs BMD ignores it. Child processes get it back at its default (util/process.cpp).
    signal(SIGPIPE, SIG_IGN);
}

void request_stop(int sig) {
    int expected = 0;
    g_signal.compare_exchange_strong(expected, sig);
}

int stop_signal_received() { return g_signal.load(); }
void reset_stop_signal() { g_signal.store(0); }

const char* signal_name(int sig) {
    switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGPIPE: return "SIGPIPE";  // asked by print_line: standard output closed
    default: return "signal";
    }
}

}  // namespace mds::trainer
