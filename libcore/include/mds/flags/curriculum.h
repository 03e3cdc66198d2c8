// Sequence-length curriculum learning as BigScience's Megatron-DeepSpeed ran it (tr8b-104B-cl):
// DeepSpeed's CurriculumScheduler (deepspeed/runtime/data_pipeline/curriculum_scheduler.py, the
// same formulas from DeepSpeed PR #1440 "CL for big science" to 0.19) and how Megatron-DeepSpeed
// applies its difficulty to a training step (megatron/training.py train(), pretrain_gpt.py).
//
// fixed_linear / fixed_root, with t = total_curriculum_step, q = difficulty_step, d = root_degree
// (1 for fixed_linear), computed in doubles as the Python does:
//     x = floor((global_steps / t)^(1/d) × (max - min) + min)
//     difficulty = min(x - x mod q, max)
// fixed_discrete: difficulties[i] for the first i with global_steps <= max_steps[i], the last
// difficulty past max_steps.back().
// The scheduler keeps a current difficulty that is recomputed only while it is below max.
//
// Megatron-DeepSpeed, before training step `iteration + 1` (iteration = steps already done):
//     curriculum_seqlen = scheduler.update_difficulty(iteration + 1)
// tokens, position ids, labels and loss mask of every micro batch are cut to their first
// curriculum_seqlen tokens (when shorter than --seq-length; the attention mask is sliced to match),
// consumed tokens grow by samples × curriculum_seqlen, and the TFLOPs of the log line use
// curriculum_seqlen as the sequence length (observe::ThroughputShape::seq_length). Evaluation runs
// on full --seq-length samples. The scheduler is not restored from a checkpoint: a resumed run
// starts it at min_difficulty and the first update recomputes the difficulty from the step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mds/flags/deepspeed_config.h"  // CurriculumLearningConfig

namespace mds::flags {

// What is wrong with a curriculum config: `field` is the key under "curriculum_learning"
// ("schedule_config.difficulty_step"), `what` the expected vs found.
struct CurriculumConfigProblem {
    std::string field;
    std::string what;
};

// The first problem of an (enabled) config, or nullopt. Stricter than DeepSpeed in two places:
// min_difficulty must be a multiple of difficulty_step (DeepSpeed versions disagree on the first
// difficulty otherwise: the 2021 code rounds it down below min, 0.19 rounds it up), and discrete
// difficulties must lie within [min_difficulty, max_difficulty] (a longer one would exceed
// --seq-length, which validate() compares with max_difficulty).
std::optional<CurriculumConfigProblem> find_curriculum_config_problem(const CurriculumLearningConfig& config);

// DeepSpeed's saved state: the current difficulty.
struct CurriculumSchedulerState {
    std::int64_t current_difficulty = 0;
};

class CurriculumScheduler {
public:
    // Throws mds::Error ("curriculum_learning.<field>: ...") for a config with a problem.
    explicit CurriculumScheduler(CurriculumLearningConfig config);

    // DeepSpeed get_difficulty(global_steps): the schedule's value, without state.
    std::int64_t difficulty_at(std::int64_t global_steps) const;

    // DeepSpeed update_difficulty(global_steps): while the current difficulty is below
    // max_difficulty, sets it to difficulty_at(global_steps); returns it.
    std::int64_t update_difficulty(std::int64_t global_steps);

    std::int64_t current_difficulty() const { return current_difficulty_; }
    const CurriculumLearningConfig& config() const { return config_; }

    CurriculumSchedulerState state() const { return {current_difficulty_}; }
    void load_state(const CurriculumSchedulerState& state) { current_difficulty_ = state.current_difficulty; }

private:
    CurriculumLearningConfig config_;
    std::int64_t current_difficulty_;
};

// One training step under the curriculum, as Megatron-DeepSpeed sees it.
struct CurriculumStep {
    // The scheduler's difficulty: "curriculum seqlen" of the log line and TensorBoard, the
    // sequence length of the TFLOPs formula, and tokens per sample of consumed tokens.
    std::int64_t curriculum_seqlen = 0;
    // Tokens per sample the batch is cut to: min(curriculum_seqlen, seq_length).
    std::int64_t batch_seq_length = 0;
};

// Advances `scheduler` for the step after `completed_iterations` steps (Megatron-DeepSpeed's
// update_difficulty(args.iteration + 1)).
CurriculumStep curriculum_step(CurriculumScheduler& scheduler, std::int64_t completed_iterations,
                               std::int64_t seq_length);

}  // namespace mds::flags
