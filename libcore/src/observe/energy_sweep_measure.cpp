// Reading one mds-energy-sweep setting back from its mds-train log and emissions.csv
// (energy_sweep_measure.h).
#include "mds/observe/energy_sweep_measure.h"

#include <charconv>
#include <cmath>
#include <optional>

#include "mds/observe/emissions_csv.h"  // split_csv_record
#include "mds/util/text.h"              // python_float_repr
#include "mds/util/error.h"
#include "mds/util/int_range.h"  // parse_whole_number
#include "mds/util/text.h"  // trim

namespace mds::observe {

namespace {

// The whole of `s` as one number (no spaces, no '+', nothing after it), as mds-train's log and
// codecarbon's emissions.csv write it.
std::optional<double> sweep_text_double(std::string_view s) {
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
}

// The lines of a text, without their '\n' (and '\r').
std::vector<std::string_view> split_lines(std::string_view text) {
    std::vector<std::string_view> lines;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(start, end - start);
        if (line.ends_with('\r')) line.remove_suffix(1);
        lines.push_back(line);
        start = end + 1;
    }
    return lines;
}

std::string short_line(std::string_view line) {
    const std::string t = trim(line);
    return t.size() > 120 ? t.substr(0, 120) + "..." : t;
}

}  // namespace

std::optional<SweepLogPoint> parse_sweep_log_line(std::string_view line) {
    const std::string text = trim(line);
    if (!std::string_view(text).starts_with("iteration ") || text.find(" | ") == std::string::npos) return std::nullopt;
    SweepLogPoint p;
    bool have_iteration = false, have_tokens = false, have_rate = false;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t bar = text.find('|', start);
        if (bar == std::string::npos) bar = text.size();
        const std::string field = trim(std::string_view(text).substr(start, bar - start));
        start = bar + 1;
        if (field.starts_with("iteration ")) {
            const std::string n = trim(field.substr(10, field.find('/') - 10));
            if (const auto v = parse_whole_number(n)) {
                p.iteration = *v;
                have_iteration = true;
            }
            continue;
        }
        const std::size_t colon = field.rfind(": ");
        if (colon == std::string::npos) continue;
        const std::string key = field.substr(0, colon);
        const std::string value = trim(field.substr(colon + 2));
        if (key == "consumed tokens") {
            if (const auto v = parse_whole_number(value)) {
                p.consumed_tokens = *v;
                have_tokens = true;
            }
        } else if (key == "tokens per second") {
            if (const auto v = sweep_text_double(value)) {
                p.tokens_per_second = *v;
                have_rate = true;
            }
        } else if (key == "energy (kWh)") {
            p.energy_kwh = sweep_text_double(value);
        } else if (key == "CO2 (kg)") {
            p.co2_kg = sweep_text_double(value);
        }
    }
    if (!have_iteration) return std::nullopt;
    if (!have_tokens || !have_rate)
        throw Error("iteration line without " + std::string(!have_tokens ? "'consumed tokens'" : "'tokens per second'") +
                    " (not written by this mds-train?): " + short_line(line));
    return p;
}

std::vector<SweepLogPoint> parse_sweep_log(std::string_view log_text) {
    std::vector<SweepLogPoint> points;
    for (const std::string_view line : split_lines(log_text))
        if (auto p = parse_sweep_log_line(line)) points.push_back(*p);
    return points;
}

double SweepMeasurement::ms_per_iteration() const {
    return iterations > 0 ? seconds * 1000.0 / static_cast<double>(iterations) : 0.0;
}
double SweepMeasurement::tokens_per_second() const {
    return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
}
double SweepMeasurement::kwh_per_million_tokens() const {
    return tokens > 0 ? energy_kwh * 1e6 / static_cast<double>(tokens) : 0.0;
}
double SweepMeasurement::kg_co2_per_million_tokens() const {
    return tokens > 0 ? co2_kg * 1e6 / static_cast<double>(tokens) : 0.0;
}

SweepMeasurement measure_steady_window(const std::vector<SweepLogPoint>& points, const std::string& what_log) {
    if (points.size() < 2)
        throw Error(what_log + ": " + std::to_string(points.size()) +
                    " iteration line(s); the steady part needs at least 2 (the first one is subtracted)");
    const SweepLogPoint& first = points.front();
    const SweepLogPoint& last = points.back();
    if (!first.energy_kwh || !last.energy_kwh || !first.co2_kg || !last.co2_kg)
        throw Error(what_log + ": the iteration lines carry no 'energy (kWh)' / 'CO2 (kg)' (was --codecarbon-dir given?)");
    SweepMeasurement m;
    m.first_iteration = first.iteration;
    m.last_iteration = last.iteration;
    m.iterations = last.iteration - first.iteration;
    m.tokens = last.consumed_tokens - first.consumed_tokens;
    m.energy_kwh = *last.energy_kwh - *first.energy_kwh;
    m.co2_kg = *last.co2_kg - *first.co2_kg;
    // Each line reports the mean rate of its interval (since the previous line), so the interval
    // took its tokens / rate seconds. `elapsed time per iteration (s)` has 2 decimals only: for a
    // small model that is no measurement at all, while tokens per second keeps 6 digits or more.
    for (std::size_t i = 1; i < points.size(); ++i) {
        const SweepLogPoint& p = points[i];
        const std::int64_t tokens = p.consumed_tokens - points[i - 1].consumed_tokens;
        if (p.iteration <= points[i - 1].iteration || tokens <= 0)
            throw Error(what_log + ": iteration " + std::to_string(p.iteration) +
                        " does not advance past the line before (iteration " + std::to_string(points[i - 1].iteration) +
                        ", consumed tokens " + std::to_string(points[i - 1].consumed_tokens) + " -> " +
                        std::to_string(p.consumed_tokens) + "): logs of two runs in one file?");
        if (!(p.tokens_per_second > 0))
            throw Error(what_log + ": iteration " + std::to_string(p.iteration) + " has tokens per second " +
                        python_float_repr(p.tokens_per_second) + "; expected a positive rate");
        m.seconds += static_cast<double>(tokens) / p.tokens_per_second;
    }
    if (!(m.energy_kwh >= 0) || !(m.co2_kg >= 0))
        throw Error(what_log + ": the cumulative energy or CO2 decreases between iteration " +
                    std::to_string(first.iteration) + " and " + std::to_string(last.iteration));
    return m;
}

std::string SweepEnergySource::describe() const {
    std::string s;
    if (cpu == "RAPL")
        s = "CPU from RAPL counters";
    else if (cpu == "unknown")
        s = "CPU from an unknown source (no carbon tracker note in the log)";
    else
        s = "CPU from codecarbon's " + cpu;
    if (gpu_count > 0) s += ", " + std::to_string(gpu_count) + " GPU(s) from NVML counters";
    s += ", RAM from codecarbon's power model";
    return s;
}

SweepEnergySource parse_energy_source(std::string_view log_text, std::int64_t gpu_count) {
    // The carbon tracker's notes as mds-train prints them (carbon_tracker.cpp resolve_cpu).
    SweepEnergySource src;
    src.cpu = "unknown";
    src.gpu_count = gpu_count;
    for (const std::string_view line : split_lines(log_text)) {
        if (line.find("codecarbon: CPU energy: ") != std::string_view::npos)
            src.cpu = "RAPL";
        else if (line.find("codecarbon: CPU power: cpu_load mode") != std::string_view::npos)
            src.cpu = "power model (cpu_load)";
        else if (line.find("codecarbon: CPU power: constant mode") != std::string_view::npos)
            src.cpu = "power model (constant)";
    }
    return src;
}

SweepEmissionsTotals read_emissions_totals(const std::string& csv_text, const std::string& what_file) {
    std::vector<std::string_view> lines;
    for (const std::string_view line : split_lines(csv_text))
        if (!trim(line).empty()) lines.push_back(line);
    if (lines.size() < 2) throw Error(what_file + ": no data row under the header");
    const std::vector<std::string> header = split_csv_record(lines.front());
    const std::vector<std::string> row = split_csv_record(lines.back());
    auto column = [&](std::string_view name) -> const std::string& {
        for (std::size_t i = 0; i < header.size(); ++i)
            if (header[i] == name) {
                if (i >= row.size())
                    throw Error(what_file + ": the last row has " + std::to_string(row.size()) + " fields; column '" +
                                std::string(name) + "' is field " + std::to_string(i + 1));
                return row[i];
            }
        throw Error(what_file + ": no column '" + std::string(name) + "' in the header");
    };
    auto number = [&](std::string_view name) {
        const std::string& v = column(name);
        const auto d = sweep_text_double(v);
        if (!d) throw Error(what_file + ": column '" + std::string(name) + "' of the last row is '" + v + "', not a number");
        return *d;
    };
    SweepEmissionsTotals t;
    t.duration_s = number("duration");
    t.energy_kwh = number("energy_consumed");
    t.emissions_kg = number("emissions");
    t.gpu_count = static_cast<std::int64_t>(std::llround(number("gpu_count")));
    return t;
}

}  // namespace mds::observe
