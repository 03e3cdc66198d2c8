// Gradient norm, clipping, zero count and overflow check (grad_clip.h).
#include "mds/optim/grad_clip.h"

#include <cmath>
#include <vector>

namespace mds::optim {

double l2_norm_squared(std::span<const std::span<const float>> grads) {
    double sum = 0.0;
    for (auto g : grads)
        for (float v : g) sum += static_cast<double>(v) * static_cast<double>(v);
    return sum;
}

double total_norm_from_squared(double sum_of_squares) { return std::sqrt(sum_of_squares); }

double clip_coefficient(double total_norm, double max_norm) { return max_norm / (total_norm + 1.0e-6); }

double clip_factor(double total_norm, double max_norm) {
    if (max_norm <= 0.0) return 1.0;
    return static_cast<double>(static_cast<float>(clip_coefficient(total_norm, max_norm)));
}

bool scale_if_clipping(std::span<const std::span<float>> grads, double coeff) {
    if (!(coeff < 1.0)) return false;
    const auto c = static_cast<float>(coeff);
    for (auto g : grads)
        for (float& v : g) v *= c;
    return true;
}

namespace {

std::vector<std::span<const float>> as_const(std::span<const std::span<float>> grads) {
    return {grads.begin(), grads.end()};
}

}  // namespace

double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm) {
    const auto view = as_const(grads);
    const double norm = total_norm_from_squared(l2_norm_squared(view));
    scale_if_clipping(grads, clip_factor(norm, max_norm));
    return norm;
}

std::int64_t count_zeros(std::span<const std::span<const float>> grads) {
    std::int64_t zeros = 0;
    for (auto g : grads)
        for (float v : g) zeros += v == 0.0f ? 1 : 0;
    return zeros;
}

bool has_inf_or_nan(std::span<const std::span<const float>> grads) {
    for (auto g : grads)
        for (float v : g)
            if (!std::isfinite(v)) return true;
    return false;
}

}  // namespace mds::optim
