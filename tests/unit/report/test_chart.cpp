// Chart pieces: nice ticks, tick labels, the SVG (series, breaks at NaN, marks, escaping), the
// emissions.csv and ledger readers, and the report model (tokens on x, later lines win).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "mds/report/chart.h"
#include "mds/report/report.h"
#include "mds/report/run_files.h"
#include "mds/util/error.h"

using namespace mds::report;

namespace {
std::size_t count(const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
}
}  // namespace

TEST_CASE("nice ticks cover the range in 1-2-5 steps") {
    auto t = nice_ticks(0, 97);
    CHECK(t.step == 20);
    CHECK(t.lo == 0);
    CHECK(t.hi == 100);
    CHECK(t.values.size() == 6);
    t = nice_ticks(3.2, 4.1);
    CHECK(t.step == doctest::Approx(0.2));
    CHECK(t.lo == doctest::Approx(3.2));
    CHECK(t.hi == doctest::Approx(4.2));
    t = nice_ticks(5, 5);  // one value: a range around it
    CHECK(t.lo < 5);
    CHECK(t.hi > 5);
    t = nice_ticks(-1.5, 1.5);
    bool zero = false;
    for (double v : t.values) zero = zero || v == 0.0;
    CHECK(zero);
    CHECK(std::signbit(t.values[static_cast<std::size_t>(std::llround(-t.lo / t.step))]) == false);
}

TEST_CASE("extreme ranges give finite, short tick lists") {
    for (auto [lo, hi] : {std::pair{-1e308, 1e308}, std::pair{0.0, 5e-324}, std::pair{1e-320, 2e-320}, std::pair{-0.0, 0.0}}) {
        const auto t = nice_ticks(lo, hi);
        CHECK(t.values.size() >= 2);
        CHECK(t.values.size() <= 12);
        for (double v : t.values) CHECK(format_tick(v, t.step).size() < 24);
    }
}

TEST_CASE("tick labels") {
    CHECK(format_tick(1500000, 500000) == "1.5M");
    CHECK(format_tick(2000000000, 1000000000) == "2B");
    CHECK(format_tick(20000, 10000) == "20k");
    CHECK(format_tick(0, 0.5) == "0");
    CHECK(format_tick(2.5, 0.5) == "2.5");
    CHECK(format_tick(2e-5, 1e-5) == "2e-05");
    CHECK(format_tick(1.2e-4, 2e-5) == "1.2e-04");
    CHECK(format_tick(0, 2e-5) == "0");
    CHECK(format_tick(0.002, 0.001) == "0.002");
    CHECK(format_tick(6.4, 0.2) == "6.4");
    CHECK(format_tick(400, 100) == "400");
    CHECK(format_tick(3.25, 0.05) == "3.25");
}

TEST_CASE("the SVG holds each series, breaks lines at NaN, marks boundaries and alerts") {
    Chart c;
    c.id = "loss";
    c.title = "Loss <train & valid>";
    c.x_label = "consumed tokens";
    c.y_label = "loss";
    c.series.push_back({"lm loss", "#1f77b4", false, {{0, 10, 1}, {100, 8, 2}, {200, NAN, 3}, {300, 6, 4}, {400, 5, 5}}});
    c.series.push_back({"validation lm loss", "#ff7f0e", true, {{200, 7, 3}}});
    c.boundaries.push_back({250, "job 2"});
    c.alerts.push_back({300, 6, "***ALERT: loss spike"});
    const std::string svg = render_chart_svg(c);
    CHECK(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    CHECK(count(svg, "<polyline") == 2);  // the NaN splits the training curve
    CHECK(count(svg, "<circle") == 1);
    CHECK(count(svg, "class=\"boundary\"") == 1);
    CHECK(count(svg, "class=\"alert\"") == 1);
    CHECK(svg.find("Loss &lt;train &amp; valid&gt;") != std::string::npos);
    CHECK(svg.find("data-series=\"validation lm loss\"") != std::string::npos);
    CHECK(svg.find(">400<") != std::string::npos);  // the last x tick
    CHECK(svg.find("nan") == std::string::npos);
}

TEST_CASE("emissions.csv and the ledger: values, and errors with file and line") {
    const std::string csv =
        "timestamp,project_name,run_id,duration,emissions,energy_consumed,cpu_model\n"
        "2026-01-01T00:00:00,codecarbon,r1,15.0,1e-05,0.0001,\"Intel, Xeon\"\n"
        "2026-01-01T00:00:15,codecarbon,r1,30.0,2e-05,,\"x\"\n"
        "2026-01-01T00:00:30,codecarbon,r1,45.0,3e-05,0.0003";  // still being written
    const auto rows = parse_emissions_csv(csv, "emissions.csv");
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].run_id == "r1");
    CHECK(rows[0].duration_s == 15.0);
    CHECK(rows[0].energy_kwh == 1e-4);
    CHECK(rows[1].energy_kwh == 0.0);
    CHECK_THROWS_WITH_AS(parse_emissions_csv("timestamp,run_id,duration,emissions,energy_consumed\na,b,1\n", "e.csv"),
                         "e.csv:2: 3 fields, the header has 5", mds::Error);
    CHECK_THROWS_WITH_AS(parse_emissions_csv("a,b\n1,2\n", "e.csv"), doctest::Contains("e.csv:1: no 'timestamp' column"),
                         mds::Error);
    CHECK_THROWS_WITH_AS(parse_emissions_csv("timestamp,run_id,duration,emissions,energy_consumed\na,b,x,1,1\n", "e.csv"),
                         doctest::Contains("e.csv:2: column duration"), mds::Error);

    const std::string ledger =
        "{\"run_id\":\"aaaa\",\"status\":\"stopped\",\"start_time\":\"t0\",\"resumed_iteration\":0,\"iteration\":5,"
        "\"stop\":\"exit interval\",\"job_id\":null,\"hosts\":[\"n1\"]}\n\n"
        "{\"run_id\":\"bbbb\",\"status\":\"running\",\"start_time\":\"t1\",\"resumed_iteration\":5,\"iteration\":9}\n";
    const auto jobs = parse_ledger(ledger, "runs.jsonl");
    REQUIRE(jobs.size() == 2);
    CHECK(jobs[0].stop == "exit interval");
    CHECK_FALSE(jobs[0].job_id);
    CHECK(jobs[1].resumed_iteration == 5);
    CHECK(jobs[1].line == 3);
    CHECK_THROWS_WITH_AS(parse_ledger("{\"run_id\":\"a\",\"resumed_iteration\":0,\"iteration\":1}\n{oops\n", "runs.jsonl"),
                         doctest::Contains("runs.jsonl:2: expected one JSON object"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_ledger("{\"run_id\":\"a\",\"iteration\":1}\n", "r"), doctest::Contains("r:1: \"resumed_iteration\""),
                         mds::Error);
}

TEST_CASE("the report model: tokens on x, later lines win, boundaries and alerts placed") {
    ReportSources src;
    src.logs.push_back(parse_training_log(
        " iteration 1/4 | consumed tokens: 100 | learning rate: 1.000E-03 | lm loss: 5.000000E+00 |\n"
        " iteration 2/4 | consumed tokens: 200 | learning rate: 1.000E-03 | lm loss: 9.000000E+00 |\n"
        "***ALERT: loss spike at iteration 2: loss 9.0\n"
        "mds-train:   successfully loaded checkpoint from c at iteration 1\n"
        " iteration 2/4 | consumed tokens: 200 | learning rate: 1.000E-03 | lm loss: 4.500000E+00 |\n"
        " iteration 3/4 | consumed tokens: 300 | learning rate: 1.000E-03 | lm loss: 4.000000E+00 |\n"
        " validation loss at iteration 3 | lm loss value: 4.200000E+00 | lm loss PPL: 6.668633E+01 | \n",
        "log"));
    const Report r = build_report(src, "");
    CHECK(r.title == "Training report");
    REQUIRE(r.charts.size() >= 2);
    const Chart& loss = r.charts[0];
    CHECK(loss.id == "loss");
    CHECK(loss.x_label == "consumed tokens");
    REQUIRE(loss.series.size() == 2);
    REQUIRE(loss.series[0].points.size() == 3);
    CHECK(loss.series[0].points[1].y == 4.5);  // the resumed job's value of iteration 2
    CHECK(loss.series[0].points[2].x == 300);
    CHECK(loss.series[1].markers);
    CHECK(loss.series[1].points[0].y == 4.2);
    REQUIRE(loss.boundaries.size() == 1);
    CHECK(loss.boundaries[0].x == 100);
    REQUIRE(loss.alerts.size() == 1);
    CHECK(loss.alerts[0].x == 200);
    CHECK(loss.alerts[0].y == 4.5);
    CHECK(r.charts[1].id == "learning-rate");
    const std::string html = render_report_html(r);
    CHECK(html.find("<script") == std::string::npos);
    CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // no reference but the SVG namespace
    CHECK(html.find("<td>lm loss</td><td>2</td><td>200</td><td>4.5</td>") != std::string::npos);
    CHECK(format_value(1.5e-4) == "0.00015");
    CHECK(format_value(5120) == "5120");
    CHECK(format_value(6.123456) == "6.123456");
}

TEST_CASE("long series: the line is thinned per pixel column (spikes kept), the tables evenly") {
    Chart c;
    c.id = "loss";
    c.series.push_back({"lm loss", "#1f77b4", false, {}});
    for (int i = 0; i < 100000; ++i) c.series[0].points.push_back({static_cast<double>(i), i == 54321 ? 50.0 : 2.0, i + 1});
    const std::string svg = render_chart_svg(c);
    const auto at = svg.find("points=\"");
    REQUIRE(at != std::string::npos);
    const std::string pts = svg.substr(at + 8, svg.find('"', at + 8) - at - 8);
    const auto n = static_cast<std::size_t>(std::count(pts.begin(), pts.end(), ','));
    CHECK(n < 4 * 760);
    CHECK(n > 600);
    CHECK(pts.find(",52.00") != std::string::npos);  // the spike reaches the top of the plot (y = 52)
    Report r;
    r.charts.push_back(c);
    const std::string page = render_report_html(r, 1000);
    CHECK(count(page, "<tr data-series=\"lm loss\">") == 1001);
    CHECK(page.find("values (1001 of 100000, evenly spaced)") != std::string::npos);
    CHECK(page.find("<td>100000</td><td>99999</td><td>2</td>") != std::string::npos);  // the last value is listed
    CHECK(count(render_report_html(r, 0), "<tr data-series=\"lm loss\">") == 100000);
}
