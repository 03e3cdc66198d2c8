// Tensor helpers shared by the trainer area's unit tests (built as one translation unit).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace mds::trainer_test {

// 0, 1, ..., n - 1 as fp32.
inline at::Tensor floats(std::int64_t n) { return at::arange(n, at::TensorOptions().dtype(at::kFloat)); }

}  // namespace mds::trainer_test
