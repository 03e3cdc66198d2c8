// Which files a report reads, and reading them (report.h).
#include <algorithm>
#include <filesystem>
#include <system_error>

#include "mds/report/report.h"
#include "mds/util/error.h"

namespace mds::report {

namespace fs = std::filesystem;

namespace {

enum class Kind { none, log, events, emissions, ledger };

// The kind of a file found inside a folder: only the names trainings give their outputs.
Kind kind_in_folder(const std::string& name) {
    if (name.starts_with(".")) return Kind::none;  // temporaries of writers (.name.tmp-...)
    if (name.starts_with("events.out.tfevents.")) return Kind::events;
    if (name == "emissions.csv") return Kind::emissions;
    if (name == "runs.jsonl") return Kind::ledger;
    if ((name.starts_with("main_log") && name.ends_with(".txt")) || name.ends_with(".log")) return Kind::log;
    return Kind::none;
}

// The kind of a file named on the command line: any name is taken, the kind from its name.
Kind kind_named(const std::string& name) {
    if (name.find("tfevents") != std::string::npos) return Kind::events;
    if (name.ends_with(".csv")) return Kind::emissions;
    if (name.ends_with(".jsonl")) return Kind::ledger;
    return Kind::log;
}

void add(ReportFiles& f, Kind kind, const std::string& path) {
    switch (kind) {
        case Kind::log: f.logs.push_back(path); break;
        case Kind::events: f.events.push_back(path); break;
        case Kind::emissions: f.emissions.push_back(path); break;
        case Kind::ledger: f.ledgers.push_back(path); break;
        case Kind::none: break;
    }
}

void sort_unique(std::vector<std::string>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

ReportFiles find_report_files(const std::vector<std::string>& inputs) {
    if (inputs.empty()) throw UsageError("no input: name a run folder or its files (main_log.txt, events.out.tfevents.*, emissions.csv, runs.jsonl)");
    ReportFiles files;
    for (const auto& input : inputs) {
        std::error_code ec;
        const auto status = fs::status(input, ec);
        if (ec || !fs::exists(status)) throw UsageError(input + ": no such file or folder");
        if (!fs::is_directory(status)) {
            add(files, kind_named(fs::path(input).filename().string()), input);
            continue;
        }
        fs::recursive_directory_iterator it(input, fs::directory_options::skip_permission_denied, ec), end;
        if (ec) throw Error(input + ": cannot list the folder: " + ec.message());
        for (; it != end; it.increment(ec)) {
            if (ec) throw Error(input + ": listing the folder: " + ec.message());
            std::error_code fe;
            if (!it->is_regular_file(fe)) continue;
            add(files, kind_in_folder(it->path().filename().string()), it->path().string());
        }
    }
    sort_unique(files.logs);
    sort_unique(files.events);
    sort_unique(files.emissions);
    sort_unique(files.ledgers);
    if (files.count() == 0)
        throw UsageError("no training outputs found in " + inputs.front() +
                         (inputs.size() > 1 ? " and the other inputs" : "") +
                         " (main_log*.txt, *.log, events.out.tfevents.*, emissions.csv, runs.jsonl)");
    return files;
}

ReportSources read_report_sources(const ReportFiles& files) {
    ReportSources s;
    for (const auto& p : files.logs) s.logs.push_back(read_training_log(p));
    for (const auto& p : files.events) s.events.emplace_back(p, read_event_file(p));
    for (const auto& p : files.emissions) s.emissions.emplace_back(p, read_emissions_csv(p));
    for (const auto& p : files.ledgers) s.ledgers.emplace_back(p, read_ledger_jobs(p));
    return s;
}

}  // namespace mds::report
