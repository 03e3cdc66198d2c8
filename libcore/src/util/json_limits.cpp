#include "mds/util/json_limits.h"

#include "mds/util/error.h"

namespace mds {

void check_json_depth(std::string_view text, const std::string& what, int max_depth) {
    int depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth)
                throw Error(what + ": JSON nested deeper than " + std::to_string(max_depth) + " levels (at byte " +
                            std::to_string(i) + ")");
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
}

}  // namespace mds
