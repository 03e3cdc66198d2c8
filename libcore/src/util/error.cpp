#include "mds/util/error.h"

#include <cstring>  // strerror

namespace mds {

std::string errno_message(const std::string& what, int err) {
    return what + ": " + std::strerror(err);
}

}  // namespace mds
