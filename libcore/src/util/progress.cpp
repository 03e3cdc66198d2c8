#include "mds/util/progress.h"

#include <unistd.h>  // isatty

#include <cstdio>

#include "mds/util/tool.h"

namespace mds {

std::string format_duration(double s) {
    if (s < 0) s = 0;
    auto t = static_cast<long long>(s + 0.5);
    char buf[32];
    if (t >= 3600)
        std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t / 60) % 60);
    else if (t >= 60)
        std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
    else
        std::snprintf(buf, sizeof buf, "%llds", t);
    return buf;
}

Progress::Progress(std::string what, std::uint64_t total_bytes, Mode mode, double line_interval_s)
    : what_(std::move(what)), total_bytes_(total_bytes), mode_(mode), line_interval_s_(line_interval_s),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {
    if (mode_ == Mode::Auto) mode_ = ::isatty(2) ? Mode::Bar : Mode::Lines;
}

Progress::~Progress() { finish(); }

double Progress::elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(std::uint64_t items, std::uint64_t bytes_done, std::uint64_t raw_bytes_done) {
    items_ = items;
    bytes_ = bytes_done;
    raw_bytes_ = raw_bytes_done;
    if (mode_ == Mode::Off) return;
    auto now = std::chrono::steady_clock::now();
    double since = std::chrono::duration<double>(now - last_draw_).count();
    double interval = mode_ == Mode::Bar ? 0.2 : line_interval_s_;
    if (since < interval) return;
    last_draw_ = now;
    draw(false);
}

void Progress::draw(bool final) {
    double t = elapsed_s();
    double rate_items = t > 0 ? static_cast<double>(items_) / t : 0;
    double rate_bytes = t > 0 ? static_cast<double>(bytes_) / t : 0;
    char head[160];
    std::snprintf(head, sizeof head, "%llu %s, %s, %.0f %s/s, %s/s",
                  static_cast<unsigned long long>(items_), what_.c_str(), format_bytes(static_cast<double>(bytes_)).c_str(),
                  rate_items, what_.c_str(), format_bytes(rate_bytes).c_str());
    std::string line = head;
    double frac = -1;
    if (total_bytes_ > 0) {
        frac = static_cast<double>(raw_bytes_) / static_cast<double>(total_bytes_);
        if (frac > 1) frac = 1;
        char tail[64];
        double eta = frac > 0 ? t * (1 - frac) / frac : 0;
        std::snprintf(tail, sizeof tail, ", %5.1f%%, ETA %s", 100 * frac, format_duration(eta).c_str());
        line += tail;
    }
    if (mode_ == Mode::Bar) {
        std::string bar;
        if (frac >= 0) {
            constexpr int kWidth = 24;
            int filled = static_cast<int>(frac * kWidth);
            bar = "[";
            bar.append(static_cast<std::size_t>(filled), '#');
            bar.append(static_cast<std::size_t>(kWidth - filled), '.');
            bar += "] ";
        }
        std::fprintf(stderr, "\r\033[K%s%s", bar.c_str(), line.c_str());
        drawn_ = true;
    } else if (!final) {
        print_info(line);
    }
    std::fflush(stderr);
}

void Progress::finish() {
    if (finished_) return;
    finished_ = true;
    if (mode_ == Mode::Bar && drawn_) {
        std::fprintf(stderr, "\r\033[K");
        std::fflush(stderr);
    }
}

}  // namespace mds
