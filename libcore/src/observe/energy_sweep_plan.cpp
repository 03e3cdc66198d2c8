// mds-energy-sweep's settings and their mds-train command lines (energy_sweep_plan.h).
#include "mds/observe/energy_sweep_plan.h"

#include <algorithm>

#include "mds/util/error.h"
#include "mds/util/int_range.h"  // parse_whole_number
#include "mds/util/text.h"  // trim, to_lower

namespace mds::observe {

namespace {

// The items of a comma-separated list, trimmed; an empty item is an error.
std::vector<std::string> split_list(std::string_view flag, std::string_view text) {
    std::vector<std::string> items;
    std::size_t start = 0;
    while (true) {
        const std::size_t comma = text.find(',', start);
        const std::string item = trim(text.substr(start, comma == std::string_view::npos ? text.size() - start : comma - start));
        if (item.empty())
            throw UsageError(std::string(flag) + " '" + std::string(text) +
                             "': an empty item; expected a comma-separated list such as 1,2,4");
        items.push_back(item);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return items;
}

// The flag's name when `arg` is `--name` or `--name=value`, else empty.
std::string_view flag_name(std::string_view arg) {
    if (!arg.starts_with("--")) return {};
    return arg.substr(0, arg.find('='));
}

// Flags the sweep sets for every setting, and what to give instead.
struct SweptFlag {
    std::string_view name;
    std::string_view instead;
};
constexpr SweptFlag kSweptFlags[] = {
    {"--micro-batch-size", "give the sizes to sweep as --micro-batch-sizes"},
    {"--global-batch-size", "give the sizes to sweep as --global-batch-sizes"},
    {"--train-iters", "give it to mds-energy-sweep as --train-iters"},
    {"--train-samples", "the sweep runs --train-iters iterations of every setting"},
    {"--codecarbon-dir", "every setting gets its own under --output-dir"},
    {"--rampup-batch-size", "a batch size that changes during the run cannot be compared"},
    {"--load", "every setting starts from the same freshly initialized model"},
    {"--save", "checkpoint writes would be counted as training energy; every setting starts from scratch"},
};

}  // namespace

std::string SweepSetting::label() const {
    std::string s = "mbs " + std::to_string(micro_batch_size) + " gbs " + std::to_string(global_batch_size);
    if (recompute) s += *recompute ? " recompute on" : " recompute off";
    return s;
}

std::string SweepSetting::slug() const {
    std::string s = "mbs" + std::to_string(micro_batch_size) + "-gbs" + std::to_string(global_batch_size);
    if (recompute) s += *recompute ? "-recompute-on" : "-recompute-off";
    return s;
}

std::vector<std::int64_t> parse_batch_size_list(std::string_view flag, std::string_view text) {
    std::vector<std::int64_t> sizes;
    for (const std::string& item : split_list(flag, text)) {
        const auto v = parse_whole_number(item);
        if (!v || *v < 1)
            throw UsageError(std::string(flag) + " '" + std::string(text) + "': '" + item +
                             "' is not a positive integer; expected a comma-separated list such as 1,2,4");
        if (std::find(sizes.begin(), sizes.end(), *v) != sizes.end())
            throw UsageError(std::string(flag) + " '" + std::string(text) + "': " + item + " is listed twice");
        sizes.push_back(*v);
    }
    return sizes;
}

std::vector<bool> parse_recompute_list(std::string_view flag, std::string_view text) {
    std::vector<bool> values;
    for (const std::string& item : split_list(flag, text)) {
        const std::string v = to_lower(item);
        bool on;
        if (v == "on" || v == "true" || v == "yes" || v == "1")
            on = true;
        else if (v == "off" || v == "false" || v == "no" || v == "0")
            on = false;
        else
            throw UsageError(std::string(flag) + " '" + std::string(text) + "': '" + item +
                             "' is neither on nor off; expected off, on or off,on");
        if (std::find(values.begin(), values.end(), on) != values.end())
            throw UsageError(std::string(flag) + " '" + std::string(text) + "': " + (on ? "on" : "off") +
                             " is listed twice");
        values.push_back(on);
    }
    return values;
}

std::vector<SweepSetting> plan_sweep(const std::vector<std::int64_t>& micro_batch_sizes,
                                     const std::vector<std::int64_t>& global_batch_sizes,
                                     const std::vector<bool>& recompute, std::int64_t data_parallel_size) {
    std::vector<std::optional<bool>> recompute_values;
    for (const bool r : recompute) recompute_values.emplace_back(r);
    if (recompute_values.empty()) recompute_values.emplace_back(std::nullopt);
    std::vector<SweepSetting> settings;
    for (const std::int64_t gbs : global_batch_sizes)
        for (const std::int64_t mbs : micro_batch_sizes)
            for (const auto& r : recompute_values) {
                SweepSetting s{.micro_batch_size = mbs, .global_batch_size = gbs, .recompute = r, .skip_reason = {}};
                // Megatron's check (arguments.py): the global batch is a whole number of micro
                // batches on every data-parallel rank.
                const std::int64_t step = mbs * data_parallel_size;
                if (gbs % step != 0)
                    s.skip_reason = "gbs " + std::to_string(gbs) + " is not a multiple of mbs " + std::to_string(mbs) +
                                    (data_parallel_size == 1 ? std::string()
                                                             : " x data-parallel size " + std::to_string(data_parallel_size));
                settings.push_back(std::move(s));
            }
    return settings;
}

SweepTrainFlags inspect_sweep_train_flags(const std::vector<std::string>& flags, bool recompute_swept) {
    SweepTrainFlags info;
    std::optional<std::string> seq_length;
    for (std::size_t i = 0; i < flags.size(); ++i) {
        const std::string_view name = flag_name(flags[i]);
        if (name.empty()) continue;
        for (const SweptFlag& f : kSweptFlags)
            if (name == f.name)
                throw UsageError("the mds-train flags after -- hold " + std::string(name) + ", which the sweep sets: " +
                                 std::string(f.instead));
        if (name == "--checkpoint-activations" && recompute_swept)
            throw UsageError("the mds-train flags after -- hold --checkpoint-activations while --recompute sweeps it: "
                             "remove one of them");
        if (name == "--log-interval") info.has_log_interval = true;
        if (name == "--eval-iters") info.has_eval_iters = true;
        if (name == "--seq-length") {
            const std::string_view arg = flags[i];
            if (arg.size() > name.size())
                seq_length = std::string(arg.substr(name.size() + 1));
            else if (i + 1 < flags.size())
                seq_length = flags[i + 1];
            else
                seq_length = "";
        }
    }
    if (!seq_length)
        throw UsageError("the mds-train flags after -- lack --seq-length (needed to count the tokens of each setting)");
    const auto v = parse_whole_number(*seq_length);
    if (!v || *v < 1)
        throw UsageError("the mds-train flags after -- hold --seq-length '" + *seq_length +
                         "'; expected a positive integer");
    info.seq_length = *v;
    return info;
}

std::vector<std::string> sweep_train_argv(const std::string& mds_train, const std::vector<std::string>& flags,
                                          const SweepTrainFlags& info, const SweepSetting& setting,
                                          std::int64_t train_iters, const std::string& codecarbon_dir) {
    std::vector<std::string> argv{mds_train};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--micro-batch-size", std::to_string(setting.micro_batch_size), "--global-batch-size",
                             std::to_string(setting.global_batch_size)});
    if (setting.recompute && *setting.recompute) argv.emplace_back("--checkpoint-activations");
    argv.insert(argv.end(), {"--train-iters", std::to_string(train_iters), "--codecarbon-dir", codecarbon_dir});
    if (!info.has_log_interval) argv.insert(argv.end(), {"--log-interval", "1"});
    if (!info.has_eval_iters) argv.insert(argv.end(), {"--eval-iters", "0"});
    return argv;
}

}  // namespace mds::observe
