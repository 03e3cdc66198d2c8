// emissions.csv and runs.jsonl readers (run_files.h).
#include "mds/report/run_files.h"

#include <nlohmann/json.hpp>

#include <charconv>

#include "mds/observe/emissions_csv.h"  // split_csv_record
#include "mds/util/error.h"
#include "mds/util/files.h"  // read_file
#include "mds/util/text.h"   // trim

namespace mds::report {

namespace {

double csv_number(const std::string& field, const std::string& where, const std::string& column) {
    const std::string t = trim(field);
    if (t.empty() || t == "nan" || t == "NaN") return 0.0;
    double v = 0;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size())
        throw Error(where + ": column " + column + ": expected a number, found '" + t + "'");
    return v;
}

}  // namespace

std::vector<EmissionsRow> parse_emissions_csv(std::string_view text, const std::string& source) {
    std::vector<EmissionsRow> rows;
    std::vector<std::string> header;
    std::size_t col_ts = 0, col_run = 0, col_dur = 0, col_em = 0, col_en = 0;
    std::size_t line_no = 0;
    while (!text.empty()) {
        const std::size_t nl = text.find('\n');
        if (nl == std::string_view::npos) break;  // a row still being written
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl + 1);
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (trim(line).empty()) continue;
        const std::string where = source + ":" + std::to_string(line_no);
        auto fields = observe::split_csv_record(line);
        if (header.empty()) {
            header = std::move(fields);
            auto column = [&](std::string_view name) {
                for (std::size_t i = 0; i < header.size(); ++i)
                    if (trim(header[i]) == name) return i;
                throw Error(where + ": no '" + std::string(name) + "' column in the header (not codecarbon's emissions.csv?)");
            };
            col_ts = column("timestamp");
            col_run = column("run_id");
            col_dur = column("duration");
            col_em = column("emissions");
            col_en = column("energy_consumed");
            continue;
        }
        if (fields.size() != header.size())
            throw Error(where + ": " + std::to_string(fields.size()) + " fields, the header has " +
                        std::to_string(header.size()));
        EmissionsRow r;
        r.timestamp = fields[col_ts];
        r.run_id = fields[col_run];
        r.duration_s = csv_number(fields[col_dur], where, "duration");
        r.emissions_kg = csv_number(fields[col_em], where, "emissions");
        r.energy_kwh = csv_number(fields[col_en], where, "energy_consumed");
        r.line = line_no;
        rows.push_back(std::move(r));
    }
    return rows;
}

std::vector<EmissionsRow> read_emissions_csv(const std::string& path) { return parse_emissions_csv(read_file(path), path); }

std::vector<LedgerJob> parse_ledger(std::string_view text, const std::string& source) {
    std::vector<LedgerJob> jobs;
    std::size_t line_no = 0;
    while (!text.empty()) {
        const std::size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        ++line_no;
        if (trim(line).empty()) continue;
        const std::string where = source + ":" + std::to_string(line_no);
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) throw Error(where + ": expected one JSON object per line (a run ledger line)");
        auto str = [&](const char* key) -> std::optional<std::string> {
            const auto it = j.find(key);
            if (it == j.end() || it->is_null()) return std::nullopt;
            if (!it->is_string()) throw Error(where + ": \"" + key + "\" must be a string");
            return it->get<std::string>();
        };
        auto integer = [&](const char* key) -> std::int64_t {
            const auto it = j.find(key);
            if (it == j.end() || !it->is_number_integer())
                throw Error(where + ": \"" + key + "\" must be an integer (a run ledger line)");
            return it->get<std::int64_t>();
        };
        LedgerJob job;
        auto run_id = str("run_id");
        if (!run_id) throw Error(where + ": no \"run_id\" (a run ledger line)");
        job.run_id = *run_id;
        job.status = str("status").value_or("");
        job.start_time = str("start_time").value_or("");
        job.end_time = str("end_time");
        job.job_id = str("job_id");
        if (const auto it = j.find("hosts"); it != j.end() && it->is_array())
            for (const auto& h : *it)
                if (h.is_string()) job.hosts.push_back(h.get<std::string>());
        job.resumed_iteration = integer("resumed_iteration");
        job.iteration = integer("iteration");
        job.loaded = str("loaded");
        job.stop = str("stop");
        job.line = line_no;
        jobs.push_back(std::move(job));
    }
    return jobs;
}

std::vector<LedgerJob> read_ledger_jobs(const std::string& path) { return parse_ledger(read_file(path), path); }

}  // namespace mds::report
