// mds-report: a training's outputs (main_log.txt, TensorBoard events, emissions.csv, the run
// ledger) turned into one self-contained HTML page — inline CSS, inline SVG charts against consumed
// tokens, each chart followed by a table of its values, no script — and optionally the charts as
// .svg files for a README. docs/mds-report.md describes the page.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mds/report/chart.h"
#include "mds/report/run_files.h"
#include "mds/report/tfevents_reader.h"
#include "mds/report/training_log.h"

namespace mds::report {

// The files a report reads, by kind, each list sorted by path.
struct ReportFiles {
    std::vector<std::string> logs;       // main_log*.txt, *.log, or any file named on the command line
    std::vector<std::string> events;     // events.out.tfevents.*
    std::vector<std::string> emissions;  // emissions.csv (*.csv on the command line)
    std::vector<std::string> ledgers;    // runs.jsonl (*.jsonl on the command line)
    std::size_t count() const { return logs.size() + events.size() + emissions.size() + ledgers.size(); }
};

// Files are taken as they are named (the kind from the name); folders are searched recursively
// for main_log*.txt, *.log, events.out.tfevents.*, emissions.csv and runs.jsonl. Throws
// mds::UsageError for a path that does not exist or when nothing is found.
ReportFiles find_report_files(const std::vector<std::string>& inputs);

struct ReportSources {
    std::vector<TrainingLog> logs;
    std::vector<std::pair<std::string, EventFileScalars>> events;
    std::vector<std::pair<std::string, std::vector<EmissionsRow>>> emissions;
    std::vector<std::pair<std::string, std::vector<LedgerJob>>> ledgers;
};

// Reads every file; errors name the file (and line or byte offset).
ReportSources read_report_sources(const ReportFiles& files);

struct ReportAlert {
    std::int64_t iteration = 0;
    std::string text;
};

struct Report {
    std::string title;
    std::vector<std::pair<std::string, std::string>> summary;  // (what, value) rows
    std::vector<Chart> charts;  // only those with data
    std::vector<ReportAlert> alerts;
    std::vector<LedgerJob> jobs;
    std::vector<std::string> sources;  // one line per file read
};

// The series of the page. Iterations logged twice (a job that went back to an older checkpoint)
// keep the value logged last. The x axis is consumed tokens when the log (or TensorBoard's
// steps-vs-tokens) gives them, else iterations.
Report build_report(const ReportSources& sources, const std::string& title);

// The page: one HTML document with no external reference and no script. A series with more than
// `max_table_rows` points (0: no limit) lists every k-th of them in its value table (the last one
// always), so that a long training's page stays a few megabytes; its chart draws them all.
std::string render_report_html(const Report& report, std::size_t max_table_rows = 0);

// A number as the page's value tables print it: the shortest text that reads back to the same
// double ("2.5e-05", "5.123456"); whole numbers below 2^53 without a fraction.
std::string format_value(double v);

struct ReportOptions {
    std::vector<std::string> inputs;
    std::string output = "report.html";
    std::string svg_dir;  // "" = no .svg files
    std::string title;    // "" = "Training report"
    std::size_t max_table_rows = 5000;  // per series in the value tables; 0 = all
};

struct ReportResult {
    ReportFiles files;
    std::size_t charts = 0;
    std::size_t svg_files = 0;
    std::size_t iterations = 0;  // iteration records shown
};

// find_report_files → read_report_sources → build_report → the page (and the .svg files) written
// through a temporary and renamed into place.
ReportResult write_report(const ReportOptions& options);

}  // namespace mds::report
