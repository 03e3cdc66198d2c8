// Fuzzes mds-report's parsers (report/training_log.h, tfevents_reader.h, run_files.h). The first
// byte picks the input kind: a training log, a TensorBoard event file, emissions.csv or a run
// ledger. Invariants: the log parser never throws and keeps only lines with an `iteration N/M` head;
// the others let only mds::Error escape; whatever parses also builds a report and renders a page
// that starts as HTML and holds no script.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "mds/report/report.h"

namespace {

void render(const mds::report::ReportSources& sources) {
    const std::string page = mds::report::render_report_html(mds::report::build_report(sources, "fuzz"));
    MDS_FUZZ_CHECK(page.starts_with("<!DOCTYPE html>"));
    MDS_FUZZ_CHECK(page.find("<script") == std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::report;
    if (size == 0) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    ReportSources sources;
    switch (data[0] % 4) {
        case 0: {
            TrainingLog log = parse_training_log(text, "log");  // never throws
            MDS_FUZZ_CHECK(log.partial_bytes <= text.size());
            for (const auto& r : log.iterations) MDS_FUZZ_CHECK(r.line >= 1 && r.line <= log.lines);
            for (const auto& v : log.validations) MDS_FUZZ_CHECK(!v.set.empty());
            sources.logs.push_back(std::move(log));
            render(sources);
            break;
        }
        case 1:
            mds::fuzz::only_mds_errors([&] {
                EventFileScalars ev = parse_event_file(text, "events");
                MDS_FUZZ_CHECK(ev.truncated_bytes <= text.size());
                MDS_FUZZ_CHECK(ev.scalars.size() <= text.size());
                sources.events.emplace_back("events", std::move(ev));
                render(sources);
            });
            break;
        case 2:
            mds::fuzz::only_mds_errors([&] {
                sources.emissions.emplace_back("emissions.csv", parse_emissions_csv(text, "emissions.csv"));
                render(sources);
            });
            break;
        default:
            mds::fuzz::only_mds_errors([&] {
                sources.ledgers.emplace_back("runs.jsonl", parse_ledger(text, "runs.jsonl"));
                render(sources);
            });
            break;
    }
    return 0;
}
