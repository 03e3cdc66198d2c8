// The fused cross entropy's running log-sum-exp (kernels/cross_entropy.cu): a (max, Σ exp(x - max)) pair, made of a
// few values at a time (lse_of), that merges with another pair, so that the threads, warps and block of a row can
// combine theirs in any order (the merge is associative up to fp32 rounding). Shared with the host so that the
// unit tests (tests/unit/kernels) check its special values on a CPU: an empty pair is (-inf, 0); a NaN anywhere
// makes the sum NaN; equal maxima add their sums without expf(max - max), which is NaN when both are +inf (a row
// with two +inf logits has the log-sum-exp +inf, as cross_entropy_ref.cpp).
#pragma once

#include <math.h>

#include "host_device.h"

namespace mds::kernels {

struct MaxSum {
    float max;
    float sum;
};

MDS_HD bool lse_nan(float x) { return x != x; }

MDS_HD MaxSum lse_empty() { return {-INFINITY, 0.0f}; }

MDS_HD MaxSum lse_merge(MaxSum a, MaxSum b) {
    if (b.max == -INFINITY) return lse_nan(b.sum) ? MaxSum{a.max, b.sum} : a;
    if (a.max == -INFINITY) return lse_nan(a.sum) ? MaxSum{b.max, a.sum} : b;
    if (a.max == b.max) return {a.max, a.sum + b.sum};
    if (b.max > a.max) return {b.max, a.sum * expf(a.max - b.max) + b.sum};
    return {a.max, a.sum + b.sum * expf(b.max - a.max)};
}

// The pair of n values (a thread's 16-byte load): their maximum, then Σ exp(x - max), where a NaN makes the sum NaN,
// -inf adds nothing and a value equal to the maximum adds 1 without expf (+inf too: expf(inf - inf) would be NaN).
// Its n expf do not wait on one another, where adding the values one at a time to a running pair is a chain of n
// dependent steps; the kernel then merges the pair into its running one.
MDS_HD MaxSum lse_of(const float* x, int n) {
    float m = -INFINITY;
    for (int k = 0; k < n; ++k) m = fmaxf(m, x[k]);  // fmaxf skips a NaN
    float s = 0.0f;
    for (int k = 0; k < n; ++k) s += x[k] == -INFINITY ? 0.0f : x[k] == m ? 1.0f : expf(x[k] - m);
    return {m, s};
}

// The pair's log-sum-exp: NaN when a NaN was added, +inf with a +inf value, -inf for none (or only -inf).
MDS_HD float lse_value(MaxSum a) {
    if (lse_nan(a.sum)) return NAN;
    if (a.max == INFINITY) return INFINITY;
    if (a.max == -INFINITY) return -INFINITY;
    return a.max + logf(a.sum);
}

}  // namespace mds::kernels
