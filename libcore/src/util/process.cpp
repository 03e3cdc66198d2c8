// run_process (process.h), in steps: spawn_child (posix_spawnp on fresh pipes, in a process group of
// its own), StreamPump (output captured, input fed) while Child supervises the deadline and the
// signals, then Child::reap and collect.
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

// The child's three streams, both ends until the spawn; then the parent's ends only. stdin is one
// end of a socket pair so that writing to a child that stopped reading gives EPIPE (MSG_NOSIGNAL)
// instead of a SIGPIPE that would end this process; without stdin data it is /dev/null.
struct Pipes {
    Fd in_parent, in_child, out_read, out_write, err_read, err_write;

    explicit Pipes(bool with_stdin) {
        if (with_stdin) {
            int sv[2];
            if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
                throw Error(errno_message("socketpair", errno));
            in_parent.fd = sv[0];
            in_child.fd = sv[1];
        }
        make_pipe(out_read, out_write);
        make_pipe(err_read, err_write);
    }
    bool any_open() const { return out_read.fd >= 0 || err_read.fd >= 0 || in_parent.fd >= 0; }
    void close_child_ends() {
        in_child.reset();
        out_write.reset();
        err_write.reset();
    }
    void close_parent_ends() {
        in_parent.reset();
        out_read.reset();
        err_read.reset();
    }
};

// posix_spawn's file actions and attributes for a child: the pipes as fds 0-2, no other inherited
// descriptor, no blocked signals, SIGPIPE at its default, and a process group of its own (a timeout
// kills the whole pipeline).
class SpawnAttributes {
public:
    explicit SpawnAttributes(const Pipes& p) {
        posix_spawn_file_actions_init(&actions);
        posix_spawnattr_init(&attr);
        if (p.in_child.fd >= 0)
            posix_spawn_file_actions_adddup2(&actions, p.in_child.fd, 0);
        else
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&actions, p.out_write.fd, 1);
        posix_spawn_file_actions_adddup2(&actions, p.err_write.fd, 2);
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
    }
    ~SpawnAttributes() {
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
    }
    SpawnAttributes(const SpawnAttributes&) = delete;
    SpawnAttributes& operator=(const SpawnAttributes&) = delete;

    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
};

// Starts argv[0] (searched in PATH) on the pipes; registers its group in `group` when it started.
// Returns posix_spawnp's error (0: started). The child's ends of the pipes are closed either way.
int spawn_child(const std::vector<std::string>& argv, const ProcessOptions& options, Pipes& pipes, pid_t& pid,
                std::optional<GroupGuard>& group) {
    std::vector<std::string> env_strings = child_environment(options.env);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (auto& s : args) cargv.push_back(s.data());
    cargv.push_back(nullptr);

    int rc = 0;
    {
        const SpawnAttributes spawn(pipes);
        // Signals are held from the spawn until the child's group is registered, so that a SIGTERM
        // in between cannot leave it running.
        sigset_t fatal, old_mask;
        sigemptyset(&fatal);
        sigaddset(&fatal, SIGINT);
        sigaddset(&fatal, SIGTERM);
        ::pthread_sigmask(SIG_BLOCK, &fatal, &old_mask);
        rc = ::posix_spawnp(&pid, cargv[0], &spawn.actions, &spawn.attr, cargv.data(), envp.data());
        if (rc == 0) group.emplace(pid);
        ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    }
    pipes.close_child_ends();
    return rc;
}

// A running child as run_process supervises it: its deadline, SIGTERM then SIGKILL 2 s later,
// and its reaping, each with the time it happened.
class Child {
public:
    Child(pid_t pid, Clock::time_point t0, std::chrono::milliseconds timeout)
        : pid_(pid),
          // A negative, zero or absurd timeout must neither overflow the clock arithmetic below nor
          // turn into "no deadline" by accident: zero and below mean none, the rest is capped.
          has_deadline_(std::min(timeout, kMaxProcessTimeout).count() > 0),
          deadline_(has_deadline_ ? t0 + std::min(timeout, kMaxProcessTimeout) : Clock::time_point::max()) {}

    void send_term(Clock::time_point now) {
        if (term_sent_) return;
        ::kill(-pid_, SIGTERM);
        term_sent_ = true;
        kill_at_ = now + std::chrono::seconds(2);
    }
    void send_kill(Clock::time_point now) {
        if (kill_sent_) return;
        ::kill(-pid_, SIGKILL);
        kill_sent_ = true;
        killed_at_ = now;
    }
    void try_reap(Clock::time_point now) {
        if (reaped_) return;
        pid_t r;
        do {
            r = ::waitpid(pid_, &status_, WNOHANG);
        } while (r < 0 && errno == EINTR);
        if (r == pid_ || r < 0) {
            if (r < 0) status_ = -1;
            reaped_ = true;
            reaped_at_ = now;
        }
    }
    // SIGTERM at the deadline (timed_out), SIGKILL 2 s after SIGTERM.
    void enforce_deadline(Clock::time_point now, ProcessResult& result) {
        if (has_deadline_ && !term_sent_ && now >= deadline_) {
            result.timed_out = true;
            send_term(now);
        }
        if (term_sent_ && !kill_sent_ && now >= kill_at_) send_kill(now);
    }

    // One round of the output loop's supervision; false: stop reading the pipes.
    bool supervise_while_reading(Clock::time_point now, const ProcessOptions& options, ProcessResult& result) {
        try_reap(now);
        // (A SIGTERM sent for an overflow here sets its SIGKILL 2 s ahead, so checking the
        // deadline's SIGKILL first changes nothing.)
        enforce_deadline(now, result);
        if (options.stop_on_overflow && result.truncated && !term_sent_) {
            result.overflowed = true;
            send_term(now);
        }
        // Descendants that escaped the group may hold the pipes open (and keep writing): read
        // what is there for at most half a second after SIGKILL, then stop.
        if (kill_sent_ && now >= killed_at_ + std::chrono::milliseconds(500)) return false;
        // The child is gone but members of its group hold the pipes: 2 s more, then they go too.
        if (reaped_ && !term_sent_ && now >= reaped_at_ + std::chrono::seconds(2)) {
            send_kill(now);
            return false;
        }
        return true;
    }

    // How long the output loop may wait in poll() before the next thing to do.
    int poll_timeout_ms(Clock::time_point now) const {
        int wait_ms = reaped_ ? ms_until(now, reaped_at_ + std::chrono::seconds(2)) : 100;  // 100: look for its exit
        if (has_deadline_ && !term_sent_) wait_ms = std::min(wait_ms, ms_until(now, deadline_));
        if (term_sent_ && !kill_sent_) wait_ms = std::min(wait_ms, ms_until(now, kill_at_));
        if (kill_sent_) wait_ms = std::min(wait_ms, 100);
        return wait_ms;
    }

    // The pipes are closed; the child may still run (it closed them itself): wait, still bounded.
    // A child that SIGKILL does not end (stuck in the kernel) is given up on 3 s after it.
    void reap(ProcessResult& result) {
        while (!reaped_) {
            const auto now = Clock::now();
            try_reap(now);
            if (reaped_) break;
            enforce_deadline(now, result);
            if (kill_sent_ && now >= killed_at_ + std::chrono::seconds(3)) {
                result.abandoned = true;
                status_ = -1;
                break;
            }
            ::usleep(10000);
        }
    }

    // The exit status or signal into `result`; what is left of the group after a SIGTERM is killed.
    void collect(ProcessResult& result) const {
        if (status_ != -1) {
            if (WIFEXITED(status_)) result.exit_code = WEXITSTATUS(status_);
            if (WIFSIGNALED(status_)) result.signal = WTERMSIG(status_);
        }
        if (term_sent_ && !kill_sent_) ::kill(-pid_, SIGKILL);  // what is left of the group
    }

private:
    static int ms_until(Clock::time_point now, Clock::time_point t) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
        return static_cast<int>(std::clamp<long long>(ms, 0, 60000));
    }

    pid_t pid_;
    bool has_deadline_;
    Clock::time_point deadline_;
    Clock::time_point kill_at_ = Clock::time_point::max();    // SIGKILL after SIGTERM
    Clock::time_point killed_at_ = Clock::time_point::max();  // when SIGKILL went out
    Clock::time_point reaped_at_ = Clock::time_point::max();  // when the child itself was reaped
    bool term_sent_ = false, kill_sent_ = false, reaped_ = false;
    int status_ = 0;
};

// The parent's side of the streams: output kept up to max_output_bytes per stream (the rest read
// and dropped), stdin written as the child takes it.
class StreamPump {
public:
    StreamPump(Pipes& pipes, const ProcessOptions& options, ProcessResult& result)
        : p_(pipes), options_(options), result_(result) {
        if (p_.in_parent.fd >= 0) ::fcntl(p_.in_parent.fd, F_SETFL, ::fcntl(p_.in_parent.fd, F_GETFL) | O_NONBLOCK);
    }

    // Waits up to wait_ms for the streams, then reads / writes what is ready. False: poll failed.
    bool step(int wait_ms) {
        pollfd fds[3];
        int nfds = 0;
        int idx_out = -1, idx_err = -1, idx_in = -1;
        if (p_.out_read.fd >= 0) { idx_out = nfds; fds[nfds++] = {p_.out_read.fd, POLLIN, 0}; }
        if (p_.err_read.fd >= 0) { idx_err = nfds; fds[nfds++] = {p_.err_read.fd, POLLIN, 0}; }
        if (p_.in_parent.fd >= 0) { idx_in = nfds; fds[nfds++] = {p_.in_parent.fd, POLLOUT, 0}; }
        const int n = ::poll(fds, static_cast<nfds_t>(nfds), wait_ms);
        if (n < 0) return errno == EINTR;
        if (n == 0) return true;
        drain(fds, idx_out, p_.out_read, result_.out);
        drain(fds, idx_err, p_.err_read, result_.err);
        if (idx_in >= 0 && (fds[idx_in].revents & (POLLOUT | POLLHUP | POLLERR))) feed_stdin();
        return true;
    }

private:
    void keep(std::string& dst, const char* data, std::size_t n) {
        const std::size_t room = dst.size() < options_.max_output_bytes ? options_.max_output_bytes - dst.size() : 0;
        if (n > room) result_.truncated = true;
        dst.append(data, std::min(n, room));
    }
    void drain(const pollfd* fds, int idx, Fd& fd, std::string& dst) {
        if (idx < 0 || !(fds[idx].revents & (POLLIN | POLLHUP | POLLERR))) return;
        const ssize_t r = ::read(fd.fd, buf_, sizeof buf_);
        if (r > 0) keep(dst, buf_, static_cast<std::size_t>(r));
        else if (r == 0 || (errno != EINTR && errno != EAGAIN)) fd.reset();
    }
    void feed_stdin() {
        const std::string& data = options_.stdin_data;
        const ssize_t w = ::send(p_.in_parent.fd, data.data() + in_off_, data.size() - in_off_, MSG_NOSIGNAL);
        if (w > 0) in_off_ += static_cast<std::size_t>(w);
        if ((w < 0 && errno != EINTR && errno != EAGAIN) || in_off_ >= data.size()) p_.in_parent.reset();
    }

    Pipes& p_;
    const ProcessOptions& options_;
    ProcessResult& result_;
    std::size_t in_off_ = 0;
    char buf_[65536];
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
    auto elapsed = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0); };

    Pipes pipes(!options.stdin_data.empty());
    pid_t pid = 0;
    std::optional<GroupGuard> group;
    if (const int rc = spawn_child(argv, options, pipes, pid, group); rc != 0) {
        result.start_error = argv[0] + ": " + std::strerror(rc);
        result.elapsed = elapsed();
        return result;
    }
    result.started = true;

    // Read its output (and feed its input) until the pipes close or the child must be given up on.
    Child child(pid, t0, options.timeout);
    StreamPump pump(pipes, options, result);
    while (pipes.any_open()) {
        const auto now = Clock::now();
        if (!child.supervise_while_reading(now, options, result)) break;
        if (!pump.step(child.poll_timeout_ms(now))) break;
    }
    pipes.close_parent_ends();

    child.reap(result);
    child.collect(result);
    result.elapsed = elapsed();
    return result;
}

}  // namespace mds
