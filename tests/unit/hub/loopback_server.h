// A scripted HTTP/1.1 server on 127.0.0.1 for the hub unit tests: each request (method, target,
// headers, Content-Length body) goes to a handler that returns the answer. Keep-alive, one thread
// per connection (each HttpClient holds its own), every request recorded. Enough for what libcurl
// sends mds's HTTP client (no chunked bodies: every body has a Content-Length).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mds::test {

struct HttpExchange {
    std::string method, target, body;
    std::map<std::string, std::string> headers;  // names in lower case
};

struct HttpReply {
    long status = 200;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};

class LoopbackServer {
public:
    using Handler = std::function<HttpReply(const HttpExchange&)>;

    explicit LoopbackServer(Handler handler) : handler_(std::move(handler)) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(listen_fd_, 16) != 0 || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
            throw std::runtime_error("loopback server: cannot listen");
        port_ = ntohs(a.sin_port);
        acceptor_ = std::thread([this] { accept_loop(); });
    }

    ~LoopbackServer() {
        stop_ = true;
        acceptor_.join();
        {
            std::lock_guard<std::mutex> g(mu_);
            for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
        }
        for (auto& t : workers_) t.join();
        for (int fd : conns_) ::close(fd);
        ::close(listen_fd_);
    }
    LoopbackServer(const LoopbackServer&) = delete;
    LoopbackServer& operator=(const LoopbackServer&) = delete;

    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

    std::vector<HttpExchange> requests() const {
        std::lock_guard<std::mutex> g(mu_);
        return log_;
    }

private:
    void accept_loop() {
        while (!stop_) {
            pollfd p{listen_fd_, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) continue;
            const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) continue;
            std::lock_guard<std::mutex> g(mu_);
            conns_.push_back(fd);
            workers_.emplace_back([this, fd] { serve(fd); });
        }
    }

    // Reads until `buf` holds `n` bytes; false when the peer closed first.
    static bool fill(int fd, std::string& buf, std::size_t n) {
        char chunk[16384];
        while (buf.size() < n) {
            const ssize_t r = ::recv(fd, chunk, sizeof chunk, 0);
            if (r <= 0) return false;
            buf.append(chunk, static_cast<std::size_t>(r));
        }
        return true;
    }

    void serve(int fd) {
        std::string buf;
        for (;;) {
            std::size_t end;
            while ((end = buf.find("\r\n\r\n")) == std::string::npos)
                if (!fill(fd, buf, buf.size() + 1)) return;
            HttpExchange x;
            const std::string head = buf.substr(0, end);
            buf.erase(0, end + 4);
            std::size_t line_end = head.find("\r\n");
            const std::string request_line = head.substr(0, line_end);
            const auto sp1 = request_line.find(' '), sp2 = request_line.rfind(' ');
            x.method = request_line.substr(0, sp1);
            x.target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
            while (line_end != std::string::npos && line_end < head.size()) {
                const std::size_t next = head.find("\r\n", line_end + 2);
                const std::string line = head.substr(line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
                const auto colon = line.find(':');
                if (colon != std::string::npos) {
                    std::string name = line.substr(0, colon), value = line.substr(colon + 1);
                    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
                    while (!value.empty() && value.front() == ' ') value.erase(value.begin());
                    x.headers[name] = value;
                }
                line_end = next;
            }
            const std::size_t length = x.headers.count("content-length") ? std::stoul(x.headers["content-length"]) : 0;
            if (!fill(fd, buf, length)) return;
            x.body = buf.substr(0, length);
            buf.erase(0, length);
            HttpReply reply = handler_(x);
            {
                std::lock_guard<std::mutex> g(mu_);
                log_.push_back(x);
            }
            std::string out = "HTTP/1.1 " + std::to_string(reply.status) + " Status\r\nContent-Length: " +
                              std::to_string(reply.body.size()) + "\r\nContent-Type: application/json\r\n";
            for (const auto& [k, v] : reply.headers) out += k + ": " + v + "\r\n";
            out += "\r\n";
            if (x.method != "HEAD") out += reply.body;
            for (std::size_t off = 0; off < out.size();) {
                const ssize_t w = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
                if (w <= 0) return;
                off += static_cast<std::size_t>(w);
            }
        }
    }

    Handler handler_;
    int listen_fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread acceptor_;
    mutable std::mutex mu_;
    std::vector<int> conns_;
    std::vector<std::thread> workers_;
    std::vector<HttpExchange> log_;
};

}  // namespace mds::test
