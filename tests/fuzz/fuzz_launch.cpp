// Fuzzes the launch parsers of mds::dist (dist/launch.h). The first byte picks the parser: a SLURM
// host list, a tasks-per-node spec, or an environment of NUL-separated NAME=VALUE pairs for
// detect_launch. Invariants: only mds::Error escapes; host names are non-empty and bracket-free,
// at most 100,000 of them (16 MiB); tasks-per-node counts are >= 1; a detected launch has
// 0 <= rank < world_size, 0 <= local_rank < local_world_size and a port in 1..65535.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "mds/dist/launch.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::dist;
    if (size == 0 || size > 4096) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (data[0] % 3) {
        case 0:
            mds::fuzz::only_mds_errors([&] {
                const auto hosts = expand_hostlist(text);
                MDS_FUZZ_CHECK(hosts.size() <= 100'000);
                std::size_t bytes = 0;
                for (const auto& h : hosts) bytes += h.size();
                MDS_FUZZ_CHECK(bytes <= (16u << 20));
                for (const auto& h : hosts) {
                    MDS_FUZZ_CHECK(!h.empty());
                    MDS_FUZZ_CHECK(h.find_first_of("[],") == std::string::npos);
                }
            });
            break;
        case 1:
            mds::fuzz::only_mds_errors([&] {
                const auto tasks = expand_tasks_per_node(text);
                MDS_FUZZ_CHECK(!tasks.empty() && tasks.size() <= 100'000);
                for (int t : tasks) MDS_FUZZ_CHECK(t >= 1);
            });
            break;
        default: {
            std::map<std::string, std::string> env;
            std::size_t pos = 0;
            while (pos < text.size()) {
                auto end = text.find('\0', pos);
                if (end == std::string_view::npos) end = text.size();
                const auto pair = text.substr(pos, end - pos);
                const auto eq = pair.find('=');
                if (eq != std::string_view::npos) env[std::string(pair.substr(0, eq))] = std::string(pair.substr(eq + 1));
                pos = end + 1;
            }
            const EnvReader read = [&env](const char* name) -> const char* {
                const auto it = env.find(name);
                return it == env.end() ? nullptr : it->second.c_str();
            };
            mds::fuzz::only_mds_errors([&] {
                const auto l = detect_launch(read);
                MDS_FUZZ_CHECK(l.world_size >= 1 && l.rank >= 0 && l.rank < l.world_size);
                MDS_FUZZ_CHECK(l.local_world_size >= 1 && l.local_rank >= 0 && l.local_rank < l.local_world_size);
                MDS_FUZZ_CHECK(l.master_port >= 1 && l.master_port <= 65535);
                MDS_FUZZ_CHECK(!l.master_addr.empty());
            });
        }
    }
    return 0;
}
