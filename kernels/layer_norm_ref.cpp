#include "layer_norm_ref.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace mds::kernels {

namespace {

struct Values {
    const void* base;
    Dtype dtype;
    double operator[](std::int64_t i) const {
        if (dtype == Dtype::F32) return static_cast<const float*>(base)[i];
        return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    }
};

// Stores `v` (fp32) at element i of an array of `dtype`.
void store(void* base, Dtype dtype, std::int64_t i, float v) {
    if (dtype == Dtype::F32) static_cast<float*>(base)[i] = v;
    else static_cast<std::uint16_t*>(base)[i] = float_to_bf16(v);
}

}  // namespace

void residual_layer_norm_forward_ref(const void* a, const void* b, const void* w, const void* bias, Dtype dtype, float eps,
                                     const LayerNormShape& shape, void* s, void* y, float* mean, float* rstd) {
    check_rows("layer norm", shape);
    const Values av{a, dtype}, bv{b, dtype}, wv{w, dtype}, biasv{bias, dtype};
    const auto c = shape.cols;
    std::vector<double> row(static_cast<std::size_t>(c));
    for (std::int64_t r = 0; r < shape.rows; ++r) {
        const std::int64_t o = r * c;
        double sum = 0;
        for (std::int64_t j = 0; j < c; ++j) {
            double v = av[o + j];
            if (b) {
                // The unfused add: the fp32 sum of the two values, rounded to the dtype.
                store(s, dtype, o + j, static_cast<float>(av[o + j]) + static_cast<float>(bv[o + j]));
                v = Values{s, dtype}[o + j];
            }
            row[static_cast<std::size_t>(j)] = v;
            sum += v;
        }
        const double mu = sum / static_cast<double>(c);
        double var = 0;
        for (const double v : row) var += (v - mu) * (v - mu);
        const double rs = 1.0 / std::sqrt(var / static_cast<double>(c) + static_cast<double>(eps));
        for (std::int64_t j = 0; j < c; ++j)
            store(y, dtype, o + j, static_cast<float>((row[static_cast<std::size_t>(j)] - mu) * rs * wv[j] + biasv[j]));
        mean[r] = static_cast<float>(mu);
        rstd[r] = static_cast<float>(rs);
    }
}

void layer_norm_backward_ref(const void* dy, const void* x, const void* w, Dtype dtype, const float* mean,
                             const float* rstd, const LayerNormShape& shape, void* dx, float* dw, float* db,
                             const void* dres) {
    check_rows("layer norm", shape);
    const Values dyv{dy, dtype}, xv{x, dtype}, wv{w, dtype}, dresv{dres, dtype};
    const auto c = shape.cols;
    std::vector<double> sum_dw(static_cast<std::size_t>(c), 0.0), sum_db(static_cast<std::size_t>(c), 0.0);
    for (std::int64_t r = 0; r < shape.rows; ++r) {
        const double mu = mean[r], rs = rstd[r];
        const std::int64_t o = r * c;
        double g_sum = 0, gx_sum = 0;
        for (std::int64_t j = 0; j < c; ++j) {
            const double xhat = (xv[o + j] - mu) * rs, g = dyv[o + j] * wv[j];
            g_sum += g;
            gx_sum += g * xhat;
            sum_dw[static_cast<std::size_t>(j)] += dyv[o + j] * xhat;
            sum_db[static_cast<std::size_t>(j)] += dyv[o + j];
        }
        const double g_mean = g_sum / static_cast<double>(c), gx_mean = gx_sum / static_cast<double>(c);
        for (std::int64_t j = 0; j < c; ++j) {
            const double xhat = (xv[o + j] - mu) * rs, g = dyv[o + j] * wv[j];
            const auto d = static_cast<float>(rs * (g - g_mean - xhat * gx_mean) + (dres ? dresv[o + j] : 0.0));
            if (dtype == Dtype::F32) static_cast<float*>(dx)[o + j] = d;
            else static_cast<std::uint16_t*>(dx)[o + j] = float_to_bf16(d);
        }
    }
    for (std::int64_t j = 0; j < c; ++j) {
        dw[j] = static_cast<float>(sum_dw[static_cast<std::size_t>(j)]);
        db[j] = static_cast<float>(sum_db[static_cast<std::size_t>(j)]);
    }
}

}  // namespace mds::kernels
