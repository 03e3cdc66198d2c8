// The element types kernels/ takes, bf16 ↔ fp32 on the host as CUDA converts them (the references use these), and
// the shape of the row kernels' operands.
#pragma once

#include <cstdint>

namespace mds::kernels {

enum class Dtype { F32, BF16 };

const char* dtype_name(Dtype d);

// Rows of `cols` contiguous values (the bias gradients' dy, LayerNorm's x, dy and dx).
struct RowsShape {
    std::int64_t rows = 0;
    std::int64_t cols = 0;
};

// Throws std::invalid_argument "<op>: <what> (rows R, cols C)" when a size is out of range (rows or cols < 1,
// cols ≥ 2^31: the kernels index a row with 32-bit column numbers).
void check_rows(const char* op, const RowsShape& s);

// bf16 ↔ fp32 as CUDA's __bfloat162float / __float2bfloat16 (round to nearest even; every NaN to 0x7FFF).
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16(float value);

}  // namespace mds::kernels
