// main_log.txt parser (training_log.h). Lines are split on '|' into `key: value` fields, as
// Megatron-DeepSpeed's training_log builds them; the keys are matched by name, not position, so the
// optional fields (loss scale, grad norm, mds's tokens per second / energy) may come and go.
#include "mds/report/training_log.h"

#include <charconv>
#include <cmath>

#include "mds/util/error.h"
#include "mds/util/files.h"  // MappedFile
#include "mds/util/text.h"   // trim

namespace mds::report {

namespace {

std::optional<double> to_double(std::string_view s) {
    const std::string t = trim(s);
    if (t.empty()) return std::nullopt;
    const char* b = t.data();
    const char* e = t.data() + t.size();
    if (*b == '+') ++b;
    double v = 0;
    const auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || p != e) return std::nullopt;
    return v;
}

std::optional<std::int64_t> to_int(std::string_view s) {
    const std::string t = trim(s);
    if (t.empty()) return std::nullopt;
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size()) return std::nullopt;
    return v;
}

// Splits on '|' and gives each non-empty piece to `f(key, value)` split at its last ": ".
template <class F>
void for_each_field(std::string_view s, F&& f) {
    while (!s.empty()) {
        const std::size_t bar = s.find('|');
        const std::string_view piece = s.substr(0, bar);
        if (const std::size_t colon = piece.rfind(": "); colon != std::string_view::npos)
            f(trim(piece.substr(0, colon)), piece.substr(colon + 2));
        if (bar == std::string_view::npos) break;
        s.remove_prefix(bar + 1);
    }
}

bool ends_with_word(std::string_view key, std::string_view word) {
    return key.size() >= word.size() && key.substr(key.size() - word.size()) == word;
}

// The number after "iteration " at or after `from`, if any.
std::optional<std::int64_t> iteration_after(std::string_view line, std::size_t from) {
    const std::size_t at = line.find("iteration ", from);
    if (at == std::string_view::npos) return std::nullopt;
    std::size_t i = at + 10;
    std::size_t j = i;
    while (j < line.size() && line[j] >= '0' && line[j] <= '9') ++j;
    if (j == i) return iteration_after(line, at + 10);
    return to_int(line.substr(i, j - i));
}

}  // namespace

std::optional<IterationRecord> parse_iteration_line(std::string_view line) {
    // ` iteration       10/     100 |`: the head may follow a launcher's prefix ("[default0]:").
    const std::size_t at = line.find(" iteration ");
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view rest = line.substr(at + 11);
    const std::size_t slash = rest.find('/');
    const std::size_t bar = rest.find('|');
    if (slash == std::string_view::npos || bar == std::string_view::npos || slash > bar) return std::nullopt;
    const auto it = to_int(rest.substr(0, slash));
    const auto total = to_int(rest.substr(slash + 1, bar - slash - 1));
    if (!it || !total) return std::nullopt;
    IterationRecord r;
    r.iteration = *it;
    r.train_iters = *total;
    for_each_field(rest.substr(bar + 1), [&](const std::string& key, std::string_view value) {
        if (key == "consumed samples") r.consumed_samples = to_int(value);
        else if (key == "consumed tokens") r.consumed_tokens = to_int(value);
        else if (key == "elapsed time per iteration (s)") r.seconds_per_iteration = to_double(value);
        else if (key == "elapsed time per iteration (ms)") {
            if (auto ms = to_double(value)) r.seconds_per_iteration = *ms / 1000.0;
        } else if (key == "learning rate") r.learning_rate = to_double(value);
        else if (key == "global batch size") r.global_batch_size = to_double(value);
        else if (key == "loss scale") r.loss_scale = to_double(value);
        else if (key == "grad norm") r.grad_norm = to_double(value);
        else if (key == "params norm") r.params_norm = to_double(value);
        else if (key == "number of skipped iterations") r.skipped_iterations = to_double(value);
        else if (key == "number of nan iterations") r.nan_iterations = to_double(value);
        else if (key == "samples per second") r.samples_per_second = to_double(value);
        else if (key == "TFLOPs") r.tflops = to_double(value);
        else if (key == "tokens per second") r.tokens_per_second = to_double(value);
        else if (key == "energy (kWh)") r.energy_kwh = to_double(value);
        else if (key == "CO2 (kg)") r.co2_kg = to_double(value);
        else if (ends_with_word(key, "loss")) {
            if (auto v = to_double(value)) r.losses.emplace_back(key, *v);
        }
    });
    return r;
}

std::optional<std::vector<ValidationRecord>> parse_validation_line(std::string_view line) {
    // `validation loss at iteration 100 | lm loss value: 5.1E+00 | lm loss PPL: 1.6E+02 | `
    const std::size_t at = line.find(" loss at ");
    if (at == std::string_view::npos) return std::nullopt;
    const std::size_t bar = line.find('|', at);
    if (bar == std::string_view::npos) return std::nullopt;
    ValidationRecord head;
    head.set = trim(line.substr(0, at));
    if (head.set.empty()) return std::nullopt;
    const std::string_view prefix = line.substr(at + 9, bar - at - 9);
    if (prefix.starts_with("iteration ")) {
        head.iteration = to_int(prefix.substr(10));
        if (!head.iteration) return std::nullopt;
    } else {
        head.end_of_training = true;
    }
    std::vector<ValidationRecord> out;
    for_each_field(line.substr(bar + 1), [&](const std::string& key, std::string_view value) {
        const auto v = to_double(value);
        if (!v) return;
        if (ends_with_word(key, " value")) {
            ValidationRecord r = head;
            r.key = key.substr(0, key.size() - 6);
            r.value = *v;
            out.push_back(std::move(r));
        } else if (ends_with_word(key, " PPL") && !out.empty() && out.back().key == key.substr(0, key.size() - 4)) {
            out.back().ppl = *v;
        }
    });
    if (out.empty()) return std::nullopt;
    return out;
}

TrainingLog parse_training_log(std::string_view text, std::string source) {
    TrainingLog log;
    log.source = std::move(source);
    std::size_t line_no = 0;
    while (!text.empty()) {
        const std::size_t nl = text.find('\n');
        if (nl == std::string_view::npos) {  // still being written: its fields may be cut anywhere
            log.partial_bytes = text.size();
            break;
        }
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl + 1);
        ++line_no;
        // A carriage return (progress bars) leaves only what was drawn last.
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (const std::size_t cr = line.rfind('\r'); cr != std::string_view::npos) line.remove_prefix(cr + 1);
        if (const std::size_t a = line.find("***ALERT"); a != std::string_view::npos) {
            LogEvent e{LogEventKind::alert, 0, std::string(line.substr(a)), line_no};
            if (auto it = iteration_after(line, a)) e.iteration = *it;
            else if (!log.iterations.empty()) e.iteration = log.iterations.back().iteration;
            log.events.push_back(std::move(e));
            continue;
        }
        if (const std::size_t a = line.find("successfully loaded checkpoint from "); a != std::string_view::npos) {
            if (auto it = iteration_after(line, a)) {
                log.events.push_back({LogEventKind::resume, *it, trim(line.substr(a)), line_no});
                continue;
            }
        }
        if (auto r = parse_iteration_line(line)) {
            r->line = line_no;
            log.iterations.push_back(std::move(*r));
            continue;
        }
        if (auto v = parse_validation_line(line)) {
            for (auto& r : *v) {
                r.line = line_no;
                if (!r.iteration && !log.iterations.empty()) r.iteration = log.iterations.back().iteration;
                log.validations.push_back(std::move(r));
            }
        }
    }
    log.lines = line_no;
    return log;
}

TrainingLog read_training_log(const std::string& path) {
    const MappedFile file(path);  // BigScience's logs run to gigabytes: no copy
    return parse_training_log({reinterpret_cast<const char*>(file.data()), file.size()}, path);
}

}  // namespace mds::report
