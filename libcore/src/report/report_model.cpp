// From the files read to the charts of the page (report.h): the log's iteration records merged
// (later lines win), TensorBoard scalars where the log has no such field, validation losses,
// alerts, job boundaries from the ledger and the log's "loaded checkpoint" lines, and
// emissions.csv's totals over time.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "mds/report/report.h"

namespace mds::report {

namespace {

using ByIteration = std::map<std::int64_t, double>;

// Consumed tokens (or, without them, the iteration itself) at any iteration: exact where logged,
// linear between logged iterations, at the last rate past them.
class TokenAxis {
public:
    explicit TokenAxis(ByIteration tokens) : tokens_(std::move(tokens)) {}
    bool by_tokens() const { return !tokens_.empty(); }
    double x(std::int64_t it) const {
        if (tokens_.empty()) return static_cast<double>(it);
        const auto hi = tokens_.lower_bound(it);
        if (hi != tokens_.end() && hi->first == it) return hi->second;
        if (hi == tokens_.begin()) return hi->first == 0 ? 0.0 : hi->second * static_cast<double>(it) / static_cast<double>(hi->first);
        const auto lo = std::prev(hi);
        if (hi == tokens_.end()) {
            const double rate = lo == tokens_.begin() ? lo->second / static_cast<double>(std::max<std::int64_t>(1, lo->first))
                                                      : (lo->second - std::prev(lo)->second) /
                                                            static_cast<double>(lo->first - std::prev(lo)->first);
            return lo->second + rate * static_cast<double>(it - lo->first);
        }
        return lo->second + (hi->second - lo->second) * static_cast<double>(it - lo->first) /
                                static_cast<double>(hi->first - lo->first);
    }

private:
    ByIteration tokens_;
};

struct Scalars {
    std::map<std::string, ByIteration> by_tag;  // TensorBoard tag → step → value (later files win)
    const ByIteration* find(const std::string& tag) const {
        const auto it = by_tag.find(tag);
        return it == by_tag.end() || it->second.empty() ? nullptr : &it->second;
    }
};

ByIteration from_records(const std::map<std::int64_t, IterationRecord>& records,
                         const std::function<std::optional<double>(const IterationRecord&)>& get) {
    ByIteration out;
    for (const auto& [it, r] : records)
        if (auto v = get(r)) out[it] = *v;
    return out;
}

ChartSeries make_series(const std::string& name, const ByIteration& values, const TokenAxis& axis, std::size_t color,
                        bool markers = false) {
    ChartSeries s;
    s.name = name;
    s.color = series_palette()[color % series_palette().size()];
    s.markers = markers;
    for (const auto& [it, v] : values) s.points.push_back({axis.x(it), v, it});
    return s;
}

// A chart of one quantity: the log's field, else the TensorBoard tag.
struct Quantity {
    const char* id;
    const char* title;
    const char* y_label;
    const char* series;
    std::function<std::optional<double>(const IterationRecord&)> get;
    const char* tag;
};

std::string short_id(const std::string& run_id) { return run_id.substr(0, 8); }

}  // namespace

Report build_report(const ReportSources& src, const std::string& title) {
    Report rep;
    rep.title = title.empty() ? "Training report" : title;

    // ---- the log ----
    std::map<std::int64_t, IterationRecord> records;
    std::map<std::pair<std::string, std::string>, ByIteration> validation;  // (set, key) → values
    std::set<std::int64_t> resumes;
    std::set<std::pair<std::int64_t, std::string>> seen_alerts;
    for (const auto& log : src.logs) {
        for (const auto& r : log.iterations) records[r.iteration] = r;
        for (const auto& v : log.validations)
            // The final evaluation reads other batches than the one at the same iteration: its own series.
            if (v.iteration) validation[{v.set + (v.end_of_training ? " (end of training)" : ""), v.key}][*v.iteration] = v.value;
        for (const auto& e : log.events) {
            if (e.kind == LogEventKind::resume) resumes.insert(e.iteration);
            else if (seen_alerts.insert({e.iteration, e.text}).second) rep.alerts.push_back({e.iteration, e.text});
        }
        std::string line = log.source + ": " + std::to_string(log.lines) + " lines, " + std::to_string(log.iterations.size()) +
                           " iteration lines, " + std::to_string(log.validations.size()) + " validation losses, " +
                           std::to_string(log.events.size()) + " alerts / resumes";
        if (log.partial_bytes) line += " (an unfinished last line of " + std::to_string(log.partial_bytes) + " bytes left out)";
        rep.sources.push_back(std::move(line));
    }

    // ---- TensorBoard ----
    Scalars tb;
    for (const auto& [path, file] : src.events) {
        for (const auto& e : file.scalars) tb.by_tag[e.tag][e.step] = e.value;
        std::string line = path + ": " + std::to_string(file.records) + " events, " + std::to_string(file.scalars.size()) + " scalars";
        if (file.truncated_bytes) line += " (an unfinished last record of " + std::to_string(file.truncated_bytes) + " bytes left out)";
        rep.sources.push_back(std::move(line));
    }

    ByIteration tokens = from_records(records, [](const IterationRecord& r) -> std::optional<double> {
        return r.consumed_tokens ? std::optional<double>(static_cast<double>(*r.consumed_tokens)) : std::nullopt;
    });
    if (tokens.size() != records.size()) tokens.clear();  // an old format without tokens: iterations for all
    if (records.empty())
        if (const auto* t = tb.find("steps-vs-tokens/y=tokens,x=steps")) tokens = *t;
    const TokenAxis axis(tokens);
    const std::string x_label = axis.by_tokens() ? "consumed tokens" : "iteration";

    // ---- job boundaries ----
    std::vector<ChartBoundary> boundaries;
    std::set<std::int64_t> bounded;
    for (const auto& [path, jobs] : src.ledgers) {
        for (std::size_t i = 0; i < jobs.size(); ++i) {
            const auto& j = jobs[i];
            rep.jobs.push_back(j);
            if (j.resumed_iteration == 0 && i == 0) continue;  // the start of the plot
            std::string label = "job " + (j.job_id ? *j.job_id + " " : std::string()) + "(run " + short_id(j.run_id) + ") " +
                                (j.resumed_iteration > 0 ? "resumed from iteration " + std::to_string(j.resumed_iteration)
                                                         : std::string("started from scratch"));
            if (bounded.insert(j.resumed_iteration).second) boundaries.push_back({axis.x(j.resumed_iteration), label});
        }
        rep.sources.push_back(path + ": " + std::to_string(jobs.size()) + " jobs");
    }
    for (std::int64_t it : resumes)
        if (bounded.insert(it).second)
            boundaries.push_back({axis.x(it), "a job loaded the checkpoint of iteration " + std::to_string(it)});

    auto new_chart = [&](const std::string& id, const std::string& chart_title, const std::string& y_label) {
        Chart c;
        c.id = id;
        c.title = chart_title;
        c.x_label = x_label;
        c.y_label = y_label;
        c.boundaries = boundaries;
        return c;
    };

    // ---- loss: training losses, validation losses, alerts ----
    {
        Chart c = new_chart("loss", "Loss", "loss");
        std::vector<std::string> keys;
        for (const auto& [it, r] : records)
            for (const auto& [k, v] : r.losses)
                if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
        for (const auto& k : keys)
            c.series.push_back(make_series(k, from_records(records, [&](const IterationRecord& r) -> std::optional<double> {
                                               for (const auto& [kk, v] : r.losses)
                                                   if (kk == k) return v;
                                               return std::nullopt;
                                           }), axis, c.series.size()));
        if (keys.empty())
            if (const auto* t = tb.find("lm-loss-training/lm loss")) c.series.push_back(make_series("lm loss", *t, axis, 0));
        for (const bool end : {false, true})  // the periodic evaluations first: they are the validation curve
            for (const auto& [sk, values] : validation)
                if (sk.first.ends_with(" (end of training)") == end)
                    c.series.push_back(make_series(sk.first + " " + sk.second, values, axis, c.series.size(), true));
        if (validation.empty())
            for (const auto& [tag, values] : tb.by_tag)
                if (tag.starts_with("lm-loss-validation/") && tag.ends_with(" validation"))
                    c.series.push_back(make_series("validation " + tag.substr(19, tag.size() - 19 - 11), values, axis, c.series.size(), true));
        const ChartSeries* train = c.series.empty() || c.series.front().markers ? nullptr : &c.series.front();
        for (const auto& a : rep.alerts) {
            double y = NAN;
            if (train) {  // on the curve: the value logged at the alert's iteration (or the last before it)
                for (const auto& p : train->points)
                    if (p.iteration <= a.iteration && std::isfinite(p.y)) y = p.y;
            }
            c.alerts.push_back({axis.x(a.iteration), y, a.text});
        }
        if (!c.series.empty()) rep.charts.push_back(std::move(c));
    }

    // ---- one quantity per chart ----
    using R = IterationRecord;
    const Quantity quantities[] = {
        {"learning-rate", "Learning rate", "learning rate", "learning rate", [](const R& r) { return r.learning_rate; },
         "learning-rate/learning-rate"},
        {"batch-size", "Global batch size", "samples", "global batch size", [](const R& r) { return r.global_batch_size; },
         "batch-size/batch-size"},
        {"grad-norm", "Gradient norm", "grad norm", "grad norm", [](const R& r) { return r.grad_norm; }, "grad-norm/grad-norm"},
        {"loss-scale", "Loss scale", "loss scale", "loss scale", [](const R& r) { return r.loss_scale; }, "loss-scale/loss-scale"},
        {"throughput", "Throughput", "tokens per second", "tokens per second", [](const R& r) { return r.tokens_per_second; },
         "iteration-time/tokens per second"},
        {"samples-per-second", "Samples per second", "samples per second", "samples per second",
         [](const R& r) { return r.samples_per_second; }, "iteration-time/samples per second"},
        {"tflops", "TFLOPs per GPU", "TFLOPs", "TFLOPs", [](const R& r) { return r.tflops; },
         "iteration-time/TFLOPs per gpu (estimated)"},
        {"iteration-time", "Time per iteration", "seconds", "elapsed time per iteration (s)",
         [](const R& r) { return r.seconds_per_iteration; }, "iteration-time/iteration-time"},
        {"energy", "Energy of the job so far", "kWh", "energy (kWh)", [](const R& r) { return r.energy_kwh; }, ""},
        {"co2", "CO2 of the job so far", "kg CO2eq", "CO2 (kg)", [](const R& r) { return r.co2_kg; }, ""},
    };
    for (const auto& q : quantities) {
        Chart c = new_chart(q.id, q.title, q.y_label);
        ByIteration values = from_records(records, q.get);
        if (values.empty() && *q.tag)
            if (const auto* t = tb.find(q.tag)) values = *t;
        if (values.empty()) continue;
        c.series.push_back(make_series(q.series, values, axis, 0));
        rep.charts.push_back(std::move(c));
    }

    // ---- emissions.csv: totals over time, each process's rows after the previous ones ----
    for (const auto& [path, rows] : src.emissions) {
        Chart c;
        c.id = "emissions";
        if (src.emissions.size() > 1) c.id += "-" + std::to_string(rep.charts.size());
        c.title = "Energy and CO2 (emissions.csv)";
        c.x_label = "hours of training";
        c.y_label = "kWh / kg CO2eq";
        ChartSeries energy{"energy_consumed (kWh)", series_palette()[0], false, {}};
        ChartSeries co2{"emissions (kg CO2eq)", series_palette()[1], false, {}};
        double t0 = 0, e0 = 0, c0 = 0, last_t = 0, last_e = 0, last_c = 0;
        std::string run;
        for (const auto& r : rows) {
            if (r.run_id != run) {
                if (!run.empty()) {
                    t0 = last_t, e0 = last_e, c0 = last_c;
                    c.boundaries.push_back({t0 / 3600.0, "process " + short_id(r.run_id) + " started (line " + std::to_string(r.line) + ")"});
                }
                run = r.run_id;
            }
            last_t = t0 + r.duration_s;
            last_e = e0 + r.energy_kwh;
            last_c = c0 + r.emissions_kg;
            energy.points.push_back({last_t / 3600.0, last_e, -1});
            co2.points.push_back({last_t / 3600.0, last_c, -1});
        }
        rep.sources.push_back(path + ": " + std::to_string(rows.size()) + " rows");
        if (rows.empty()) continue;
        rep.summary.emplace_back("energy (emissions.csv)", format_value(last_e) + " kWh");
        rep.summary.emplace_back("CO2 (emissions.csv)", format_value(last_c) + " kg CO2eq");
        c.series.push_back(std::move(energy));
        c.series.push_back(std::move(co2));
        rep.charts.push_back(std::move(c));
    }

    // ---- summary ----
    std::vector<std::pair<std::string, std::string>> head;
    if (!records.empty()) {
        const auto& last = records.rbegin()->second;
        head.emplace_back("iteration", std::to_string(last.iteration) + " of " + std::to_string(last.train_iters));
        if (last.consumed_tokens) head.emplace_back("consumed tokens", std::to_string(*last.consumed_tokens));
        for (const auto& [k, v] : last.losses) head.emplace_back("last " + k, format_value(v));
    }
    for (const auto& [sk, values] : validation)
        head.emplace_back("last " + sk.first + " " + sk.second, format_value(values.rbegin()->second) + " (iteration " +
                                                                   std::to_string(values.rbegin()->first) + ")");
    if (!rep.jobs.empty()) head.emplace_back("jobs (run ledger)", std::to_string(rep.jobs.size()));
    head.emplace_back("alerts", std::to_string(rep.alerts.size()));
    rep.summary.insert(rep.summary.begin(), head.begin(), head.end());
    return rep;
}

}  // namespace mds::report
