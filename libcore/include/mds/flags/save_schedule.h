// SaveSchedule: --save-interval as Megatron's one integer or as a schedule of intervals over
// iteration ranges, "10@1-100,18@101-1000,1500" (tr1-13B's three rounds in one run). Within the
// range that covers an iteration the rule stays Megatron's `iteration % N == 0`, so a schedule of
// one integer saves exactly where Megatron would (docs/mds-train.md, "Save schedules and absolute
// exits").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::flags {

// Interval `interval` for iterations first..last (inclusive).
struct SaveRange {
    std::int64_t interval = 0;
    std::int64_t first = 0;
    std::int64_t last = 0;

    bool operator==(const SaveRange&) const = default;
};

class SaveSchedule {
public:
    // Megatron's --save-interval N: every iteration that is a multiple of N.
    static SaveSchedule every(std::int64_t interval);

    // The interval in effect at `iteration`: its range's, else the bare default, else none (no
    // periodic save there).
    std::optional<std::int64_t> interval_at(std::int64_t iteration) const;
    // Whether the periodic save falls on `iteration` (after it is trained).
    bool due(std::int64_t iteration) const;

    const std::vector<SaveRange>& ranges() const { return ranges_; }      // sorted, disjoint
    std::optional<std::int64_t> default_interval() const { return default_; }
    // The schedule as the flag takes it, ranges in order, the default last: "2@1-6,3@7-12,5".
    std::string to_string() const;

    bool operator==(const SaveSchedule&) const = default;

private:
    friend SaveSchedule parse_save_schedule(std::string_view text, std::string_view flag);
    std::vector<SaveRange> ranges_;
    std::optional<std::int64_t> default_;
};

// Parses an integer N or a comma list of N@A-B items and at most one bare N (spaces around an
// item are allowed; numbers are decimal, Python's "1_000" included). Requires N >= 1, 1 <= A <= B
// and ranges that do not overlap. Throws mds::UsageError naming `flag`, the item and what was
// expected.
SaveSchedule parse_save_schedule(std::string_view text, std::string_view flag = "--save-interval");

// mds-train's periodic save rule: false without a --save-interval.
bool save_due(const std::optional<SaveSchedule>& schedule, std::int64_t iteration);

}  // namespace mds::flags
