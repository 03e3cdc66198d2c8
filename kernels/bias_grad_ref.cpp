#include "bias_grad_ref.h"

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace mds::kernels {

void bias_grad_ref(const void* dy, Dtype dtype, const BiasGradShape& shape, float* db) {
    check_rows("bias grad", shape);
    const auto cols = static_cast<std::size_t>(shape.cols);
    std::vector<double> sum(cols, 0.0);
    for (std::int64_t r = 0; r < shape.rows; ++r) {
        const auto row = static_cast<std::size_t>(r) * cols;
        if (dtype == Dtype::F32) {
            const auto* v = static_cast<const float*>(dy) + row;
            for (std::size_t c = 0; c < cols; ++c) sum[c] += v[c];
        } else {
            const auto* v = static_cast<const std::uint16_t*>(dy) + row;
            for (std::size_t c = 0; c < cols; ++c) sum[c] += bf16_to_float(v[c]);
        }
    }
    for (std::size_t c = 0; c < cols; ++c) db[c] = static_cast<float>(sum[c]);
}

}  // namespace mds::kernels
