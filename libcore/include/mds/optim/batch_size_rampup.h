// NumMicroBatchesCalculator: Megatron's global-batch-size ramp-up and number of micro-batches per
// iteration (BS Megatron-DeepSpeed megatron/microbatches.py; megatron-core
// num_microbatches_calculator.py with decrease_batch_size_if_needed=False, the same formulas).
//
// Constant:  num_micro_batches = gbs / (mbs × dp), gbs divisible by mbs × dp.
// Ramp-up (--rampup-batch-size start increment samples):
//   n_incr = (gbs - start) / increment                    (must divide exactly)
//   per_incr = samples / n_incr                           (a double: 5e6 / 63 = 79365.079...)
//   current(c) = gbs                                      if c > samples
//              = start + int(c / per_incr) × increment    otherwise
// where c is the number of samples consumed before the iteration. Example (tr1-13B): 16 16 5_000_000
// with --global-batch-size 1024 runs 79365 samples at each of 16, 32, ..., 1008, then 1024.
//
// Divisibility as Megatron checks it: the constant global batch size, and with a ramp-up only the
// batch size in force at each update (RampupBatchsizeNumMicroBatches.update's consistency_check),
// so that BigScience's tr1-13B could ramp up on 16 nodes and resume on 64 with the same flags. On
// top of that, check_remaining_batch_sizes() walks every batch size a run will still use from its
// resume point, so that a batch size that would stop the run hours later is refused before the
// first step. Errors say which numbers would work.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mds/optim/optimizer_config.h"  // RampupBatchSize

namespace mds::optim {

// The saved position: everything else follows from the flags.
struct BatchSizeRampupState {
    std::int64_t consumed_samples = 0;
};

class NumMicroBatchesCalculator {
public:
    // Megatron's asserts, as mds::UsageError with working alternatives: a constant global batch size
    // divisible by mbs × dp; a ramp-up whose interval gbs - start is a positive multiple of the
    // increment (start and increment need not be multiples of mbs × dp: see update()).
    NumMicroBatchesCalculator(std::int64_t global_batch_size, std::int64_t micro_batch_size,
                              std::int64_t data_parallel_size, std::optional<RampupBatchSize> rampup = std::nullopt);

    // Megatron update_num_microbatches(consumed_samples, consistency_check): sets the current global
    // batch size; with the check, throws mds::UsageError when it is not divisible by mbs × dp.
    void update(std::int64_t consumed_samples, bool consistency_check = true);

    // Every global batch size a run resumed at `iteration` with `consumed_samples` uses until
    // `train_iters`, walked iteration by iteration through the ramp: the first one not divisible by
    // mbs × dp, described (the consumed samples and iteration where the run would reach it, from
    // how many consumed samples on all are divisible, and what would work); nullopt when all divide.
    std::optional<std::string> remaining_batch_sizes_problem(std::int64_t consumed_samples, std::int64_t iteration,
                                                             std::int64_t train_iters) const;
    // The same, thrown as mds::UsageError.
    void check_remaining_batch_sizes(std::int64_t consumed_samples, std::int64_t iteration,
                                     std::int64_t train_iters) const;

    std::int64_t num_micro_batches() const { return num_micro_batches_; }
    std::int64_t current_global_batch_size() const { return current_global_batch_size_; }
    std::int64_t global_batch_size() const { return global_batch_size_; }
    std::int64_t micro_batch_size() const { return micro_batch_size_; }
    std::int64_t data_parallel_size() const { return data_parallel_size_; }
    const std::optional<RampupBatchSize>& rampup() const { return rampup_; }
    // Samples per ramp step (ramp-up only; 0 for a constant batch size).
    double rampup_samples_per_increment() const { return rampup_samples_per_increment_; }

    // The global batch size at `consumed_samples`, without changing the calculator.
    std::int64_t global_batch_size_at(std::int64_t consumed_samples) const;

    // BS megatron/training.py update_train_iters(): iterations of a --train-samples run. The ramp
    // phase is walked iteration by iteration (while consumed <= ramp samples), then the remaining
    // samples are divided by the final gbs (a partial last batch is dropped).
    std::int64_t train_iters_for_samples(std::int64_t train_samples) const;

    BatchSizeRampupState state() const { return {consumed_samples_}; }
    void load_state(const BatchSizeRampupState& state) { update(state.consumed_samples); }

private:
    std::int64_t global_batch_size_;
    std::int64_t micro_batch_size_;
    std::int64_t data_parallel_size_;
    std::optional<RampupBatchSize> rampup_;
    double rampup_samples_per_increment_ = 0.0;
    std::int64_t consumed_samples_ = 0;
    std::int64_t current_global_batch_size_ = 0;
    std::int64_t num_micro_batches_ = 0;
};

// Building blocks of the error messages, public for the tool checks and the tests:
// the multiples of `divisor` nearest to `value` ("992 or 1024"; only the upper one below divisor).
std::string nearest_multiples_text(std::int64_t value, std::int64_t divisor);

}  // namespace mds::optim
