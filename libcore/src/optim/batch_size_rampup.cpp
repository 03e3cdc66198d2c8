// Megatron's number-of-micro-batches calculators (batch_size_rampup.h).
#include "mds/optim/batch_size_rampup.h"

#include <algorithm>  // std::sort
#include <string>
#include <vector>

#include "mds/util/error.h"

namespace mds::optim {

namespace {

std::string n(std::int64_t v) { return std::to_string(v); }

// Up to `count` divisors of `value` nearest to `near`, ascending ("14, 16, 18, 21").
std::string nearest_divisors_text(std::int64_t value, std::int64_t near, std::size_t count) {
    std::vector<std::int64_t> divisors;
    for (std::int64_t d = 1; d * d <= value; ++d) {
        if (value % d != 0) continue;
        divisors.push_back(d);
        if (d != value / d) divisors.push_back(value / d);
    }
    std::sort(divisors.begin(), divisors.end(), [near](std::int64_t a, std::int64_t b) {
        std::int64_t da = a > near ? a - near : near - a, db = b > near ? b - near : near - b;
        return da != db ? da < db : a < b;
    });
    if (divisors.size() > count) divisors.resize(count);
    std::sort(divisors.begin(), divisors.end());
    std::string out;
    for (std::size_t i = 0; i < divisors.size(); ++i) out += (i ? ", " : "") + n(divisors[i]);
    return out;
}

std::string mbs_dp_text(std::int64_t mbs, std::int64_t dp) {
    return "micro batch size " + n(mbs) + " × data parallel size " + n(dp) + " = " + n(mbs * dp);
}

// What to change when `what` (a global batch size) is not a multiple of mbs × dp.
std::string batch_divisibility_hint(std::int64_t value, std::int64_t mbs, std::int64_t dp) {
    std::string hint = "; nearest that work: " + nearest_multiples_text(value, mbs * dp);
    if (value % dp == 0)
        hint += "; or keep it with --micro-batch-size one of " + nearest_divisors_text(value / dp, mbs, 6);
    return hint;
}

// Global batch sizes start + k × increment nearest to start + diff.
std::string rampup_gbs_text(std::int64_t start, std::int64_t diff, std::int64_t increment) {
    const std::int64_t lower = diff / increment * increment;
    if (lower == 0) return n(start + increment);
    return n(start + lower) + " or " + n(start + lower + increment);
}

}  // namespace

std::string nearest_multiples_text(std::int64_t value, std::int64_t divisor) {
    const std::int64_t lower = value / divisor * divisor;
    const std::int64_t upper = lower + divisor;
    if (lower <= 0) return n(upper);
    return n(lower) + " or " + n(upper);
}

NumMicroBatchesCalculator::NumMicroBatchesCalculator(std::int64_t global_batch_size, std::int64_t micro_batch_size,
                                                     std::int64_t data_parallel_size,
                                                     std::optional<RampupBatchSize> rampup)
    : global_batch_size_(global_batch_size),
      micro_batch_size_(micro_batch_size),
      data_parallel_size_(data_parallel_size),
      rampup_(rampup) {
    if (micro_batch_size <= 0) throw UsageError("--micro-batch-size must be positive, got " + n(micro_batch_size));
    if (data_parallel_size <= 0) throw UsageError("data parallel size must be positive, got " + n(data_parallel_size));
    if (global_batch_size <= 0) throw UsageError("--global-batch-size must be positive, got " + n(global_batch_size));
    const std::int64_t m = micro_batch_size * data_parallel_size;
    if (global_batch_size % m != 0)
        throw UsageError("--global-batch-size " + n(global_batch_size) + " is not divisible by " +
                         mbs_dp_text(micro_batch_size, data_parallel_size) +
                         batch_divisibility_hint(global_batch_size, micro_batch_size, data_parallel_size));
    if (rampup_) {
        const RampupBatchSize& r = *rampup_;
        if (r.start_global_batch_size <= 0)
            throw UsageError("--rampup-batch-size: start batch size must be positive, got " + n(r.start_global_batch_size));
        if (r.batch_size_increment <= 0)
            throw UsageError("--rampup-batch-size: batch size increment must be positive, got " +
                             n(r.batch_size_increment));
        if (r.ramp_up_samples <= 0)  // Megatron allows 0 and then divides 0 by 0.0 (ZeroDivisionError)
            throw UsageError("--rampup-batch-size: ramp-up samples must be positive, got " + n(r.ramp_up_samples));
        const std::int64_t diff = global_batch_size - r.start_global_batch_size;
        if (diff < 0)
            throw UsageError("--rampup-batch-size: start batch size " + n(r.start_global_batch_size) +
                             " exceeds --global-batch-size " + n(global_batch_size));
        if (diff == 0)  // Megatron: ZeroDivisionError
            throw UsageError("--rampup-batch-size: start batch size equals --global-batch-size " +
                             n(global_batch_size) + ", nothing to ramp up; drop --rampup-batch-size");
        if (diff % r.batch_size_increment != 0)
            throw UsageError("--rampup-batch-size: global batch size interval " + n(global_batch_size) + " - " +
                             n(r.start_global_batch_size) + " = " + n(diff) + " is not divisible by the increment " +
                             n(r.batch_size_increment) + "; increments that work: " +
                             nearest_divisors_text(diff, r.batch_size_increment, 6) +
                             "; or --global-batch-size " + rampup_gbs_text(r.start_global_batch_size, diff,
                                                                           r.batch_size_increment));
        if (r.start_global_batch_size % m != 0)
            throw UsageError("--rampup-batch-size: start batch size " + n(r.start_global_batch_size) +
                             " is not divisible by " + mbs_dp_text(micro_batch_size, data_parallel_size) +
                             "; nearest that work: " + nearest_multiples_text(r.start_global_batch_size, m));
        if (r.batch_size_increment % m != 0)
            throw UsageError("--rampup-batch-size: increment " + n(r.batch_size_increment) +
                             " is not divisible by " + mbs_dp_text(micro_batch_size, data_parallel_size) +
                             ", so some ramp-up batch sizes would not be; increments that work: " +
                             nearest_multiples_text(r.batch_size_increment, m) + " (if they divide " + n(diff) + ")");
        const std::int64_t num_increments = diff / r.batch_size_increment;
        rampup_samples_per_increment_ = static_cast<double>(r.ramp_up_samples) / static_cast<double>(num_increments);
    }
    update(0);
}

std::int64_t NumMicroBatchesCalculator::global_batch_size_at(std::int64_t consumed_samples) const {
    if (!rampup_ || consumed_samples > rampup_->ramp_up_samples) return global_batch_size_;
    // Python int(c / per_incr): true division of an int by a float, truncated toward zero.
    const auto steps =
        static_cast<std::int64_t>(static_cast<double>(consumed_samples) / rampup_samples_per_increment_);
    const std::int64_t gbs = rampup_->start_global_batch_size + steps * rampup_->batch_size_increment;
    if (gbs > global_batch_size_)
        throw Error("batch size ramp-up: batch size " + n(gbs) + " at " + n(consumed_samples) +
                    " consumed samples exceeds the global batch size " + n(global_batch_size_));
    return gbs;
}

void NumMicroBatchesCalculator::update(std::int64_t consumed_samples) {
    consumed_samples_ = consumed_samples;
    current_global_batch_size_ = global_batch_size_at(consumed_samples);
    num_micro_batches_ = current_global_batch_size_ / (micro_batch_size_ * data_parallel_size_);
}

std::int64_t NumMicroBatchesCalculator::train_iters_for_samples(std::int64_t train_samples) const {
    if (!rampup_) return train_samples / global_batch_size_;
    std::int64_t iterations = 0;
    std::int64_t consumed = 0;
    while (consumed <= rampup_->ramp_up_samples) {
        consumed += global_batch_size_at(consumed);
        ++iterations;
    }
    // Python floor division: a negative remainder rounds toward -inf.
    std::int64_t rest = train_samples - consumed;
    std::int64_t q = rest / global_batch_size_;
    if (rest % global_batch_size_ != 0 && rest < 0) --q;
    return iterations + q;
}

}  // namespace mds::optim
