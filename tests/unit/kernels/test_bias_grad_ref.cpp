// The CPU reference of kernels/bias_grad.h: column sums of fp32 and bf16 rows, exact where the values are
// (integers), and refusals of shapes out of range.
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/bias_grad_ref.h"
#include "kernels/dtype.h"

using namespace mds::kernels;

TEST_CASE("bias grad reference: the column sums of fp32 and bf16 rows") {
    // dy[r, c] = (r + 1) · (c - 1): column c sums to (c - 1) · rows · (rows + 1) / 2, exactly representable.
    const std::int64_t rows = 37, cols = 5;
    std::vector<float> f(static_cast<std::size_t>(rows * cols));
    std::vector<std::uint16_t> b(f.size());
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
            const auto v = static_cast<float>((r + 1) * (c - 1));
            f[static_cast<std::size_t>(r * cols + c)] = v;
            b[static_cast<std::size_t>(r * cols + c)] = float_to_bf16(v);  // integers below 256: exact in bf16
        }
    std::vector<float> sum_f(cols), sum_b(cols);
    bias_grad_ref(f.data(), Dtype::F32, {rows, cols}, sum_f.data());
    bias_grad_ref(b.data(), Dtype::BF16, {rows, cols}, sum_b.data());
    for (std::int64_t c = 0; c < cols; ++c) {
        const auto want = static_cast<float>((c - 1) * rows * (rows + 1) / 2);
        CHECK(sum_f[static_cast<std::size_t>(c)] == want);
        CHECK(sum_b[static_cast<std::size_t>(c)] == want);
    }
    // Sums in double: 1 + 2^-30 · n stays distinguishable from 1 where fp32 sums would lose it.
    std::vector<float> small(1 + 1000, 0x1p-30f);
    small[0] = 1.0f;
    float one_col = 0;
    bias_grad_ref(small.data(), Dtype::F32, {1001, 1}, &one_col);
    CHECK(one_col == static_cast<float>(1.0 + 1000 * 0x1p-30));
    CHECK(one_col != 1.0f);
}

TEST_CASE("bias grad reference: shapes out of range are refused by name") {
    float out = 0;
    const float in = 0;
    CHECK_THROWS_WITH_AS(bias_grad_ref(&in, Dtype::F32, {0, 1}, &out), "bias grad: rows must be at least 1 (rows 0, cols 1)",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(bias_grad_ref(&in, Dtype::F32, {1, 0}, &out), "bias grad: cols must be at least 1 (rows 1, cols 0)",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(check_rows("bias grad", BiasGradShape{1, std::int64_t{1} << 31}),
                         "bias grad: cols must be below 2^31 (rows 1, cols 2147483648)", std::invalid_argument);
}
