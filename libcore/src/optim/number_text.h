// Shortest round-trip text of a double (as Python's repr), for error messages of the optim area.
#pragma once

#include <charconv>  // std::to_chars: shortest representation that reads back to the same double
#include <string>

namespace mds::optim::detail {

inline std::string number_text(double v) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, res.ptr);
}

}  // namespace mds::optim::detail
