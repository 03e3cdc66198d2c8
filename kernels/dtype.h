// The element types kernels/ takes, and bf16 ↔ fp32 on the host as CUDA converts them (the references use these).
#pragma once

#include <cstdint>

namespace mds::kernels {

enum class Dtype { F32, BF16 };

const char* dtype_name(Dtype d);

// bf16 ↔ fp32 as CUDA's __bfloat162float / __float2bfloat16 (round to nearest even; every NaN to 0x7FFF).
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16(float value);

}  // namespace mds::kernels
