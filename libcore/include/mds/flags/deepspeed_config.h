// DeepSpeedConfig: the keys of a DeepSpeed config JSON (`--deepspeed_config ds_config.json`) that
// BigScience's Megatron-DeepSpeed trainings set. Other keys are kept as a list of JSON paths so the
// tool can warn about them (DeepSpeed itself accepts many more). How the values meet the Megatron
// flags — conflicts, defaults — is apply_deepspeed_config() in train_args.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>  // nlohmann::json

namespace mds::flags {

// "fp16": {...}: DeepSpeed's dynamic loss scaler. Unset fields take DeepSpeed's defaults when the
// section is enabled (loss_scale 0 = dynamic, window 1000, hysteresis 2, min 1, power 16).
struct DeepSpeedFp16 {
    bool enabled = false;
    std::optional<double> loss_scale;                 // 0 means dynamic scaling
    std::optional<std::int64_t> loss_scale_window;
    std::optional<std::int64_t> hysteresis;
    std::optional<double> min_loss_scale;
    std::optional<std::int64_t> initial_scale_power;  // initial scale = 2^power
};

// "curriculum_learning": sequence-length warmup (DeepSpeed curriculum, type "seqlen"). Schedules
// (mds/flags/curriculum.h has the formulas): "fixed_linear" — the difficulty, i.e. the sequence
// length, grows linearly from min to max over total_curriculum_step steps, in multiples of
// difficulty_step; "fixed_root" — the same along a root_degree-th root; "fixed_discrete" —
// difficulties[i] up to step max_steps[i], the last difficulty after that.
struct CurriculumLearningConfig {
    bool enabled = false;
    std::string curriculum_type = "seqlen";
    std::int64_t min_difficulty = 0;
    std::int64_t max_difficulty = 0;
    std::string schedule_type = "fixed_linear";
    std::int64_t total_curriculum_step = 0;
    std::int64_t difficulty_step = 0;
    double root_degree = 0.0;                  // fixed_root: schedule_config.root_degree
    std::vector<std::int64_t> difficulties;    // fixed_discrete: schedule_config.difficulty
    std::vector<std::int64_t> max_steps;       // fixed_discrete: schedule_config.max_step (one fewer)
};

struct DeepSpeedConfig {
    std::string source;  // the file name, for messages
    std::optional<std::int64_t> train_micro_batch_size_per_gpu;
    std::optional<std::int64_t> train_batch_size;
    std::optional<std::int64_t> gradient_accumulation_steps;
    std::optional<double> gradient_clipping;
    std::optional<std::int64_t> zero_stage;  // zero_optimization.stage
    std::optional<bool> overlap_comm;        // zero_optimization.overlap_comm: all-reduce during backward
    std::optional<std::int64_t> reduce_bucket_size;  // zero_optimization.reduce_bucket_size, in elements
    std::optional<std::string> offload_optimizer_device;  // zero_optimization.offload_optimizer.device: none|cpu
    std::optional<bool> offload_optimizer_pin_memory;     // ...offload_optimizer.pin_memory (mds pins on CUDA)
    std::optional<bool> zero_force_ds_cpu_optimizer;      // read, no effect (DeepSpeed's client-optimizer guard)
    std::optional<DeepSpeedFp16> fp16;       // present when the "fp16" section is
    std::optional<bool> bf16_enabled;        // bf16.enabled
    std::optional<CurriculumLearningConfig> curriculum_learning;
    std::int64_t steps_per_print = 10;
    bool wall_clock_breakdown = false;
    // JSON paths of keys mds does not read ("zero_optimization.overlap_comm").
    std::vector<std::string> unknown_keys;
};

// Reads the keys above from `json`. Throws mds::Error naming `source` and the JSON path on a wrong
// type or an unsupported value ("ds_config.json: curriculum_learning.curriculum_type: ...").
DeepSpeedConfig parse_deepspeed_config(const nlohmann::json& json, const std::string& source);
DeepSpeedConfig parse_deepspeed_config(const std::string& text, const std::string& source);
DeepSpeedConfig read_deepspeed_config(const std::filesystem::path& path);

}  // namespace mds::flags
