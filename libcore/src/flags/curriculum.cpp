// DeepSpeed's curriculum scheduler and Megatron-DeepSpeed's use of it (curriculum.h).
#include "mds/flags/curriculum.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <utility>

#include "flag_rows.h"  // text
#include "mds/util/error.h"

namespace mds::flags {

std::optional<CurriculumConfigProblem> find_curriculum_config_problem(const CurriculumLearningConfig& c) {
    if (c.curriculum_type != "seqlen")
        return CurriculumConfigProblem{"curriculum_type", "\"" + c.curriculum_type + "\" is not supported (only \"seqlen\")"};
    if (c.min_difficulty <= 0 || c.max_difficulty < c.min_difficulty)
        return CurriculumConfigProblem{"min_difficulty", "expected 0 < min_difficulty <= max_difficulty, found " +
                                                             text(c.min_difficulty) + " and " + text(c.max_difficulty)};
    if (c.schedule_type == "fixed_discrete") {
        if (c.max_steps.empty())
            return CurriculumConfigProblem{"schedule_config.max_step", "expected a list of at least one step"};
        if (c.difficulties.size() != c.max_steps.size() + 1)
            return CurriculumConfigProblem{"schedule_config.difficulty",
                                           "expected one more difficulty than schedule_config.max_step has steps (" +
                                               text(static_cast<std::int64_t>(c.max_steps.size())) + "), found " +
                                               text(static_cast<std::int64_t>(c.difficulties.size()))};
        for (std::int64_t d : c.difficulties)
            if (d < c.min_difficulty || d > c.max_difficulty)
                return CurriculumConfigProblem{"schedule_config.difficulty",
                                               "expected difficulties between min_difficulty " + text(c.min_difficulty) +
                                                   " and max_difficulty " + text(c.max_difficulty) + ", found " + text(d)};
        return std::nullopt;
    }
    if (c.schedule_type != "fixed_linear" && c.schedule_type != "fixed_root")
        return CurriculumConfigProblem{"schedule_type", "\"" + c.schedule_type +
                                                            "\" is not supported (fixed_linear, fixed_root or fixed_discrete)"};
    if (c.total_curriculum_step <= 0)
        return CurriculumConfigProblem{"schedule_config.total_curriculum_step", "expected a positive number of steps"};
    if (c.difficulty_step <= 0)
        return CurriculumConfigProblem{"schedule_config.difficulty_step", "expected a positive step"};
    if (c.min_difficulty % c.difficulty_step != 0) {
        // The 2021 DeepSpeed that BigScience ran rounds the first difficulty down, below min
        // (possibly to 0 tokens); DeepSpeed 0.19 rounds it up. Neither can be right for both.
        const std::int64_t down = c.min_difficulty - c.min_difficulty % c.difficulty_step;
        return CurriculumConfigProblem{
            "min_difficulty", "min_difficulty " + text(c.min_difficulty) + " is not a multiple of difficulty_step " +
                                  text(c.difficulty_step) + " (DeepSpeed versions start at " + text(down) + " or " +
                                  text(down + c.difficulty_step) + "); use one of those"};
    }
    if (c.schedule_type == "fixed_root" && !(c.root_degree > 0.0))
        return CurriculumConfigProblem{"schedule_config.root_degree", "expected a positive root degree (2: square root)"};
    return std::nullopt;
}

CurriculumScheduler::CurriculumScheduler(CurriculumLearningConfig config)
    : config_(std::move(config)), current_difficulty_(config_.min_difficulty) {
    if (auto problem = find_curriculum_config_problem(config_))
        throw Error("curriculum_learning." + problem->field + ": " + problem->what);
}

std::int64_t CurriculumScheduler::difficulty_at(std::int64_t global_steps) const {
    assert(global_steps >= 0);
    const auto& c = config_;
    if (c.schedule_type == "fixed_discrete") {
        // DeepSpeed's loop as written, so that an unsorted max_step list behaves the same.
        if (global_steps > c.max_steps.back()) return c.difficulties.back();
        for (std::size_t i = 0; i < c.max_steps.size(); ++i)
            if (global_steps <= c.max_steps[i]) return c.difficulties[i];
        return c.difficulties.back();  // not reached: the last max_step matches
    }
    // The Python: (float(steps) / total) ** (1.0 / degree), times (max - min), plus min, floored.
    // Each operation is one IEEE double operation as there, so the floors agree bit for bit;
    // `volatile` keeps the compiler from fusing the multiply and add into one FMA (one rounding
    // instead of Python's two) on targets that have it.
    const double degree = c.schedule_type == "fixed_linear" ? 1.0 : c.root_degree;
    const double progress = std::pow(static_cast<double>(global_steps) / static_cast<double>(c.total_curriculum_step),
                                     1.0 / degree);
    const volatile double scaled = progress * static_cast<double>(c.max_difficulty - c.min_difficulty);
    const double floored = std::floor(scaled + static_cast<double>(c.min_difficulty));
    // Far past the end the value only gets clamped; stop before it could overflow an int64.
    if (floored >= static_cast<double>(c.max_difficulty + c.difficulty_step)) return c.max_difficulty;
    const auto x = static_cast<std::int64_t>(floored);
    return std::min(x - x % c.difficulty_step, c.max_difficulty);
}

std::int64_t CurriculumScheduler::update_difficulty(std::int64_t global_steps) {
    if (current_difficulty_ < config_.max_difficulty) current_difficulty_ = difficulty_at(global_steps);
    return current_difficulty_;
}

CurriculumStep curriculum_step(CurriculumScheduler& scheduler, std::int64_t completed_iterations,
                               std::int64_t seq_length) {
    CurriculumStep step;
    step.curriculum_seqlen = scheduler.update_difficulty(completed_iterations + 1);
    step.batch_seq_length = std::min(step.curriculum_seqlen, seq_length);
    return step;
}

}  // namespace mds::flags
