// mds::Error: the one exception type libcore throws for bad input or failed I/O, carrying the
// context a user needs (file, line or byte offset, field, expected vs found). Tools catch it in
// mds::run_tool (tool.h), print `mds-<tool>: error: ...` and exit 1.
#pragma once

#include <stdexcept>
#include <string>

namespace mds {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A wrong combination of flags or arguments: the tool exits 2, as for a parse error.
class UsageError : public Error {
public:
    explicit UsageError(const std::string& what) : Error(what) {}
};

// "what: strerror(errno)" for a failed system call.
std::string errno_message(const std::string& what, int err);

}  // namespace mds
