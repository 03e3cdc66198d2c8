// Fuzzes the SLURM output parsers of mds-slurm-status (slurm/squeue.h, slurm/watch.h). The first
// byte picks the parser: squeue --json, the delimited squeue text form, sacct -P, or one log line /
// duration / --watch-disk spec. Invariants: only mds::Error escapes; JSON jobs have a state and an
// id, text and sacct jobs a non-zero id; durations are never negative; a parsed --watch-disk spec
// has a path and thresholds in (0, 100].
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "mds/slurm/squeue.h"
#include "mds/slurm/watch.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::slurm;
    if (size == 0) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (data[0] % 4) {
        case 0:
            mds::fuzz::only_mds_errors([&] {
                const QueryResult q = parse_squeue_json(text);
                for (const Job& j : q.jobs) {
                    MDS_FUZZ_CHECK(!j.state.empty());
                    MDS_FUZZ_CHECK(!j.id.empty());
                }
            });
            break;
        case 1:
            mds::fuzz::only_mds_errors([&] {
                for (const Job& j : parse_squeue_text(text)) {
                    MDS_FUZZ_CHECK(j.job_id != 0);
                    if (j.elapsed_s) MDS_FUZZ_CHECK(*j.elapsed_s >= 0);
                }
            });
            break;
        case 2:
            mds::fuzz::only_mds_errors([&] {
                for (const Job& j : parse_sacct(text)) {
                    MDS_FUZZ_CHECK(j.job_id != 0);
                    if (j.elapsed_s) MDS_FUZZ_CHECK(*j.elapsed_s >= 0);
                }
            });
            break;
        default: {
            const std::string s(text);
            if (auto it = parse_iteration_line(s)) MDS_FUZZ_CHECK(s.find('|') != std::string::npos);
            if (auto d = parse_slurm_duration(text)) MDS_FUZZ_CHECK(*d >= 0);
            mds::fuzz::only_mds_errors([&] { (void)parse_slurm_time(text); });
            mds::fuzz::only_mds_errors([&] {
                const DiskWatch w = parse_disk_watch(s);
                MDS_FUZZ_CHECK(!w.path.empty());
                MDS_FUZZ_CHECK(w.max_percent > 0 && w.max_percent <= 100);
                MDS_FUZZ_CHECK(w.max_inode_percent > 0 && w.max_inode_percent <= 100);
            });
            break;
        }
    }
    return 0;
}
