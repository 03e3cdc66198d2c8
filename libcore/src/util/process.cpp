// run_process: posix_spawnp with captured output and a deadline (process.h).
#include "mds/util/process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "mds/util/error.h"

extern char** environ;

namespace mds {
namespace {

using Clock = std::chrono::steady_clock;

struct Fd {
    int fd = -1;
    Fd() = default;
    explicit Fd(int f) : fd(f) {}
    ~Fd() { reset(); }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    void reset() {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
};

void make_pipe(Fd& read_end, Fd& write_end) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw Error(errno_message("pipe", errno));
    read_end.fd = p[0];
    write_end.fd = p[1];
}

// "8 MiB", "1000 bytes": a limit as messages print it.
std::string byte_count(std::size_t n) {
    if (n >= (std::size_t{1} << 20) && n % (std::size_t{1} << 20) == 0) return std::to_string(n >> 20) + " MiB";
    if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + " KiB";
    return std::to_string(n) + " bytes";
}

std::vector<std::string> child_environment(const std::map<std::string, std::string>& overrides) {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
        const char* eq = std::strchr(*e, '=');
        const std::string key = eq ? std::string(*e, static_cast<std::size_t>(eq - *e)) : std::string(*e);
        if (!overrides.count(key)) env.emplace_back(*e);
    }
    for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
    return env;
}

// SIGINT / SIGTERM while children run: the children are in process groups of their own (so that a
// timeout can kill a whole pipeline), out of reach of a Ctrl-C or of the `kill` that ends this
// process. Until the last run_process returns, a handler kills their groups first, then hands the
// signal to the handler that was there before (mds's cleanup of temporaries, or the default action).
constexpr int kGroupSlots = 16;
std::array<std::atomic<pid_t>, kGroupSlots> g_groups{};
std::mutex g_groups_mu;  // guards installing / restoring (not used inside the handler)
int g_groups_live = 0;
struct sigaction g_prev_int {}, g_prev_term {};

extern "C" void mds_process_signal_handler(int sig, siginfo_t* info, void* context) {
    for (auto& g : g_groups) {
        const pid_t pgid = g.load();
        if (pgid > 0) ::kill(-pgid, SIGKILL);
    }
    const struct sigaction& prev = sig == SIGINT ? g_prev_int : g_prev_term;
    if (prev.sa_flags & SA_SIGINFO) {
        if (prev.sa_sigaction) prev.sa_sigaction(sig, info, context);
        return;
    }
    if (prev.sa_handler == SIG_IGN) return;
    if (prev.sa_handler != SIG_DFL) {
        prev.sa_handler(sig);
        return;
    }
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

// Registers a child's process group for the handler above while it lives.
class GroupGuard {
public:
    explicit GroupGuard(pid_t pgid) {
        std::lock_guard<std::mutex> lock(g_groups_mu);
        if (g_groups_live++ == 0) {
            struct sigaction sa {};
            sa.sa_sigaction = mds_process_signal_handler;
            sa.sa_flags = SA_SIGINFO;
            sigemptyset(&sa.sa_mask);
            ::sigaction(SIGINT, &sa, &g_prev_int);
            ::sigaction(SIGTERM, &sa, &g_prev_term);
        }
        for (int i = 0; i < kGroupSlots; ++i) {
            pid_t expected = 0;
            if (g_groups[i].compare_exchange_strong(expected, pgid)) {
                slot_ = i;
                break;
            }
        }
    }
    ~GroupGuard() {
        std::lock_guard<std::mutex> lock(g_groups_mu);
        if (slot_ >= 0) g_groups[slot_].store(0);
        if (--g_groups_live == 0) {
            ::sigaction(SIGINT, &g_prev_int, nullptr);
            ::sigaction(SIGTERM, &g_prev_term, nullptr);
        }
    }
    GroupGuard(const GroupGuard&) = delete;
    GroupGuard& operator=(const GroupGuard&) = delete;

private:
    int slot_ = -1;  // -1: more than kGroupSlots at once (still killed at their deadlines)
};

}  // namespace

std::string ProcessResult::describe() const {
    if (!started) return "could not start: " + start_error;
    std::string s;
    char buf[96];
    if (overflowed) {
        s = "stopped: it printed more than " + byte_count(limit_bytes);
    } else if (timed_out) {
        std::snprintf(buf, sizeof buf, "timed out after %.1f s", static_cast<double>(elapsed.count()) / 1000.0);
        s = buf;
    } else if (signal != 0) {
        return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
    } else {
        return "exit status " + std::to_string(exit_code);
    }
    if (abandoned) s += " (it did not end even after SIGKILL; left behind)";
    return s;
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
    if (argv.empty()) throw std::invalid_argument("run_process: empty argv");
    ProcessResult result;
    result.limit_bytes = options.max_output_bytes;
    const auto t0 = Clock::now();

    // stdin is one end of a socket pair so that writing to a child that stopped reading gives
    // EPIPE (MSG_NOSIGNAL) instead of a SIGPIPE that would end this process.
    Fd in_parent, in_child, out_read, out_write, err_read, err_write;
    if (!options.stdin_data.empty()) {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
            throw Error(errno_message("socketpair", errno));
        in_parent.fd = sv[0];
        in_child.fd = sv[1];
    }
    make_pipe(out_read, out_write);
    make_pipe(err_read, err_write);

    std::vector<std::string> env_strings = child_environment(options.env);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (auto& s : args) cargv.push_back(s.data());
    cargv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    if (in_child.fd >= 0)
        posix_spawn_file_actions_adddup2(&actions, in_child.fd, 0);
    else
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out_write.fd, 1);
    posix_spawn_file_actions_adddup2(&actions, err_write.fd, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);  // its own group: a timeout kills the whole pipeline
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

    pid_t pid = 0;
    // Signals are held from the spawn until the child's group is registered, so that a SIGTERM
    // in between cannot leave it running.
    sigset_t fatal, old_mask;
    sigemptyset(&fatal);
    sigaddset(&fatal, SIGINT);
    sigaddset(&fatal, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &fatal, &old_mask);
    const int rc = ::posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), envp.data());
    std::optional<GroupGuard> group;
    if (rc == 0) group.emplace(pid);
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    in_child.reset();
    out_write.reset();
    err_write.reset();
    if (rc != 0) {
        result.start_error = argv[0] + ": " + std::strerror(rc);
        result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
        return result;
    }
    result.started = true;

    std::size_t in_off = 0;
    if (in_parent.fd >= 0) ::fcntl(in_parent.fd, F_SETFL, ::fcntl(in_parent.fd, F_GETFL) | O_NONBLOCK);
    // A negative, zero or absurd timeout must neither overflow the clock arithmetic below nor
    // turn into "no deadline" by accident: zero and below mean none, the rest is capped.
    const auto timeout = std::min(options.timeout, kMaxProcessTimeout);
    const bool has_deadline = timeout.count() > 0;
    const auto deadline = has_deadline ? t0 + timeout : Clock::time_point::max();
    auto kill_at = Clock::time_point::max();     // SIGKILL after SIGTERM
    auto killed_at = Clock::time_point::max();   // when SIGKILL went out
    auto reaped_at = Clock::time_point::max();   // when the child itself was reaped
    bool term_sent = false, kill_sent = false, reaped = false;
    int status = 0;
    char buf[65536];

    auto send_term = [&](Clock::time_point now) {
        if (term_sent) return;
        ::kill(-pid, SIGTERM);
        term_sent = true;
        kill_at = now + std::chrono::seconds(2);
    };
    auto send_kill = [&](Clock::time_point now) {
        if (kill_sent) return;
        ::kill(-pid, SIGKILL);
        kill_sent = true;
        killed_at = now;
    };
    auto try_reap = [&](Clock::time_point now) {
        if (reaped) return;
        pid_t r;
        do {
            r = ::waitpid(pid, &status, WNOHANG);
        } while (r < 0 && errno == EINTR);
        if (r == pid || r < 0) {
            if (r < 0) status = -1;
            reaped = true;
            reaped_at = now;
        }
    };
    auto ms_until = [](Clock::time_point now, Clock::time_point t) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
        return static_cast<int>(std::clamp<long long>(ms, 0, 60000));
    };
    auto keep = [&](std::string& dst, const char* data, std::size_t n) {
        const std::size_t room = dst.size() < options.max_output_bytes ? options.max_output_bytes - dst.size() : 0;
        if (n > room) result.truncated = true;
        dst.append(data, std::min(n, room));
    };

    while (out_read.fd >= 0 || err_read.fd >= 0 || in_parent.fd >= 0) {
        const auto now = Clock::now();
        try_reap(now);
        if (has_deadline && !term_sent && now >= deadline) {
            result.timed_out = true;
            send_term(now);
        }
        if (options.stop_on_overflow && result.truncated && !term_sent) {
            result.overflowed = true;
            send_term(now);
        }
        if (term_sent && !kill_sent && now >= kill_at) send_kill(now);
        // Descendants that escaped the group may hold the pipes open (and keep writing): read
        // what is there for at most half a second after SIGKILL, then stop.
        if (kill_sent && now >= killed_at + std::chrono::milliseconds(500)) break;
        // The child is gone but members of its group hold the pipes: 2 s more, then they go too.
        if (reaped && !term_sent && now >= reaped_at + std::chrono::seconds(2)) {
            send_kill(now);
            break;
        }
        int wait_ms = reaped ? ms_until(now, reaped_at + std::chrono::seconds(2)) : 100;  // 100: look for its exit
        if (has_deadline && !term_sent) wait_ms = std::min(wait_ms, ms_until(now, deadline));
        if (term_sent && !kill_sent) wait_ms = std::min(wait_ms, ms_until(now, kill_at));
        if (kill_sent) wait_ms = std::min(wait_ms, 100);

        pollfd fds[3];
        int nfds = 0;
        int idx_out = -1, idx_err = -1, idx_in = -1;
        if (out_read.fd >= 0) { idx_out = nfds; fds[nfds++] = {out_read.fd, POLLIN, 0}; }
        if (err_read.fd >= 0) { idx_err = nfds; fds[nfds++] = {err_read.fd, POLLIN, 0}; }
        if (in_parent.fd >= 0) { idx_in = nfds; fds[nfds++] = {in_parent.fd, POLLOUT, 0}; }
        const int n = ::poll(fds, static_cast<nfds_t>(nfds), wait_ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (n == 0) continue;
        auto drain = [&](int idx, Fd& fd, std::string& dst) {
            if (idx < 0 || !(fds[idx].revents & (POLLIN | POLLHUP | POLLERR))) return;
            const ssize_t r = ::read(fd.fd, buf, sizeof buf);
            if (r > 0) keep(dst, buf, static_cast<std::size_t>(r));
            else if (r == 0 || (errno != EINTR && errno != EAGAIN)) fd.reset();
        };
        drain(idx_out, out_read, result.out);
        drain(idx_err, err_read, result.err);
        if (idx_in >= 0 && (fds[idx_in].revents & (POLLOUT | POLLHUP | POLLERR))) {
            const std::string& data = options.stdin_data;
            const ssize_t w = ::send(in_parent.fd, data.data() + in_off, data.size() - in_off, MSG_NOSIGNAL);
            if (w > 0) in_off += static_cast<std::size_t>(w);
            if ((w < 0 && errno != EINTR && errno != EAGAIN) || in_off >= data.size()) in_parent.reset();
        }
    }
    in_parent.reset();
    out_read.reset();
    err_read.reset();

    // The pipes are closed; the child may still run (it closed them itself): wait, still bounded.
    // A child that SIGKILL does not end (stuck in the kernel) is given up on 3 s after it.
    while (!reaped) {
        const auto now = Clock::now();
        try_reap(now);
        if (reaped) break;
        if (has_deadline && !term_sent && now >= deadline) {
            result.timed_out = true;
            send_term(now);
        }
        if (term_sent && !kill_sent && now >= kill_at) send_kill(now);
        if (kill_sent && now >= killed_at + std::chrono::seconds(3)) {
            result.abandoned = true;
            status = -1;
            break;
        }
        ::usleep(10000);
    }
    if (status != -1) {
        if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
    }
    if (term_sent && !kill_sent) ::kill(-pid, SIGKILL);  // what is left of the group
    result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    return result;
}

}  // namespace mds
