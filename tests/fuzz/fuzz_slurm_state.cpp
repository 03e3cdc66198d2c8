// Fuzzes mds-slurm-status's state file reader (slurm/watch.h load_state): the file a previous run
// wrote, or a damaged, hand-edited or wrong --state-file. Invariants: only mds::Error escapes (never
// a nlohmann::json exception, a crash or a deep recursion); a state that loads is saved and loads
// back the same.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "mds/slurm/watch.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::slurm;
    static const std::string path = mds::fuzz::scratch_path("state.json");
    static const std::string again = mds::fuzz::scratch_path("state-again.json");
    mds::fuzz::write_bytes(path, data, size);
    mds::fuzz::only_mds_errors([&] {
        const WatchState s = load_state(path);
        save_state(again, s);
        const WatchState t = load_state(again);
        MDS_FUZZ_CHECK(t.unreachable_runs == s.unreachable_runs);
        MDS_FUZZ_CHECK(t.log_path == s.log_path && t.log_iteration == s.log_iteration);
        MDS_FUZZ_CHECK(t.log_offset == s.log_offset && t.log_seen_at == s.log_seen_at);
        MDS_FUZZ_CHECK(t.alerts.size() == s.alerts.size());
        for (const auto& [key, rec] : s.alerts) {
            const auto it = t.alerts.find(key);
            MDS_FUZZ_CHECK(it != t.alerts.end());
            MDS_FUZZ_CHECK(it->second.first_seen == rec.first_seen && it->second.last_notified == rec.last_notified);
            MDS_FUZZ_CHECK(it->second.text == rec.text);
        }
    });
    return 0;
}
