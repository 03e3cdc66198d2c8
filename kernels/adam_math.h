// The per-element arithmetic of kernels/adam.h, one definition for the CUDA kernels (adam.cu) and the CPU
// reference (adam_ref.cpp). It follows torch's _fused_adamw_ (ATen's fused_adam_utils.cuh): fp32 values,
// the hyperparameters in double (so the moments' updates and the weight decay run in double and are rounded
// to fp32 once), the bias-correction terms rounded to fp32.
#pragma once

#include <cmath>
#include <cstdint>

#include "adam.h"
#include "host_device.h"


namespace mds::kernels {

// What one step needs per element, computed once on the host from AdamHyper (adam_scalars).
struct AdamScalars {
    float grad_scale = 1.0f, clip = 1.0f;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    double lr_wd[2] = {0.0, 0.0};  // lr · weight decay, by group
    float step_size = 0.0f;        // lr / (1 - β1ᵗ)
    float bc2_sqrt = 1.0f;         // sqrt(1 - β2ᵗ)
};

// Checks `h` (check_hyper) and derives the scalars.
AdamScalars adam_scalars(const AdamHyper& h);

MDS_HD float adam_sqrt(float x) {
#if defined(__CUDA_ARCH__)
    return sqrtf(x);
#else
    return std::sqrt(x);
#endif
}

// The gradient the norm is taken of: unscaled, not yet clipped.
MDS_HD float adam_unscaled(float g, float grad_scale) { return g * grad_scale; }

// One element's update: `g` the model's gradient as fp32; p, m, v the master weight and the moments.
MDS_HD void adam_update(float g, std::int32_t group, float& p, float& m, float& v, const AdamScalars& s) {
    g = adam_unscaled(g, s.grad_scale) * s.clip;
    const double lr_wd = group != 0 ? s.lr_wd[1] : s.lr_wd[0];  // not s.lr_wd[group]: on a GPU a local-memory copy
    if (lr_wd != 0.0) p = static_cast<float>(p - lr_wd * p);
    m = static_cast<float>(s.beta1 * m + (1.0 - s.beta1) * g);
    v = static_cast<float>(s.beta2 * v + (1.0 - s.beta2) * g * g);
    const float denom = static_cast<float>(adam_sqrt(v) / s.bc2_sqrt + s.eps);
    p -= s.step_size * m / denom;
}

}  // namespace mds::kernels
