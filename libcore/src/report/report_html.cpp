// The page (report.h): one HTML document, CSS inline, charts as inline SVG, each chart followed by
// a collapsed table of its values (so the numbers can be read, searched and copied, and a test can
// read them back from the DOM). Nothing is loaded from elsewhere and nothing needs a script.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "mds/util/text.h"  // python_float_repr
#include "mds/report/report.h"
#include "mds/util/error.h"
#include "mds/util/files.h"  // write_file_atomic

namespace mds::report {

namespace {

constexpr const char* kStyle = R"(
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 24px auto; max-width: 800px; color: #222; background: #fff; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: left; }
th { background: #f4f4f4; }
table.values td:nth-child(n+2) { text-align: right; font-family: "DejaVu Sans Mono", monospace; }
section.chart { margin: 18px 0; }
details { margin: 4px 0 0 8px; font-size: 13px; }
ul.alerts li { color: #a01010; font-family: "DejaVu Sans Mono", monospace; font-size: 12px; }
.sources { font-size: 12px; color: #555; }
)";

std::string esc(std::string_view s) { return escape_xml(s); }

std::string values_table(const Chart& c, std::size_t max_rows) {
    std::size_t n = 0, shown = 0;
    auto stride = [&](const ChartSeries& s) {
        return max_rows == 0 || s.points.size() <= max_rows ? std::size_t{1} : (s.points.size() + max_rows - 1) / max_rows;
    };
    for (const auto& s : c.series) {
        n += s.points.size();
        const std::size_t k = stride(s);
        shown += (s.points.size() + k - 1) / k + ((s.points.size() - 1) % k != 0 ? 1 : 0);
    }
    const bool by_iteration = c.series.empty() || c.series.front().points.empty() || c.series.front().points.front().iteration >= 0;
    const std::string count = shown == n ? std::to_string(n) : std::to_string(shown) + " of " + std::to_string(n) + ", evenly spaced";
    std::string o = "<details><summary>values (" + count + ")</summary>\n<table class=\"values\" data-chart=\"" +
                    esc(c.id) + "\"><thead><tr><th>series</th>" + (by_iteration ? "<th>iteration</th>" : "") + "<th>" +
                    esc(c.x_label) + "</th><th>" + esc(c.y_label) + "</th></tr></thead><tbody>\n";
    for (const auto& s : c.series) {
        const std::size_t k = stride(s);
        for (std::size_t i = 0; i < s.points.size(); ++i) {
            if (i % k != 0 && i + 1 != s.points.size()) continue;
            const ChartPoint& p = s.points[i];
            o += "<tr data-series=\"" + esc(s.name) + "\"><td>" + esc(s.name) + "</td>";
            if (by_iteration) o += "<td>" + std::to_string(p.iteration) + "</td>";
            o += "<td>" + format_value(p.x) + "</td><td>" + format_value(p.y) + "</td></tr>\n";
        }
    }
    return o + "</tbody></table></details>\n";
}

std::string job_rows(const std::vector<LedgerJob>& jobs) {
    std::string o = "<table class=\"jobs\"><thead><tr><th>run</th><th>job</th><th>hosts</th><th>start</th><th>end</th>"
                    "<th>iterations</th><th>stop</th></tr></thead><tbody>\n";
    for (const auto& j : jobs) {
        std::string hosts;
        for (const auto& h : j.hosts) hosts += (hosts.empty() ? "" : ", ") + h;
        o += "<tr><td>" + esc(j.run_id) + "</td><td>" + esc(j.job_id.value_or("")) + "</td><td>" + esc(hosts) + "</td><td>" +
             esc(j.start_time) + "</td><td>" + esc(j.end_time.value_or(j.status)) + "</td><td>" +
             std::to_string(j.resumed_iteration + 1) + "–" + std::to_string(j.iteration) + "</td><td>" +
             esc(j.stop.value_or("")) + "</td></tr>\n";
    }
    return o + "</tbody></table>\n";
}

}  // namespace

std::string format_value(double v) {
    if (std::isfinite(v) && v == std::trunc(v) && std::abs(v) < 9007199254740992.0) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.0f", v);
        return buf;
    }
    return python_float_repr(v);
}

std::string render_report_html(const Report& r, std::size_t max_table_rows) {
    std::string o = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + esc(r.title) +
                    "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
    o += "<h1>" + esc(r.title) + "</h1>\n<table class=\"summary\">\n";
    for (const auto& [k, v] : r.summary) o += "<tr><th>" + esc(k) + "</th><td>" + esc(v) + "</td></tr>\n";
    o += "</table>\n";
    if (!r.alerts.empty()) {
        o += "<h2>Alerts</h2>\n<ul class=\"alerts\">\n";
        for (const auto& a : r.alerts)
            o += "<li data-iteration=\"" + std::to_string(a.iteration) + "\">" + esc(a.text) + "</li>\n";
        o += "</ul>\n";
    }
    if (!r.jobs.empty()) o += "<h2>Jobs</h2>\n" + job_rows(r.jobs);
    o += "<h2>Charts</h2>\n";
    if (r.charts.empty()) o += "<p>No values to chart in these files.</p>\n";
    for (const auto& c : r.charts)
        o += "<section class=\"chart\" id=\"chart-" + esc(c.id) + "\">\n" + render_chart_svg(c) + values_table(c, max_table_rows) + "</section>\n";
    o += "<h2>Sources</h2>\n<ul class=\"sources\">\n";
    for (const auto& s : r.sources) o += "<li>" + esc(s) + "</li>\n";
    o += "</ul>\n</body>\n</html>\n";
    return o;
}

ReportResult write_report(const ReportOptions& options) {
    ReportResult result;
    result.files = find_report_files(options.inputs);
    const ReportSources sources = read_report_sources(result.files);
    const Report report = build_report(sources, options.title);
    for (const auto& log : sources.logs) result.iterations += log.iterations.size();
    result.charts = report.charts.size();
    if (!options.svg_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(options.svg_dir, ec);
        if (ec) throw Error("creating --svg-dir " + options.svg_dir + ": " + ec.message());
        for (const auto& c : report.charts) {
            write_file_atomic((std::filesystem::path(options.svg_dir) / (c.id + ".svg")).string(),
                              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + render_chart_svg(c));
            ++result.svg_files;
        }
    }
    write_file_atomic(options.output, render_report_html(report, options.max_table_rows));
    return result;
}

}  // namespace mds::report
