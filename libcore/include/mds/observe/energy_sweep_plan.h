// What mds-energy-sweep runs (docs/mds-energy-sweep.md): every combination of the swept micro /
// global batch sizes (and activation recomputation off / on), which of them can run, and the
// mds-train command line of each. No processes here: energy_sweep.h runs them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::observe {

// One point of the sweep.
struct SweepSetting {
    std::int64_t micro_batch_size = 0;   // --micro-batch-size
    std::int64_t global_batch_size = 0;  // --global-batch-size
    std::optional<bool> recompute;       // --checkpoint-activations; nullopt: not swept
    // Why the setting cannot run ("gbs 6 is not a multiple of mbs 4"; with data parallelism
    // "... of mbs 4 x data-parallel size 2");
    // empty when it can.
    std::string skip_reason;

    // "mbs 2 gbs 8" or "mbs 2 gbs 8 recompute on": how tables and progress lines name it.
    std::string label() const;
    // "mbs2-gbs8" or "mbs2-gbs8-recompute-on": its folder under --output-dir.
    std::string slug() const;
    bool runnable() const { return skip_reason.empty(); }
};

// "1,2,4" -> {1, 2, 4}: positive integers, no repeats. Throws mds::UsageError naming `flag` and
// the bad item.
std::vector<std::int64_t> parse_batch_size_list(std::string_view flag, std::string_view text);
// "off,on" (also "false"/"true", "0"/"1", "no"/"yes") -> {false, true}, no repeats. Throws
// mds::UsageError naming `flag`.
std::vector<bool> parse_recompute_list(std::string_view flag, std::string_view text);

// Every combination, global batch size outermost, then micro batch size, then recompute (in the
// order the lists give them), so settings of one global batch size sit together in the table.
// A global batch size that is not a multiple of micro batch size x data_parallel_size is kept with
// its skip_reason set (reported, never run). `recompute` empty: not swept.
std::vector<SweepSetting> plan_sweep(const std::vector<std::int64_t>& micro_batch_sizes,
                                     const std::vector<std::int64_t>& global_batch_sizes,
                                     const std::vector<bool>& recompute, std::int64_t data_parallel_size = 1);

// What the sweep needs from the mds-train flags given after `--`.
struct SweepTrainFlags {
    std::int64_t seq_length = 0;  // --seq-length (required)
    bool has_log_interval = false;  // --log-interval given
    bool has_eval_iters = false;    // --eval-iters given
};

// Reads the mds-train flags (`--flag value` or `--flag=value`). Throws mds::UsageError when a flag
// the sweep sets itself is given (--micro-batch-size, --global-batch-size, --train-iters,
// --train-samples, --codecarbon-dir; --checkpoint-activations when recompute is swept), when one
// would spoil the comparison (--rampup-batch-size: the batch size would change during the run;
// --load / --save: every setting must start from the same fresh model and pay for no checkpoint
// writes), or when --seq-length is missing or not a positive integer.
SweepTrainFlags inspect_sweep_train_flags(const std::vector<std::string>& flags, bool recompute_swept);

// The mds-train argv of one setting: `mds_train`, the user's flags, then the setting's batch sizes,
// --checkpoint-activations when recompute is on, --train-iters, --codecarbon-dir, and --log-interval 1
// and --eval-iters 0 where the user gave none (every iteration logged; no evaluation, whose time and
// energy would be counted as training's).
std::vector<std::string> sweep_train_argv(const std::string& mds_train, const std::vector<std::string>& flags,
                                          const SweepTrainFlags& info, const SweepSetting& setting,
                                          std::int64_t train_iters, const std::string& codecarbon_dir);

}  // namespace mds::observe
