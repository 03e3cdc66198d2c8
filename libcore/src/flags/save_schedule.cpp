#include "mds/flags/save_schedule.h"

#include <algorithm>

#include "mds/util/error.h"
#include "mds/util/int_range.h"

namespace mds::flags {

namespace {

constexpr const char* kForm = "expected an integer N >= 1 or a comma list of N@A-B items (interval N for iterations A "
                              "to B, 1 <= A <= B) and at most one bare N";

std::string_view trim(std::string_view s) {
    const auto space = [](char c) { return c == ' ' || c == '\t'; };
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    return s;
}

class Parser {
public:
    Parser(std::string_view text, std::string_view flag) : text_(text), flag_(flag) {}

    [[noreturn]] void fail(std::string_view item, const std::string& problem) const {
        std::string where = std::string(flag_) + " '" + std::string(text_) + "'";
        if (item != text_) where += ": item '" + std::string(item) + "'";
        throw UsageError(where + ": " + problem);
    }

    // A decimal number as Python's int() reads one (single underscores between digits allowed);
    // `what` names it in errors ("the interval").
    std::int64_t number(std::string_view item, std::string_view s, const std::string& what) const {
        const auto v = parse_whole_number(s, true);
        if (!v) fail(item, what + " " + whole_number_problem(s) + "; " + kForm);
        if (*v < 1) fail(item, what + " must be at least 1, found " + std::string(s));
        return *v;
    }

    SaveRange range(std::string_view item) const {
        const auto at = item.find('@');
        const std::string_view span = item.substr(at + 1);
        if (span.empty()) fail(item, std::string("the iteration range after '@' is missing; ") + kForm);
        SaveRange r;
        r.interval = number(item, item.substr(0, at), "the interval");
        const IntRangeParse p = parse_int_range(span, false, true);
        if (!p.problem.empty()) fail(item, "the iteration range '" + std::string(span) + "': " + p.problem + "; " + kForm);
        if (p.range.first < 1) fail(item, "the range start must be at least 1, found " + std::to_string(p.range.first));
        r.first = p.range.first;
        r.last = p.range.last;
        return r;
    }

private:
    std::string_view text_;
    std::string_view flag_;
};

std::string range_text(const SaveRange& r) {
    return std::to_string(r.interval) + "@" + std::to_string(r.first) + "-" + std::to_string(r.last);
}

}  // namespace

SaveSchedule SaveSchedule::every(std::int64_t interval) {
    if (interval < 1) throw UsageError("--save-interval must be at least 1, got " + std::to_string(interval));
    SaveSchedule s;
    s.default_ = interval;
    return s;
}

std::optional<std::int64_t> SaveSchedule::interval_at(std::int64_t iteration) const {
    // The first range that ends at or after `iteration` covers it if it starts at or before it.
    const auto it = std::lower_bound(ranges_.begin(), ranges_.end(), iteration,
                                     [](const SaveRange& r, std::int64_t i) { return r.last < i; });
    if (it != ranges_.end() && it->first <= iteration) return it->interval;
    return default_;
}

bool SaveSchedule::due(std::int64_t iteration) const {
    const auto n = interval_at(iteration);
    return n && iteration % *n == 0;
}

std::string SaveSchedule::to_string() const {
    std::string out;
    auto item = [&out](const std::string& text) {
        if (!out.empty()) out += ',';
        out += text;
    };
    for (const auto& r : ranges_) item(range_text(r));
    if (default_) item(std::to_string(*default_));
    return out;
}

SaveSchedule parse_save_schedule(std::string_view text, std::string_view flag) {
    const Parser p(text, flag);
    if (trim(text).empty()) p.fail(text, std::string("empty; ") + kForm);
    SaveSchedule s;
    std::vector<std::string_view> items;
    for (std::size_t start = 0;;) {
        const auto comma = text.find(',', start);
        items.push_back(trim(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    for (std::size_t k = 0; k < items.size(); ++k) {
        const std::string_view item = items[k];
        if (item.empty()) p.fail(text, "item " + std::to_string(k + 1) + " is empty; " + kForm);
        if (item.find('@') == std::string_view::npos) {
            const std::int64_t n = p.number(item, item, "the interval");
            if (s.default_)
                p.fail(item, "a second bare interval (the first is " + std::to_string(*s.default_) +
                                 "); at most one N applies outside the N@A-B ranges");
            s.default_ = n;
        } else {
            s.ranges_.push_back(p.range(item));
        }
    }
    std::sort(s.ranges_.begin(), s.ranges_.end(), [](const SaveRange& a, const SaveRange& b) { return a.first < b.first; });
    for (std::size_t k = 1; k < s.ranges_.size(); ++k) {
        const SaveRange& a = s.ranges_[k - 1];
        const SaveRange& b = s.ranges_[k];
        if (a.last >= b.first)
            p.fail(text, "the ranges " + range_text(a) + " and " + range_text(b) + " overlap (iteration " +
                             std::to_string(b.first) + " is in both); expected disjoint ranges");
    }
    return s;
}

bool save_due(const std::optional<SaveSchedule>& schedule, std::int64_t iteration) {
    return schedule && schedule->due(iteration);
}

}  // namespace mds::flags
