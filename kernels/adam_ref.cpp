#include "adam_ref.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "dtype.h"

namespace mds::kernels {

std::vector<AdamChunk> adam_chunks(const std::vector<std::int64_t>& numels, std::vector<std::int64_t>& first) {
    constexpr auto kMax = static_cast<std::int64_t>(std::numeric_limits<std::int32_t>::max());
    if (static_cast<std::int64_t>(numels.size()) > kMax) throw std::invalid_argument("adam: more than 2^31 tensors");
    std::vector<AdamChunk> chunks;
    first.assign(1, 0);
    for (std::size_t t = 0; t < numels.size(); ++t) {
        const std::int64_t n = numels[t];
        if (n < 0) throw std::invalid_argument("adam: tensor " + std::to_string(t) + " has a negative size");
        for (std::int64_t b = 0; b < n; b += kAdamChunk) {
            chunks.push_back({static_cast<std::int32_t>(t), static_cast<std::int32_t>(std::min(kAdamChunk, n - b)), b});
        }
        if (static_cast<std::int64_t>(chunks.size()) > kMax) throw std::invalid_argument("adam: more than 2^31 chunks");
        first.push_back(static_cast<std::int64_t>(chunks.size()));
    }
    return chunks;
}

void check_hyper(const AdamHyper& h) {
    auto bad = [](const std::string& what) { throw std::invalid_argument("adam: " + what); };
    const auto finite_non_negative = [](double v) { return std::isfinite(v) && v >= 0.0; };
    if (!(h.beta1 >= 0.0 && h.beta1 < 1.0)) bad("beta1 must be in [0, 1), not " + std::to_string(h.beta1));
    if (!(h.beta2 >= 0.0 && h.beta2 < 1.0)) bad("beta2 must be in [0, 1), not " + std::to_string(h.beta2));
    if (!finite_non_negative(h.eps)) bad("eps must be finite and not negative, not " + std::to_string(h.eps));
    if (!finite_non_negative(h.lr)) bad("the learning rate must be finite and not negative, not " + std::to_string(h.lr));
    for (double wd : h.weight_decay)
        if (!finite_non_negative(wd)) bad("a weight decay must be finite and not negative, not " + std::to_string(wd));
    if (h.step < 1) bad("the step number counts from 1, not " + std::to_string(h.step));
    if (!std::isfinite(h.grad_scale) || !std::isfinite(h.clip)) bad("the gradient scale and clipping factor must be finite");
}

AdamScalars adam_scalars(const AdamHyper& h) {
    check_hyper(h);
    AdamScalars s;
    s.grad_scale = h.grad_scale;
    s.clip = h.clip;
    s.beta1 = h.beta1;
    s.beta2 = h.beta2;
    s.eps = h.eps;
    for (int g = 0; g < 2; ++g) s.lr_wd[g] = h.lr * h.weight_decay[g];
    const auto t = static_cast<double>(h.step);
    const auto bc1 = static_cast<float>(1.0 - std::pow(h.beta1, t));
    s.step_size = static_cast<float>(h.lr / bc1);
    s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(h.beta2, t)));
    return s;
}

namespace {

// Element i of t's gradient as fp32.
float grad_at(const AdamTensor& t, std::int64_t i) {
    return t.grad_fp32 ? static_cast<const float*>(t.grad)[i] : bf16_to_float(static_cast<const std::uint16_t*>(t.grad)[i]);
}

}  // namespace

double adam_grad_sumsq_ref(const AdamTensor& t, float grad_scale, std::int64_t begin, std::int64_t end) {
    double sum = 0.0;
    for (std::int64_t i = begin; i < end; ++i) {
        const double g = adam_unscaled(grad_at(t, i), grad_scale);
        sum += g * g;
    }
    return sum;
}

void adam_step_ref(const AdamTensor& t, const AdamScalars& s, std::int64_t begin, std::int64_t end) {
    if (t.group != 0 && t.group != 1) throw std::invalid_argument("adam: a tensor's group is 0 or 1, not " + std::to_string(t.group));
    for (std::int64_t i = begin; i < end; ++i) {
        float p = t.master[i], m = t.exp_avg[i], v = t.exp_avg_sq[i];
        adam_update(grad_at(t, i), t.group, p, m, v, s);
        t.master[i] = p;
        t.exp_avg[i] = m;
        t.exp_avg_sq[i] = v;
        t.param[i] = float_to_bf16(p);
    }
}

}  // namespace mds::kernels
