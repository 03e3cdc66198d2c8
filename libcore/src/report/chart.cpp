// SVG line charts (chart.h).
#include "mds/report/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace mds::report {

namespace {

std::string num(double v) {  // SVG coordinates: two decimals are below a pixel
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    return buf;
}

bool finite(const ChartPoint& p) { return std::isfinite(p.x) && std::isfinite(p.y); }

// A run of points thinned to what a pixel column can show: per column the first, lowest, highest
// and last point, in their order. A 300,000-iteration log then draws a few thousand points that
// look the same as all of them (spikes included).
std::vector<std::pair<double, double>> thin_to_columns(const std::vector<std::pair<double, double>>& run) {
    if (run.size() <= 4096) return run;
    std::vector<std::pair<double, double>> out;
    std::size_t begin = 0;
    while (begin < run.size()) {
        const double column = std::floor(run[begin].first);
        std::size_t end = begin, lo = begin, hi = begin;
        while (end < run.size() && std::floor(run[end].first) == column) {
            if (run[end].second > run[lo].second) lo = end;  // SVG y grows downwards: "lo" is the highest value
            if (run[end].second < run[hi].second) hi = end;
            ++end;
        }
        std::size_t keep[] = {begin, std::min(lo, hi), std::max(lo, hi), end - 1};
        for (std::size_t i = 0; i < 4; ++i)
            if (i == 0 || keep[i] != keep[i - 1]) out.push_back(run[keep[i]]);
        begin = end;
    }
    return out;
}

struct Extent {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -std::numeric_limits<double>::infinity();
    void add(double v) {
        if (!std::isfinite(v)) return;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    bool empty() const { return lo > hi; }
};

}  // namespace

const std::vector<std::string>& series_palette() {
    static const std::vector<std::string> colors = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf"};
    return colors;
}

Ticks nice_ticks(double lo, double hi, int target) {
    Ticks t;
    if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
    if (lo > hi) std::swap(lo, hi);
    if (hi - lo <= std::abs(hi) * 1e-12) {  // one value: a range around it
        const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
        lo -= pad;
        hi += pad;
    }
    const double raw = (hi - lo) / std::max(1, target);
    if (!std::isfinite(raw) || !(raw > 0)) {  // a range beyond double (1e308 and -1e308): just its ends
        t.lo = lo;
        t.hi = hi;
        t.step = std::isfinite(hi - lo) && hi > lo ? hi - lo : 1.0;
        t.values = {lo, hi};
        return t;
    }
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double norm = raw / mag;
    const double step = (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
    t.step = step;
    t.lo = std::floor(lo / step + 1e-9) * step;
    t.hi = std::ceil(hi / step - 1e-9) * step;
    const double intervals = std::round((t.hi - t.lo) / step);
    if (!(intervals >= 1 && intervals <= 100)) {  // denormal steps lose their precision: just the ends
        t.values = {lo, hi};
        t.lo = lo;
        t.hi = hi;
        t.step = hi - lo;
        return t;
    }
    const auto n = static_cast<int>(intervals);
    for (int i = 0; i <= n; ++i) {
        double v = t.lo + i * step;
        if (std::abs(v) < step * 1e-9) v = 0;  // no "-0" or 1e-17 at zero
        t.values.push_back(v);
    }
    return t;
}

std::string format_tick(double value, double step) {
    static const struct {
        double scale;
        const char* suffix;
    } kSi[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}};
    double scale = 1;
    const char* suffix = "";
    if (value == 0) return "0";
    char buf[64];
    if (!std::isfinite(value) || !std::isfinite(step) || !(step > 0)) {
        std::snprintf(buf, sizeof buf, "%g", value);
        return buf;
    }
    if (std::abs(value) >= 1e4 || step >= 1e4)
        for (const auto& s : kSi)
            if (std::max(std::abs(value), step) >= s.scale) {
                scale = s.scale;
                suffix = s.suffix;
                break;
            }
    const double v = value / scale, st = step / scale;
    // Significant digits: the integer digits of the largest of value and step, plus the decimals
    // the step needs (steps are 1, 2 or 5 x 10^k, so one decimal per negative power of ten).
    const double top = std::max(std::abs(v), st);
    if (top < 1e-3) {  // learning rates: one exponent style on the whole axis ("8.0e-05", "1.0e-04")
        const int mantissa = std::clamp(static_cast<int>(std::floor(std::log10(std::abs(v))) - std::floor(std::log10(st))), 0, 10);
        std::snprintf(buf, sizeof buf, "%.*e", mantissa, v);
        return buf;
    }
    const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(st))));
    const int digits = std::clamp(static_cast<int>(std::floor(std::log10(top))) + 1 + decimals, 1, 12);
    std::snprintf(buf, sizeof buf, "%.*g%s", digits, v, suffix);
    return buf;
}

std::string escape_xml(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

std::string render_chart_svg(const Chart& chart, int width, int height) {
    const double left = 72, right = 16, top = 52, bottom = 44;
    const double W = width, H = height;
    Extent xs, ys;
    for (const auto& s : chart.series)
        for (const auto& p : s.points)
            if (finite(p)) xs.add(p.x), ys.add(p.y);
    for (const auto& b : chart.boundaries) xs.add(b.x);
    for (const auto& a : chart.alerts) {
        xs.add(a.x);
        ys.add(a.y);
    }
    if (xs.empty()) xs.lo = 0, xs.hi = 1;
    if (ys.empty()) ys.lo = 0, ys.hi = 1;
    const Ticks tx = nice_ticks(xs.lo, xs.hi), ty = nice_ticks(ys.lo, ys.hi);
    const LinearScale sx{tx.lo, tx.hi, left, W - right}, sy{ty.lo, ty.hi, H - bottom, top};

    std::string o;
    o += "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-chart=\"" + escape_xml(chart.id) +
         "\" width=\"" + std::to_string(width) + "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " +
         std::to_string(width) + " " + std::to_string(height) +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\">\n";
    o += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
    o += "<text x=\"" + num(left) + "\" y=\"18\" font-size=\"14\" font-weight=\"bold\" fill=\"#222\">" +
         escape_xml(chart.title) + "</text>\n";
    // Legend: a short stroke of each series' colour and its name, in one row under the title.
    double lx = left;
    for (const auto& s : chart.series) {
        o += "<line x1=\"" + num(lx) + "\" y1=\"34\" x2=\"" + num(lx + 18) + "\" y2=\"34\" stroke=\"" + s.color +
             "\" stroke-width=\"3\"/>";
        o += "<text x=\"" + num(lx + 23) + "\" y=\"38\" fill=\"#222\">" + escape_xml(s.name) + "</text>\n";
        lx += 23 + 7.0 * static_cast<double>(s.name.size()) + 18;
    }
    if (!chart.boundaries.empty()) {
        o += "<line x1=\"" + num(lx) + "\" y1=\"28\" x2=\"" + num(lx) + "\" y2=\"40\" stroke=\"" + std::string(kBoundaryColor) +
             "\" stroke-dasharray=\"3 2\"/><text x=\"" + num(lx + 5) + "\" y=\"38\" fill=\"#222\">job start</text>\n";
        lx += 80;
    }
    if (!chart.alerts.empty())
        o += "<path d=\"M" + num(lx) + " 39 l5 -9 l5 9 z\" fill=\"" + std::string(kAlertColor) + "\"/><text x=\"" +
             num(lx + 14) + "\" y=\"38\" fill=\"#222\">alert</text>\n";
    // Grid and tick labels.
    o += "<g stroke=\"#e6e6e6\" stroke-width=\"1\">";
    for (double v : tx.values) o += "<line x1=\"" + num(sx(v)) + "\" y1=\"" + num(top) + "\" x2=\"" + num(sx(v)) + "\" y2=\"" + num(H - bottom) + "\"/>";
    for (double v : ty.values) o += "<line x1=\"" + num(left) + "\" y1=\"" + num(sy(v)) + "\" x2=\"" + num(W - right) + "\" y2=\"" + num(sy(v)) + "\"/>";
    o += "</g>\n<g fill=\"#333\">";
    for (double v : tx.values)
        o += "<text class=\"xtick\" x=\"" + num(sx(v)) + "\" y=\"" + num(H - bottom + 15) + "\" text-anchor=\"middle\">" +
             format_tick(v, tx.step) + "</text>";
    for (double v : ty.values)
        o += "<text class=\"ytick\" x=\"" + num(left - 6) + "\" y=\"" + num(sy(v) + 4) + "\" text-anchor=\"end\">" +
             format_tick(v, ty.step) + "</text>";
    o += "</g>\n";
    o += "<text x=\"" + num((left + W - right) / 2) + "\" y=\"" + num(H - 8) + "\" text-anchor=\"middle\" fill=\"#333\">" +
         escape_xml(chart.x_label) + "</text>\n";
    o += "<text transform=\"translate(14 " + num((top + H - bottom) / 2) + ") rotate(-90)\" text-anchor=\"middle\" fill=\"#333\">" +
         escape_xml(chart.y_label) + "</text>\n";
    o += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(W - right - left) + "\" height=\"" +
         num(H - bottom - top) + "\" fill=\"none\" stroke=\"#444\"/>\n";
    // Job boundaries under the data, so the curves stay visible across them.
    for (const auto& b : chart.boundaries) {
        const double x = std::floor(sx(b.x)) + 0.5;  // a one-pixel line on a pixel column: crisp, in its own colour
        o += "<line class=\"boundary\" x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(H - bottom) +
             "\" stroke=\"" + std::string(kBoundaryColor) + "\" stroke-width=\"1\" stroke-dasharray=\"6 3\"><title>" +
             escape_xml(b.label) + "</title></line>\n";
    }
    for (const auto& s : chart.series) {
        o += "<g class=\"series\" data-series=\"" + escape_xml(s.name) + "\" stroke=\"" + s.color + "\" fill=\"" +
             (s.markers ? s.color : std::string("none")) + "\">";
        if (s.markers || s.points.size() == 1) {
            for (const auto& p : s.points)
                if (finite(p)) o += "<circle cx=\"" + num(sx(p.x)) + "\" cy=\"" + num(sy(p.y)) + "\" r=\"3.5\" fill=\"" + s.color + "\"/>";
        } else {
            // One polyline per run of finite points.
            std::vector<std::pair<double, double>> run;
            auto flush = [&] {
                std::string pts;
                for (const auto& [x, y] : thin_to_columns(run)) {
                    if (!pts.empty()) pts += ' ';
                    pts += num(x);
                    pts += ',';
                    pts += num(y);
                }
                if (!pts.empty()) o += "<polyline stroke-width=\"2\" stroke-linejoin=\"round\" points=\"" + pts + "\"/>";
                run.clear();
            };
            for (const auto& p : s.points) {
                if (!finite(p)) {
                    flush();
                    continue;
                }
                run.emplace_back(sx(p.x), sy(p.y));
            }
            flush();
        }
        o += "</g>\n";
    }
    for (const auto& a : chart.alerts) {
        const double x = sx(a.x), y = std::isfinite(a.y) ? sy(a.y) : top + 8;
        o += "<path class=\"alert\" d=\"M" + num(x - 6) + " " + num(y + 5) + " L" + num(x) + " " + num(y - 6) + " L" +
             num(x + 6) + " " + num(y + 5) + " Z\" fill=\"" + std::string(kAlertColor) + "\"><title>" + escape_xml(a.label) +
             "</title></path>\n";
    }
    o += "</svg>\n";
    return o;
}

}  // namespace mds::report
