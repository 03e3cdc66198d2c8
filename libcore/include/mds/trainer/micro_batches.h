// The micro batches of one training step as Megatron's pretraining sampler
// (megatron/data/data_samplers.py, MegatronPretrainingSampler) hands them to the data-parallel
// ranks: a step's global batch is the samples [first, first + batch size) of the sample index;
// micro batch j of the step is the run [j·mbs·DP, (j+1)·mbs·DP) of it, and data-parallel rank r
// takes the mbs samples at r·mbs within that run.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace mds::trainer {

// Sample n of one dataset (the training one, a validation or test split or group): seq + 1 token ids.
using Sampler = std::function<std::vector<std::int64_t>(std::int64_t)>;

// Where `dp_rank`'s part of micro batch `j` starts, for a step whose global batch starts at sample
// `step_first`.
std::int64_t micro_batch_first_sample(std::int64_t step_first, std::int64_t j, std::int64_t mbs, std::int64_t dp,
                                      std::int64_t dp_rank);

// One micro batch of `mbs` samples starting at sample `first`, as [mbs, seq + 1] token ids on
// `device`. Throws mds::Error naming the sample when one has another length.
at::Tensor micro_batch(const Sampler& sample, std::int64_t first, std::int64_t mbs, std::int64_t seq, c10::Device device);

// The model's tokens and labels from a micro batch [mbs, seq + 1], cut to `seqlen` (<= seq: the
// curriculum's length, Megatron-DeepSpeed's): tokens [:, 0, seqlen), labels [:, 1, seqlen + 1).
std::pair<at::Tensor, at::Tensor> tokens_and_labels(const at::Tensor& batch, std::int64_t seqlen);

}  // namespace mds::trainer
