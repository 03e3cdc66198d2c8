// Fuzzes mds::JsonLineParser (util/json_line.h) with the keys {"text", "id"}.
// Invariants: only JsonError escapes, its offset lies inside the line; on success the text field
// is valid UTF-8; and whenever nlohmann::json (strict RFC 8259, a subset of what Python's
// json.loads accepts) parses the line into an object whose "text" and "id" are strings, our parser
// accepts it too and extracts the same values (lines with a NUL byte aside: nlohmann ends the
// input there).
#include <nlohmann/json.hpp>  // the reference parser for the differential check

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "mds/util/json_line.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static mds::JsonLineParser parser({"text", "id"});
    const std::string_view line(reinterpret_cast<const char*>(data), size);

    std::vector<std::string> values;
    bool ok = false;
    bool too_deep = false;  // Python stops near 1000 levels, we at 512; nlohmann has no limit
    mds::fuzz::only_mds_errors([&] {
        try {
            parser.parse(line, values);
            ok = true;
        } catch (const mds::JsonError& e) {
            MDS_FUZZ_CHECK(e.offset() <= size);
            too_deep = e.reason().rfind("nesting deeper", 0) == 0;
            throw;
        }
    });
    if (ok) {
        MDS_FUZZ_CHECK(values.size() == 2);
        MDS_FUZZ_CHECK(mds::utf8_valid_prefix(values[0]) == values[0].size());
    }

    const auto j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (too_deep || j.is_discarded() || !j.is_object()) return 0;
    if (line.find('\0') != std::string_view::npos) return 0;  // nlohmann stops at a NUL byte, as at the end
    auto text = j.find("text"), id = j.find("id");
    if (text == j.end() || id == j.end() || !text->is_string() || !id->is_string()) return 0;
    if (!ok) std::fprintf(stderr, "nlohmann::json accepts this line, JsonLineParser does not\n");
    MDS_FUZZ_CHECK(ok);
    MDS_FUZZ_CHECK(values[0] == text->get_ref<const std::string&>());
    MDS_FUZZ_CHECK(values[1] == id->get_ref<const std::string&>());
    return 0;
}
