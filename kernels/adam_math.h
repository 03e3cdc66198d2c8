// The per-element arithmetic of kernels/adam.h, one definition for the CUDA kernels (adam.cu) and the CPU
// reference (adam_ref.cpp). It follows torch's _fused_adamw_ (ATen's fused_adam_utils.cuh): fp32 values,
// the hyperparameters in double (so the moments' updates and the weight decay run in double and are rounded
// to fp32 once), the bias-correction terms rounded to fp32. Every double product and sum is rounded on its own
// (adam_mul, adam_add): nvcc would otherwise fuse β1·m + (1 − β1)·g into one multiply-add, whose single
// rounding moves ~0.3% of the moments by an fp32 ulp from the CPU's, and a master smaller than its step by
// tens of its own ulps (an H200, 2026-11-30: adam_gpu's masters 405 times its 4-ulp tolerance). So the kernels
// and the reference compute the same bits.
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

// a · b and a + b in double, each rounded to nearest: never contracted into a fused multiply-add on the device.
// The host reference is compiled with -ffp-contract=off (kernels/CMakeLists.txt) for the same reason.
MDS_HD double adam_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

MDS_HD double adam_add(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}

// The gradient the norm is taken of: unscaled, not yet clipped.
MDS_HD float adam_unscaled(float g, float grad_scale) { return g * grad_scale; }

// One element's update: `g` the model's gradient as fp32; p, m, v the master weight and the moments.
MDS_HD void adam_update(float g, std::int32_t group, float& p, float& m, float& v, const AdamScalars& s) {
    g = adam_unscaled(g, s.grad_scale) * s.clip;
    const double lr_wd = group != 0 ? s.lr_wd[1] : s.lr_wd[0];  // not s.lr_wd[group]: on a GPU a local-memory copy
    if (lr_wd != 0.0) p = static_cast<float>(adam_add(p, -adam_mul(lr_wd, p)));
    m = static_cast<float>(adam_add(adam_mul(s.beta1, m), adam_mul(1.0 - s.beta1, g)));
    v = static_cast<float>(adam_add(adam_mul(s.beta2, v), adam_mul(adam_mul(1.0 - s.beta2, g), g)));
    const float denom = static_cast<float>(adam_sqrt(v) / s.bc2_sqrt + s.eps);
    p -= s.step_size * m / denom;
}

}  // namespace mds::kernels
