// CPU reference of kernels/bias_gelu.cu: plain loops in double for the transcendental part.
#include "kernels/bias_gelu.h"

#include <cmath>

namespace mds::kernels {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCoeff = 0.044715;
}  // namespace

void bias_gelu_forward_cpu(float* out, const float* x, const float* bias, std::size_t rows, std::size_t cols) {
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
            double u = static_cast<double>(x[r * cols + c]) + static_cast<double>(bias[c]);
            out[r * cols + c] = static_cast<float>(0.5 * u * (1.0 + std::tanh(kSqrt2OverPi * (u + kCoeff * u * u * u))));
        }
}

void bias_gelu_backward_cpu(float* dx, const float* dy, const float* x, const float* bias, std::size_t rows,
                            std::size_t cols) {
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
            double u = static_cast<double>(x[r * cols + c]) + static_cast<double>(bias[c]);
            double t = std::tanh(kSqrt2OverPi * (u + kCoeff * u * u * u));
            double grad = 0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kCoeff * u * u);
            dx[r * cols + c] = static_cast<float>(static_cast<double>(dy[r * cols + c]) * grad);
        }
}

}  // namespace mds::kernels
