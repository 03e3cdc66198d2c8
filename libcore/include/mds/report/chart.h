// Line charts as standalone SVG: a plot of one or more series against a shared x axis, with axes
// and "nice" ticks (1, 2, 5 × 10^k), a legend, vertical dashed lines for job boundaries and
// triangle markers for alerts. The same SVG is inlined in mds-report's page and written alone
// (--svg-dir) for a README. No script, no external reference: it renders anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mds::report {

struct ChartPoint {
    double x = 0;
    double y = 0;
    std::int64_t iteration = -1;  // the training iteration the value belongs to (-1: none, e.g. by time)
};

struct ChartSeries {
    std::string name;
    std::string color;      // "#rrggbb"
    bool markers = false;   // dots at each point (validation losses), else a line
    std::vector<ChartPoint> points;
};

struct ChartBoundary {  // a job boundary or restart
    double x = 0;
    std::string label;
};

struct ChartAlert {
    double x = 0;
    double y = 0;
    std::string label;
};

struct Chart {
    std::string id;       // "loss": the file name under --svg-dir and the page's anchor
    std::string title;
    std::string x_label;  // "tokens", "iteration", "hours"
    std::string y_label;
    std::vector<ChartSeries> series;
    std::vector<ChartBoundary> boundaries;
    std::vector<ChartAlert> alerts;
};

// The colours series take in order, and those of the marks (kept apart from the series' colours so
// that a screenshot can tell them apart).
const std::vector<std::string>& series_palette();
inline constexpr std::string_view kAlertColor = "#d62728";
inline constexpr std::string_view kBoundaryColor = "#7f7f7f";

struct Ticks {
    double lo = 0, hi = 1, step = 1;  // the axis runs lo..hi, both multiples of step
    std::vector<double> values;
};
// Ticks covering [lo, hi] with about `target` intervals; a single value gets a range around it.
Ticks nice_ticks(double lo, double hi, int target = 5);
// A tick's label: %g with the digits the step needs; 10^4 and above with k / M / B / T suffixes.
std::string format_tick(double value, double step);

// Maps [d0, d1] onto [r0, r1].
struct LinearScale {
    double d0 = 0, d1 = 1, r0 = 0, r1 = 1;
    double operator()(double v) const { return d1 == d0 ? (r0 + r1) / 2 : r0 + (v - d0) * (r1 - r0) / (d1 - d0); }
};

// '&', '<', '>', '"', '\'' as entities.
std::string escape_xml(std::string_view s);

// The chart as a complete <svg> element (with xmlns, so the text is also a valid .svg file).
// Points whose x or y is not finite are left out (a NaN loss breaks the line there).
std::string render_chart_svg(const Chart& chart, int width = 760, int height = 320);

}  // namespace mds::report
