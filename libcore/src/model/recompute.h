// Activation recomputation (Megatron's --checkpoint-activations): run a chunk of transformer
// blocks without keeping their activations, and run it again, with the same dropout masks, when
// backward reaches it. Internal to the model area.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace mds::model {

class GptModel;

// Blocks [first, first + count) of `model` applied to `x`; only `x` is kept for backward.
at::Tensor recomputed_blocks(GptModel& model, std::int64_t first, std::int64_t count, const at::Tensor& x,
                             const at::Tensor& attn_bias);

}  // namespace mds::model
