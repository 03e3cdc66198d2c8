#include "cross_entropy_ref.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace mds::kernels {

void check_shape(const CrossEntropyShape& s) {
    auto bad = [&](const std::string& what) {
        throw std::invalid_argument("cross entropy: " + what + " (rows " + std::to_string(s.rows) + ", vocab " +
                                    std::to_string(s.vocab) + ", stride " + std::to_string(s.stride) + ")");
    };
    if (s.rows < 1) bad("rows must be at least 1");
    if (s.vocab < 1) bad("vocab must be at least 1");
    // The kernels index a row with 32-bit column numbers.
    if (s.vocab > std::numeric_limits<std::int32_t>::max()) bad("vocab must be below 2^31");
    if (s.stride < s.vocab) bad("stride must be at least vocab");
}

namespace {

// Row r of the logits as fp32 values, one at a time.
struct RowReader {
    const void* base;
    Dtype dtype;
    std::int64_t stride;
    float operator()(std::int64_t r, std::int64_t j) const {
        const std::int64_t i = r * stride + j;
        if (dtype == Dtype::F32) return static_cast<const float*>(base)[i];
        return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    }
};

}  // namespace

void cross_entropy_forward_ref(const void* logits, Dtype dtype, const CrossEntropyShape& shape,
                               const std::int64_t* targets, float* loss, float* lse, std::int64_t row_begin,
                               std::int64_t row_end) {
    check_shape(shape);
    const RowReader x{logits, dtype, shape.stride};
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        double max = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (std::int64_t j = 0; j < shape.vocab; ++j) {
            const double v = x(r, j);
            nan = nan || std::isnan(v);
            if (v > max) max = v;
        }
        double sum = 0;
        if (!nan && std::isfinite(max)) {
            for (std::int64_t j = 0; j < shape.vocab; ++j) sum += std::exp(static_cast<double>(x(r, j)) - max);
        }
        // All -inf: the sum is empty and so is its log (-inf), as torch's logsumexp has it; a +inf logit
        // makes the log-sum-exp +inf (the kernel's online sum gets the same).
        constexpr double inf = std::numeric_limits<double>::infinity();
        double l = max + std::log(sum);
        if (nan) l = std::numeric_limits<double>::quiet_NaN();
        else if (max == inf) l = inf;
        else if (sum == 0) l = -inf;
        const std::int64_t t = targets[r];
        lse[r] = static_cast<float>(l);
        loss[r] = (t < 0 || t >= shape.vocab) ? std::numeric_limits<float>::quiet_NaN()
                                              : static_cast<float>(l - static_cast<double>(x(r, t)));
    }
}

void cross_entropy_backward_ref(const void* logits, Dtype dtype, const CrossEntropyShape& shape,
                                const std::int64_t* targets, const float* lse, const float* dloss, void* dlogits,
                                std::int64_t row_begin, std::int64_t row_end) {
    check_shape(shape);
    const RowReader x{logits, dtype, shape.stride};
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        const std::int64_t t = targets[r];
        const float g = dloss[r];
        for (std::int64_t j = 0; j < shape.vocab; ++j) {
            const float p = static_cast<float>(std::exp(static_cast<double>(x(r, j)) - static_cast<double>(lse[r])));
            const float d = g * (p - (j == t ? 1.0f : 0.0f));
            const std::int64_t i = r * shape.stride + j;
            if (dtype == Dtype::F32) {
                static_cast<float*>(dlogits)[i] = d;
            } else {
                static_cast<std::uint16_t*>(dlogits)[i] = float_to_bf16(d);
            }
        }
    }
}

}  // namespace mds::kernels
