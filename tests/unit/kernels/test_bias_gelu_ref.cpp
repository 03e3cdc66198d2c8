// The CPU reference of bias + GeLU against closed-form values and a finite-difference gradient.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernels/bias_gelu.h"

TEST_CASE("bias_gelu reference: known values") {
    // gelu_tanh(0) = 0; gelu_tanh(1) = 0.8411919906; gelu_tanh(-1) = -0.1588080094.
    std::vector<float> x{-1.f, 0.f, 0.5f}, b{0.f, 0.f, 0.5f}, y(3);
    mds::kernels::bias_gelu_forward_cpu(y.data(), x.data(), b.data(), 1, 3);
    CHECK(y[0] == doctest::Approx(-0.1588080094).epsilon(1e-6));
    CHECK(y[1] == 0.f);
    CHECK(y[2] == doctest::Approx(0.8411919906).epsilon(1e-6));
}

TEST_CASE("bias_gelu reference: backward matches finite differences") {
    const std::size_t rows = 4, cols = 5;
    std::vector<float> x(rows * cols), b(cols), dy(rows * cols, 1.f), dx(rows * cols);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = -3.f + 0.31f * static_cast<float>(i);
    for (std::size_t c = 0; c < cols; ++c) b[c] = 0.1f * static_cast<float>(c);
    mds::kernels::bias_gelu_backward_cpu(dx.data(), dy.data(), x.data(), b.data(), rows, cols);
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double h = 1e-3;
        auto g = [&](double u) { return 0.5 * u * (1 + std::tanh(0.7978845608028654 * (u + 0.044715 * u * u * u))); };
        double u = x[i] + b[i % cols];
        double fd = (g(u + h) - g(u - h)) / (2 * h);
        CHECK(dx[i] == doctest::Approx(fd).epsilon(1e-4));
    }
}
