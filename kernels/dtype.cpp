#include "dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace mds::kernels {

const char* dtype_name(Dtype d) { return d == Dtype::F32 ? "fp32" : "bf16"; }

void check_rows(const char* op, const RowsShape& s) {
    auto bad = [&](const char* what) {
        throw std::invalid_argument(std::string(op) + ": " + what + " (rows " + std::to_string(s.rows) + ", cols " +
                                    std::to_string(s.cols) + ")");
    };
    if (s.rows < 1) bad("rows must be at least 1");
    if (s.cols < 1) bad("cols must be at least 1");
    if (s.cols > std::numeric_limits<std::int32_t>::max()) bad("cols must be below 2^31");
}

float bf16_to_float(std::uint16_t bits) {
    const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &wide, sizeof f);
    return f;
}

std::uint16_t float_to_bf16(float value) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    if (std::isnan(value)) return 0x7FFF;  // CUDA's canonical bf16 NaN (cuda_bf16.hpp), whatever the payload
    bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace mds::kernels
