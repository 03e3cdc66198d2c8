// run_process: posix_spawnp with captured output and a deadline (process.h).
#include "mds/util/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

}  // namespace

std::string ProcessResult::describe() const {
    if (!started) return "could not start: " + start_error;
    if (timed_out) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "timed out after %.1f s", static_cast<double>(elapsed.count()) / 1000.0);
        return buf;
    }
    if (signal != 0) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
    return "exit status " + std::to_string(exit_code);
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
    if (argv.empty()) throw std::invalid_argument("run_process: empty argv");
    ProcessResult result;
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
    const int rc = ::posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), envp.data());
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
    const bool has_deadline = options.timeout.count() > 0;
    const auto deadline = t0 + options.timeout;
    auto kill_at = Clock::time_point::max();
    bool term_sent = false, kill_sent = false;
    char buf[65536];

    auto keep = [&](std::string& dst, const char* data, std::size_t n) {
        const std::size_t room = dst.size() < options.max_output_bytes ? options.max_output_bytes - dst.size() : 0;
        if (n > room) result.truncated = true;
        dst.append(data, std::min(n, room));
    };

    while (out_read.fd >= 0 || err_read.fd >= 0 || in_parent.fd >= 0) {
        pollfd fds[3];
        int nfds = 0;
        int idx_out = -1, idx_err = -1, idx_in = -1;
        if (out_read.fd >= 0) { idx_out = nfds; fds[nfds++] = {out_read.fd, POLLIN, 0}; }
        if (err_read.fd >= 0) { idx_err = nfds; fds[nfds++] = {err_read.fd, POLLIN, 0}; }
        if (in_parent.fd >= 0) { idx_in = nfds; fds[nfds++] = {in_parent.fd, POLLOUT, 0}; }
        int wait_ms = -1;
        const auto now = Clock::now();
        if (has_deadline && !term_sent) {
            if (now >= deadline) {
                ::kill(-pid, SIGTERM);
                term_sent = true;
                result.timed_out = true;
                kill_at = now + std::chrono::seconds(2);
            } else {
                wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
            }
        }
        if (term_sent && !kill_sent) {
            if (now >= kill_at) {
                ::kill(-pid, SIGKILL);
                kill_sent = true;
            } else {
                wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - now).count()) + 1;
            }
        }
        if (kill_sent) {
            // Descendants that escaped the group may hold the pipes open (and keep writing): read
            // what is there for at most half a second more, then stop.
            if (now >= kill_at + std::chrono::milliseconds(500)) break;
            wait_ms = 100;
        }
        const int n = ::poll(fds, static_cast<nfds_t>(nfds), wait_ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (n == 0) {
            if (kill_sent) break;
            continue;
        }
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

    // The pipes are closed; the child may still run (it closed them itself): wait, still bounded.
    int status = 0;
    for (;;) {
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            status = -1;
            break;
        }
        const auto now = Clock::now();
        if (has_deadline && !term_sent && now >= deadline) {
            ::kill(-pid, SIGTERM);
            term_sent = true;
            result.timed_out = true;
            kill_at = now + std::chrono::seconds(2);
        }
        if (term_sent && !kill_sent && now >= kill_at) {
            ::kill(-pid, SIGKILL);
            kill_sent = true;
        }
        ::usleep(10000);
    }
    if (status != -1) {
        if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
    }
    if (!kill_sent && term_sent) ::kill(-pid, SIGKILL);  // what is left of the group
    result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    return result;
}

}  // namespace mds
