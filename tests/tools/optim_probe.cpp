// optim_probe: drives the mds::optim schedule pieces for tests/crosscheck/test_optim_megatron.py.
// Reads one case per stdin line, `<kind> key=value ...` (lists comma-separated), and prints one
// JSON object per line: the sequences of lr, batch size or loss scale that Megatron's Python
// classes are compared with. Doubles are printed with 17 significant digits (exact round trip).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mds/optim/batch_size_rampup.h"
#include "mds/optim/grad_clip.h"
#include "mds/optim/loss_scaler.h"
#include "mds/optim/lr_schedule.h"
#include "mds/util/error.h"

using namespace mds::optim;

namespace {

using Args = std::map<std::string, std::string>;

std::string get(const Args& a, const std::string& key, const std::string& fallback = "") {
    auto it = a.find(key);
    return it == a.end() ? fallback : it->second;
}
double num(const Args& a, const std::string& key, double fallback = 0.0) {
    auto v = get(a, key);
    return v.empty() ? fallback : std::strtod(v.c_str(), nullptr);
}
std::int64_t integer(const Args& a, const std::string& key, std::int64_t fallback = 0) {
    auto v = get(a, key);
    return v.empty() ? fallback : std::strtoll(v.c_str(), nullptr, 10);
}
std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    if (s.empty()) return out;
    std::string item;
    std::istringstream in(s);
    while (std::getline(in, item, sep)) out.push_back(item);
    return out;
}
std::vector<std::int64_t> integers(const Args& a, const std::string& key) {
    std::vector<std::int64_t> out;
    for (auto& s : split(get(a, key), ',')) out.push_back(std::strtoll(s.c_str(), nullptr, 10));
    return out;
}

std::string json_number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    std::string s = buf;
    if (s == "inf") return "\"inf\"";
    if (s == "-inf") return "\"-inf\"";
    if (s == "nan" || s == "-nan") return "\"nan\"";
    return s;
}
template <class T>
std::string json_list(const std::vector<T>& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += ",";
        if constexpr (std::is_floating_point_v<T>)
            out += json_number(static_cast<double>(v[i]));
        else
            out += std::to_string(v[i]);
    }
    return out + "]";
}
std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out + "\"";
}

LrScheduleParams lr_params(const Args& a) {
    LrScheduleParams p;
    p.init_lr = num(a, "init_lr");
    p.max_lr = num(a, "max_lr");
    p.min_lr = num(a, "min_lr");
    p.lr_warmup_steps = num(a, "warmup");
    p.lr_decay_steps = integer(a, "decay");
    p.lr_decay_style = parse_lr_decay_style(get(a, "style", "linear"));
    if (!get(a, "decay_tokens").empty()) p.lr_decay_tokens = integer(a, "decay_tokens");
    p.start_wd = num(a, "start_wd");
    p.end_wd = num(a, "end_wd");
    p.wd_incr_steps = integer(a, "wd_steps");
    p.wd_incr_style = parse_wd_incr_style(get(a, "wd_style", "constant"));
    return p;
}

// lr and wd after construction and after each step; then a resume at save_at replays the rest.
std::string run_lr(const Args& a) {
    const auto params = lr_params(a);
    const auto increments = integers(a, "increments");
    auto tokens = integers(a, "tokens");
    tokens.resize(increments.size(), 0);
    const auto save_at = static_cast<std::size_t>(integer(a, "save_at", 0));
    LrSchedule s(params);
    std::vector<double> lr{s.lr()}, wd{s.weight_decay()};
    LrScheduleState saved = s.state();
    for (std::size_t i = 0; i < increments.size(); ++i) {
        s.step(increments[i], tokens[i]);
        lr.push_back(s.lr());
        wd.push_back(s.weight_decay());
        if (i + 1 == save_at) saved = s.state();
    }
    LrSchedule resumed(params);
    resumed.load_state(saved, LrCheckpointPolicy::require_match);
    std::vector<double> resumed_lr{resumed.lr()};
    for (std::size_t i = save_at; i < increments.size(); ++i) {
        resumed.step(increments[i], tokens[i]);
        resumed_lr.push_back(resumed.lr());
    }
    return "{\"lr\":" + json_list(lr) + ",\"wd\":" + json_list(wd) + ",\"resumed_lr\":" + json_list(resumed_lr) + "}";
}

// Global batch sizes and micro-batch counts over `iters` iterations, consuming gbs samples each.
std::string run_mb(const Args& a) {
    std::optional<RampupBatchSize> rampup;
    if (!get(a, "start").empty())
        rampup = RampupBatchSize{integer(a, "start"), integer(a, "incr"), integer(a, "samples")};
    NumMicroBatchesCalculator calc(integer(a, "gbs"), integer(a, "mbs"), integer(a, "dp"), rampup);
    std::vector<std::int64_t> gbs, nmb;
    std::int64_t consumed = 0;
    for (std::int64_t i = 0; i < integer(a, "iters"); ++i) {
        calc.update(consumed);
        gbs.push_back(calc.current_global_batch_size());
        nmb.push_back(calc.num_micro_batches());
        consumed += calc.current_global_batch_size();
    }
    std::vector<std::int64_t> at;
    for (auto c : integers(a, "consumed")) at.push_back(calc.global_batch_size_at(c));
    std::string out = "{\"gbs\":" + json_list(gbs) + ",\"nmb\":" + json_list(nmb) + ",\"at\":" + json_list(at) +
                      ",\"per_incr\":" + json_number(calc.rampup_samples_per_increment());
    if (!get(a, "train_samples").empty())
        out += ",\"train_iters\":" + std::to_string(calc.train_iters_for_samples(integer(a, "train_samples")));
    return out + "}";
}

std::string run_ds_scaler(const Args& a) {
    DeepSpeedLossScaler::Config c;
    c.dynamic = get(a, "static").empty();
    c.static_scale = num(a, "static", 1.0);
    c.init_scale = num(a, "init", 65536.0);
    c.scale_window = integer(a, "window", 1000);
    c.min_scale = num(a, "min", 1.0);
    c.hysteresis = integer(a, "hysteresis", 2);
    c.consecutive_hysteresis = integer(a, "consecutive", 0) != 0;
    c.raise_error_at_min_scale = integer(a, "raise", 1) != 0;
    c.stable_interval_growth = integer(a, "stable", 0) != 0;
    DeepSpeedLossScaler s(c);
    std::vector<double> scale;
    std::vector<std::int64_t> hyst;
    std::string error_at = "null";
    const std::string pattern = get(a, "overflows");
    std::size_t half = pattern.size() / 2;
    DeepSpeedLossScaler::State saved = s.state();
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        if (i == half) {  // save, then continue in a fresh scaler loaded from the state
            saved = s.state();
            DeepSpeedLossScaler fresh(c);
            fresh.load_state(saved);
            s = fresh;
        }
        try {
            s.update(pattern[i] == '1');
        } catch (const mds::Error&) {
            error_at = std::to_string(i);
            break;
        }
        scale.push_back(s.scale());
        hyst.push_back(s.state().cur_hysteresis);
    }
    return "{\"scale\":" + json_list(scale) + ",\"hyst\":" + json_list(hyst) + ",\"error_at\":" + error_at +
           ",\"skipped\":" + std::to_string(s.state().skipped_iterations) + "}";
}

std::string run_meg_scaler(const Args& a) {
    MegatronGradScaler::Config c;
    c.dynamic = get(a, "static").empty();
    c.initial_scale = static_cast<float>(c.dynamic ? num(a, "initial", 4294967296.0) : num(a, "static"));
    c.min_scale = static_cast<float>(num(a, "min", 1.0));
    c.growth_factor = static_cast<float>(num(a, "growth", 2.0));
    c.backoff_factor = static_cast<float>(num(a, "backoff", 0.5));
    c.growth_interval = integer(a, "interval", 1000);
    c.hysteresis = integer(a, "hysteresis", 2);
    MegatronGradScaler s(c);
    std::vector<double> scale;
    std::vector<std::int64_t> growth, hyst;
    const std::string pattern = get(a, "overflows");
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        if (i == pattern.size() / 2) {
            MegatronGradScaler fresh(c);
            fresh.load_state(s.state());
            s = fresh;
        }
        s.update(pattern[i] == '1');
        scale.push_back(static_cast<double>(s.scale()));
        growth.push_back(s.state().growth_tracker);
        hyst.push_back(s.state().hysteresis_tracker);
    }
    return "{\"scale\":" + json_list(scale) + ",\"growth\":" + json_list(growth) + ",\"hyst\":" + json_list(hyst) +
           ",\"inv_scale\":" + json_number(static_cast<double>(s.inv_scale())) +
           ",\"skipped\":" + std::to_string(s.state().skipped_iterations) + "}";
}

// Spans separated by ';', values by ','.
std::string run_clip(const Args& a) {
    std::vector<std::vector<float>> data;
    for (auto& span : split(get(a, "data"), ';')) {
        std::vector<float> v;
        for (auto& x : split(span, ',')) v.push_back(std::strtof(x.c_str(), nullptr));
        data.push_back(v);
    }
    std::vector<std::span<float>> grads(data.begin(), data.end());
    std::vector<std::span<const float>> view(data.begin(), data.end());
    const std::int64_t zeros = count_zeros(view);
    const bool inf = has_inf_or_nan(view);
    const double norm = clip_grad_norm(grads, num(a, "max_norm"));
    std::vector<float> flat;
    for (auto& v : data) flat.insert(flat.end(), v.begin(), v.end());
    return "{\"norm\":" + json_number(norm) + ",\"zeros\":" + std::to_string(zeros) +
           ",\"inf\":" + (inf ? "true" : "false") + ",\"clipped\":" + json_list(flat) + "}";
}

}  // namespace

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string kind, token;
        in >> kind;
        Args args;
        while (in >> token) {
            auto eq = token.find('=');
            if (eq != std::string::npos) args[token.substr(0, eq)] = token.substr(eq + 1);
        }
        std::string out;
        try {
            if (kind == "lr") out = run_lr(args);
            else if (kind == "mb") out = run_mb(args);
            else if (kind == "ds_scaler") out = run_ds_scaler(args);
            else if (kind == "meg_scaler") out = run_meg_scaler(args);
            else if (kind == "clip") out = run_clip(args);
            else out = "{\"error\":" + json_string("unknown kind " + kind) + "}";
        } catch (const mds::Error& e) {
            out = "{\"error\":" + json_string(e.what()) + "}";
        }
        std::cout << out << '\n';
    }
    return 0;
}
