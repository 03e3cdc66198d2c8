// What the flags area's files share (private to it): the rows of the flag table, the number format of its
// help defaults, and the checks that end in a UsageError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mds/flags/flag_table.h"
#include "mds/util/error.h"

namespace mds::flags {

std::vector<FlagRow> megatron_flag_rows();

// A double as the help's "[default: ...]" and the error messages write it (C++ stream form: 1e-05).
std::string format_number(double v);

// A bad command line: throws UsageError(what).
[[noreturn]] inline void usage(const std::string& what) { throw UsageError(what); }

inline std::string text(std::int64_t v) { return std::to_string(v); }

// "FLAG must be positive, got V" unless v > 0.
inline void positive(const std::string& flag, std::int64_t v) {
    if (v <= 0) usage(flag + " must be positive, got " + text(v));
}

}  // namespace mds::flags
