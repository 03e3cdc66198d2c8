// mds-energy-sweep's table, sweep.csv, sweep.json and bar chart (energy_sweep_report.h).
#include "mds/observe/energy_sweep_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mds/util/text.h"  // python_float_repr

namespace mds::observe {

namespace {

std::string printf_double(const char* format, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

// The note column: why a setting did not run, or that it is the best.
std::string row_note(const SweepRow& row, bool best) {
    if (row.status == SweepStatus::ok) return best ? "most energy-efficient" : "";
    return std::string(sweep_status_name(row.status)) + ": " + row.note;
}

// The cells of one table / CSV row: setting, ms/iteration, tokens/s, kWh/Mtok, kg CO2/Mtok, note.
std::vector<std::string> table_cells(const SweepRow& row, bool best) {
    std::vector<std::string> cells{row.setting.label(), "", "", "", "", row_note(row, best)};
    if (row.measurement) {
        const SweepMeasurement& m = *row.measurement;
        cells[1] = format_ms_per_iteration(m.ms_per_iteration());
        cells[2] = format_tokens_per_second(m.tokens_per_second());
        cells[3] = format_per_million_tokens(m.kwh_per_million_tokens());
        cells[4] = format_per_million_tokens(m.kg_co2_per_million_tokens());
    }
    return cells;
}

// The energy sources of the ok rows, each once, in row order.
std::vector<SweepEnergySource> distinct_sources(const std::vector<SweepRow>& rows) {
    std::vector<SweepEnergySource> out;
    for (const SweepRow& r : rows)
        if (r.source && std::none_of(out.begin(), out.end(), [&](const SweepEnergySource& s) {
                return s.describe() == r.source->describe();
            }))
            out.push_back(*r.source);
    return out;
}

bool energy_follows_time_only(const std::vector<SweepRow>& rows) {
    const auto sources = distinct_sources(rows);
    return !sources.empty() &&
           std::all_of(sources.begin(), sources.end(), [](const SweepEnergySource& s) { return s.follows_time_only(); });
}

std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string q = "\"";
    for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else if (u < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", u);
            out += buf;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

std::string json_number(double v) { return std::isfinite(v) ? python_float_repr(v) : "null"; }

std::string xml_text(const std::string& s) {
    std::string out;
    for (const char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

}  // namespace

const char* sweep_status_name(SweepStatus status) {
    switch (status) {
        case SweepStatus::ok: return "ok";
        case SweepStatus::skipped: return "skipped";
        case SweepStatus::failed: return "failed";
    }
    return "?";
}

std::optional<std::size_t> most_energy_efficient(const std::vector<SweepRow>& rows) {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].status != SweepStatus::ok || !rows[i].measurement) continue;
        if (!best || rows[i].measurement->kwh_per_million_tokens() < rows[*best].measurement->kwh_per_million_tokens())
            best = i;
    }
    return best;
}

std::string format_ms_per_iteration(double ms) { return printf_double("%.2f", ms); }
std::string format_tokens_per_second(double v) { return printf_double("%.0f", v); }
std::string format_per_million_tokens(double v) { return printf_double("%.3e", v); }

std::string format_sweep_table(const SweepResult& result) {
    const auto best = most_energy_efficient(result.rows);
    std::vector<std::vector<std::string>> lines{
        {"setting", "ms/iteration", "tokens/s", "kWh per Mtok", "kg CO2 per Mtok", "note"}};
    for (std::size_t i = 0; i < result.rows.size(); ++i) {
        auto cells = table_cells(result.rows[i], best == i);
        // A '|' in a failure note (quoted from mds-train's output) would end the cell.
        std::string& note = cells.back();
        for (std::size_t at = 0; (at = note.find('|', at)) != std::string::npos; at += 2) note.insert(at, 1, '\\');
        lines.push_back(std::move(cells));
    }
    // A Markdown table with padded cells: aligned in a terminal, pasteable into a README.
    std::vector<std::size_t> width(lines.front().size(), 0);
    for (const auto& cells : lines)
        for (std::size_t c = 0; c < cells.size(); ++c) width[c] = std::max(width[c], cells[c].size());
    auto render = [&](const std::vector<std::string>& cells) {
        std::string s = "|";
        for (std::size_t c = 0; c < cells.size(); ++c) {
            const std::string pad(width[c] - cells[c].size(), ' ');
            // Numbers right-aligned, text left-aligned.
            s += ' ';
            s += c >= 1 && c <= 4 ? pad + cells[c] : cells[c] + pad;
            s += " |";
        }
        return s + "\n";
    };
    std::string out = render(lines.front());
    out += "|";
    for (std::size_t c = 0; c < width.size(); ++c)
        out += (c >= 1 && c <= 4 ? std::string(width[c] + 1, '-') + ":" : std::string(width[c] + 2, '-')) + "|";
    out += "\n";
    for (std::size_t i = 1; i < lines.size(); ++i) out += render(lines[i]);

    for (const SweepEnergySource& s : distinct_sources(result.rows)) out += "energy: " + s.describe() + "\n";
    if (energy_follows_time_only(result.rows))
        out += "energy follows time only: no energy counter could be read (RAPL not readable, no GPU measured), so "
               "the energy is codecarbon's power model (TDP x CPU load, RAM power) times the time; the least energy "
               "is the least time per token\n";
    out += format_sweep_best_line(result) + "\n";
    return out;
}

std::string format_sweep_best_line(const SweepResult& result) {
    const auto best = most_energy_efficient(result.rows);
    if (!best) return "most energy-efficient: none (no setting ran to the end)";
    const SweepRow& row = result.rows[*best];
    return "most energy-efficient: " + row.setting.label() + " (" +
           format_per_million_tokens(row.measurement->kwh_per_million_tokens()) + " kWh per million tokens)";
}

std::string sweep_csv(const SweepResult& result) {
    const auto best = most_energy_efficient(result.rows);
    std::string out =
        "setting,micro_batch_size,global_batch_size,recompute,status,ms_per_iteration,tokens_per_second,"
        "kwh_per_million_tokens,kg_co2_per_million_tokens,best,note,log\n";
    for (std::size_t i = 0; i < result.rows.size(); ++i) {
        const SweepRow& row = result.rows[i];
        const auto cells = table_cells(row, best == i);
        const SweepSetting& s = row.setting;
        const std::string recompute = s.recompute ? (*s.recompute ? "on" : "off") : "";
        const std::vector<std::string> fields{cells[0], std::to_string(s.micro_batch_size),
                                              std::to_string(s.global_batch_size), recompute,
                                              sweep_status_name(row.status), cells[1], cells[2], cells[3], cells[4],
                                              best == i ? "yes" : "no", cells[5], row.log_path};
        for (std::size_t f = 0; f < fields.size(); ++f) {
            if (f) out += ',';
            out += csv_field(fields[f]);
        }
        out += "\n";
    }
    return out;
}

std::string sweep_json(const SweepResult& result) {
    const auto best = most_energy_efficient(result.rows);
    std::string o = "{\n";
    o += "  \"train_iters\": " + std::to_string(result.train_iters) + ",\n";
    o += "  \"seq_length\": " + std::to_string(result.seq_length) + ",\n";
    o += "  \"best\": " + (best ? json_string(result.rows[*best].setting.label()) : std::string("null")) + ",\n";
    o += "  \"energy_follows_time_only\": " + std::string(energy_follows_time_only(result.rows) ? "true" : "false") + ",\n";
    o += "  \"settings\": [";
    for (std::size_t i = 0; i < result.rows.size(); ++i) {
        const SweepRow& row = result.rows[i];
        const SweepSetting& s = row.setting;
        o += i ? ",\n    {" : "\n    {";
        o += "\"setting\": " + json_string(s.label()) + ", \"micro_batch_size\": " + std::to_string(s.micro_batch_size) +
             ", \"global_batch_size\": " + std::to_string(s.global_batch_size) + ", \"recompute\": " +
             (s.recompute ? (*s.recompute ? "true" : "false") : "null") + ", \"status\": " +
             json_string(sweep_status_name(row.status)) + ", \"best\": " + (best == i ? "true" : "false") +
             ", \"note\": " + json_string(row.note) + ", \"log\": " + json_string(row.log_path) +
             ", \"emissions_csv\": " + json_string(row.emissions_path);
        if (const auto& m = row.measurement) {
            o += ",\n     \"measured\": {\"first_iteration\": " + std::to_string(m->first_iteration) +
                 ", \"last_iteration\": " + std::to_string(m->last_iteration) +
                 ", \"iterations\": " + std::to_string(m->iterations) + ", \"tokens\": " + std::to_string(m->tokens) +
                 ", \"seconds\": " + json_number(m->seconds) + ", \"energy_kwh\": " + json_number(m->energy_kwh) +
                 ", \"co2_kg\": " + json_number(m->co2_kg) +
                 ", \"ms_per_iteration\": " + json_number(m->ms_per_iteration()) +
                 ", \"tokens_per_second\": " + json_number(m->tokens_per_second()) +
                 ", \"kwh_per_million_tokens\": " + json_number(m->kwh_per_million_tokens()) +
                 ", \"kg_co2_per_million_tokens\": " + json_number(m->kg_co2_per_million_tokens()) + "}";
        }
        if (const auto& src = row.source)
            o += ",\n     \"energy_source\": {\"cpu\": " + json_string(src->cpu) +
                 ", \"gpu_count\": " + std::to_string(src->gpu_count) +
                 ", \"follows_time_only\": " + (src->follows_time_only() ? "true" : "false") +
                 ", \"description\": " + json_string(src->describe()) + "}";
        if (const auto& t = row.run_totals)
            o += ",\n     \"run_totals\": {\"duration_s\": " + json_number(t->duration_s) +
                 ", \"energy_kwh\": " + json_number(t->energy_kwh) +
                 ", \"emissions_kg\": " + json_number(t->emissions_kg) + "}";
        o += "}";
    }
    o += result.rows.empty() ? "]\n}\n" : "\n  ]\n}\n";
    return o;
}

std::string sweep_svg(const SweepResult& result) {
    const auto best = most_energy_efficient(result.rows);
    const double slot = 110, left = 80, top = 50, plot_h = 260, bottom = 70;
    const double width = left + slot * static_cast<double>(std::max<std::size_t>(result.rows.size(), 1)) + 20;
    const double height = top + plot_h + bottom;
    double max_v = 0;
    for (const SweepRow& r : result.rows)
        if (r.measurement) max_v = std::max(max_v, r.measurement->kwh_per_million_tokens());
    if (!(max_v > 0)) max_v = 1;
    auto num = [](double v) { return printf_double("%.1f", v); };
    const double base = top + plot_h;

    std::string o = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    o += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + num(width) + "\" height=\"" +
         num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    o += "<title>Energy per million tokens (kWh) per setting</title>\n";
    o += "<rect x=\"0\" y=\"0\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" fill=\"#ffffff\"/>\n";
    o += "<text x=\"" + num(left) + "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">Energy per million tokens (kWh)";
    if (best) o += " \xe2\x80\x94 least: " + xml_text(result.rows[*best].setting.label());
    o += "</text>\n";
    // Axis with three gridlines: 0, half, max.
    for (int k = 0; k <= 2; ++k) {
        const double v = max_v * k / 2.0, y = base - plot_h * k / 2.0;
        o += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(width - 10) + "\" y2=\"" + num(y) +
             "\" stroke=\"#cccccc\"/>\n";
        o += "<text x=\"" + num(left - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
             xml_text(format_per_million_tokens(v)) + "</text>\n";
    }
    for (std::size_t i = 0; i < result.rows.size(); ++i) {
        const SweepRow& row = result.rows[i];
        const double cx = left + slot * (static_cast<double>(i) + 0.5);
        if (row.measurement) {
            const double v = row.measurement->kwh_per_million_tokens();
            const double h = plot_h * v / max_v;
            o += "<rect class=\"bar" + std::string(best == i ? " best" : "") + "\" x=\"" + num(cx - 30) + "\" y=\"" +
                 num(base - h) + "\" width=\"60\" height=\"" + num(h) + "\" fill=\"" +
                 (best == i ? "#2a9d4b" : "#5b7fb5") + "\"><title>" + xml_text(row.setting.label()) + ": " +
                 xml_text(format_per_million_tokens(v)) + " kWh per million tokens</title></rect>\n";
            o += "<text x=\"" + num(cx) + "\" y=\"" + num(base - h - 5) + "\" text-anchor=\"middle\">" +
                 xml_text(format_per_million_tokens(v)) + "</text>\n";
        } else {
            o += "<text class=\"missing\" x=\"" + num(cx) + "\" y=\"" + num(base - 6) +
                 "\" text-anchor=\"middle\" fill=\"#b03a2e\">" + sweep_status_name(row.status) + "</text>\n";
        }
        // The label under the bar: batch sizes, then recompute on a second line.
        const SweepSetting& s = row.setting;
        o += "<text x=\"" + num(cx) + "\" y=\"" + num(base + 18) + "\" text-anchor=\"middle\">mbs " +
             std::to_string(s.micro_batch_size) + " gbs " + std::to_string(s.global_batch_size);
        if (s.recompute)
            o += "<tspan x=\"" + num(cx) + "\" dy=\"15\">recompute " + (*s.recompute ? "on" : "off") + "</tspan>";
        o += "</text>\n";
    }
    o += "<line x1=\"" + num(left) + "\" y1=\"" + num(base) + "\" x2=\"" + num(width - 10) + "\" y2=\"" + num(base) +
         "\" stroke=\"#333333\"/>\n";
    if (energy_follows_time_only(result.rows))
        o += "<text x=\"" + num(left) + "\" y=\"" + num(height - 12) +
             "\" fill=\"#555555\">power model only (no energy counter read): energy follows time</text>\n";
    o += "</svg>\n";
    return o;
}

}  // namespace mds::observe
