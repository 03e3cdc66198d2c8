// Progress on stderr for long work: a redrawn bar with rate and ETA when stderr is a terminal,
// plain periodic lines otherwise (SLURM output files), nothing when quiet.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "mds/util/text.h"  // format_bytes, which the lines print

namespace mds {

class Progress {
public:
    enum class Mode { Auto, Bar, Lines, Off };

    // `what` names the items ("documents"); `total_bytes` (0 = unknown) enables the ETA.
    Progress(std::string what, std::uint64_t total_bytes, Mode mode = Mode::Auto,
             double line_interval_s = 30.0);
    ~Progress();

    // Reports the state; cheap to call often (draws at most a few times per second).
    void update(std::uint64_t items, std::uint64_t bytes_done, std::uint64_t raw_bytes_done);
    // Clears the bar (terminal mode) so the summary prints on a clean line.
    void finish();

    double elapsed_s() const;

private:
    void draw(bool final);

    std::string what_;
    std::uint64_t total_bytes_;
    Mode mode_;
    double line_interval_s_;
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::time_point last_draw_;
    std::uint64_t items_ = 0, bytes_ = 0, raw_bytes_ = 0;
    bool drawn_ = false;
    bool finished_ = false;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace mds
