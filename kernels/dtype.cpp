#include "dtype.h"

#include <cmath>
#include <cstring>

namespace mds::kernels {

const char* dtype_name(Dtype d) { return d == Dtype::F32 ? "fp32" : "bf16"; }

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
