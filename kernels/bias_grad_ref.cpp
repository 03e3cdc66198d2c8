#include "bias_grad_ref.h"

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace mds::kernels {

void check_shape(const BiasGradShape& s) {
    auto bad = [&](const std::string& what) {
        throw std::invalid_argument("bias grad: " + what + " (rows " + std::to_string(s.rows) + ", cols " +
                                    std::to_string(s.cols) + ")");
    };
    if (s.rows < 1) bad("rows must be at least 1");
    if (s.cols < 1) bad("cols must be at least 1");
    if (s.cols > std::numeric_limits<std::int32_t>::max()) bad("cols must be below 2^31");
}

void bias_grad_ref(const void* dy, Dtype dtype, const BiasGradShape& shape, float* db) {
    check_shape(shape);
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
