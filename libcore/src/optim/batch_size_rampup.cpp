// Megatron's number-of-micro-batches calculators (batch_size_rampup.h).
#include "mds/optim/batch_size_rampup.h"

#include <algorithm>  // std::sort, std::min, std::max
#include <numeric>    // std::gcd
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

std::string rampup_text(const RampupBatchSize& r) {
    std::string text = "--rampup-batch-size ";
    for (std::int64_t v : {r.start_global_batch_size, r.batch_size_increment, r.ramp_up_samples}) {
        if (text.back() != ' ') text += ' ';
        text += n(v);
    }
    return text;
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
    // Megatron's ConstantNumMicroBatches asserts this; with a ramp-up the global batch size is
    // checked where the run reaches it (update, check_remaining_batch_sizes).
    if (!rampup_ && global_batch_size % m != 0)
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
        const std::int64_t num_increments = diff / r.batch_size_increment;
        rampup_samples_per_increment_ = static_cast<double>(r.ramp_up_samples) / static_cast<double>(num_increments);
    }
    // Megatron's update(0, False): the start batch size is checked only where a run uses it.
    update(0, false);
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

void NumMicroBatchesCalculator::update(std::int64_t consumed_samples, bool consistency_check) {
    const std::int64_t batch = global_batch_size_at(consumed_samples);
    const std::int64_t m = micro_batch_size_ * data_parallel_size_;
    if (consistency_check && batch % m != 0) {
        std::string what = "global batch size " + n(batch);
        what += " in force at " + n(consumed_samples);
        what += " consumed samples is not divisible by " + mbs_dp_text(micro_batch_size_, data_parallel_size_);
        if (rampup_) what += " (" + rampup_text(*rampup_) + ")";
        throw UsageError(what + batch_divisibility_hint(batch, micro_batch_size_, data_parallel_size_));
    }
    consumed_samples_ = consumed_samples;
    current_global_batch_size_ = batch;
    num_micro_batches_ = batch / m;
}

std::optional<std::string> NumMicroBatchesCalculator::remaining_batch_sizes_problem(std::int64_t consumed_samples,
                                                                                    std::int64_t iteration,
                                                                                    std::int64_t train_iters) const {
    const std::int64_t m = micro_batch_size_ * data_parallel_size_;
    // Walk the ramp as the training loop will (the batch size in force at each iteration), then the
    // constant global batch size if iterations remain after it.
    struct Bad {
        std::int64_t consumed, iteration, batch;
    };
    std::optional<Bad> first;
    std::int64_t consumed = consumed_samples, it = iteration, divisor = 0;
    std::int64_t all_divisible_from = consumed_samples;  // consumed samples after the last bad batch
    std::int64_t smallest = 0, largest = 0;
    const auto visit = [&](std::int64_t batch) {
        divisor = std::gcd(divisor, batch);
        smallest = smallest ? std::min(smallest, batch) : batch;
        largest = std::max(largest, batch);
        if (batch % m == 0) return;
        if (!first) first = Bad{consumed, it, batch};
        all_divisible_from = consumed + batch;
    };
    if (rampup_)
        while (it < train_iters && consumed <= rampup_->ramp_up_samples) {
            const std::int64_t batch = global_batch_size_at(consumed);
            visit(batch);
            consumed += batch;
            ++it;
        }
    const bool final_bad = it < train_iters && global_batch_size_ % m != 0;
    if (it < train_iters) visit(global_batch_size_);
    if (!first) return std::nullopt;

    std::string what;
    if (rampup_) what = rampup_text(*rampup_) + ": ";
    what += "global batch size " + n(first->batch);
    what += ", reached at " + n(first->consumed);
    what += " consumed samples (iteration " + n(first->iteration + 1);
    what += "), is not divisible by " + mbs_dp_text(micro_batch_size_, data_parallel_size_);
    what += ": Megatron checks the batch size in force at every step and would stop the run there";
    if (final_bad) {
        what += "; the global batch size " + n(global_batch_size_);
        what += " the ramp-up ends at is not divisible either" +
                batch_divisibility_hint(global_batch_size_, micro_batch_size_, data_parallel_size_);
        return what;
    }
    what += ". From " + n(consumed_samples);
    what += " consumed samples to its end the run uses global batch sizes " + n(smallest);
    what += " to " + n(largest);
    what += ", all multiples of " + n(divisor);
    what += ": use a micro batch size × data parallel size dividing " + n(divisor);
    what += ", or ramp up on fewer data-parallel ranks and resume on these from " + n(all_divisible_from);
    what += " consumed samples on, where every batch size is divisible by " + n(m);
    return what;
}

void NumMicroBatchesCalculator::check_remaining_batch_sizes(std::int64_t consumed_samples, std::int64_t iteration,
                                                            std::int64_t train_iters) const {
    if (auto problem = remaining_batch_sizes_problem(consumed_samples, iteration, train_iters)) throw UsageError(*problem);
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
