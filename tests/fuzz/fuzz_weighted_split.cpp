// Fuzzes the parsers of Megatron-DeepSpeed's weighted split paths (data/weighted_split.h), what
// mds-train reads from --(train|valid|test)-weighted-split-paths[-path]. The first byte picks the
// flag (train, valid, test) and whether the rest is a -path file or the flag's values (one per
// line). Invariants: only mds::Error escapes; a parsed group has as many weights, ranges and paths,
// at least one of each; the training flag gives one group; every range of a parsed group, cut for a
// dataset of n documents, lies within [0, n].
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "mds/data/weighted_split.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::data;
    if (size < 2) return 0;
    const int split = data[0] % 3;
    const bool from_file = (data[0] / 3) % 2 == 1;
    const std::int64_t documents = data[1];
    const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
    const std::string flag = weighted_split_flag(split);
    mds::fuzz::only_mds_errors([&] {
        std::vector<std::string> values;
        if (from_file) {
            const std::string path = mds::fuzz::scratch_path("splits.txt");
            mds::fuzz::write_bytes(path, text.data(), text.size());
            values = read_weighted_split_paths_file(flag + "-path", path);
        } else {
            std::size_t start = 0;
            while (start <= text.size()) {
                const std::size_t end = std::min(text.find('\n', start), text.size());
                values.emplace_back(text.substr(start, end - start));
                start = end + 1;
            }
        }
        const auto groups = parse_weighted_split_paths(flag, values);
        if (split == 0) MDS_FUZZ_CHECK(groups.size() == 1);
        for (const auto& g : groups) {
            MDS_FUZZ_CHECK(!g.paths.empty());
            MDS_FUZZ_CHECK(g.weights.size() == g.paths.size() && g.splits.size() == g.paths.size());
            for (const auto& range : g.splits)
                mds::fuzz::only_mds_errors([&] {
                    const auto r = get_split_by_range(range, documents, g.name);
                    MDS_FUZZ_CHECK(0 <= r[0] && r[0] <= r[1] && r[1] <= documents);
                });
        }
    });
    return 0;
}
