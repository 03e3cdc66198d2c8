#include "mds/trainer/micro_batches.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "mds/util/error.h"

namespace mds::trainer {

std::int64_t micro_batch_first_sample(std::int64_t step_first, std::int64_t j, std::int64_t mbs, std::int64_t dp,
                                      std::int64_t dp_rank) {
    return step_first + j * mbs * dp + dp_rank * mbs;
}

at::Tensor micro_batch(const Sampler& sample, std::int64_t first, std::int64_t mbs, std::int64_t seq, c10::Device device) {
    auto t = at::empty({mbs, seq + 1}, at::TensorOptions().dtype(at::kLong));
    auto* out = t.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < mbs; ++i) {
        const auto s = sample(first + i);
        if (static_cast<std::int64_t>(s.size()) != seq + 1)
            throw Error("sample " + std::to_string(first + i) + " has " + std::to_string(s.size()) + " tokens, expected " +
                        std::to_string(seq + 1));
        std::copy(s.begin(), s.end(), out + i * (seq + 1));
    }
    return t.to(device);
}

std::pair<at::Tensor, at::Tensor> tokens_and_labels(const at::Tensor& batch, std::int64_t seqlen) {
    return {batch.narrow(1, 0, seqlen), batch.narrow(1, 1, seqlen)};
}

}  // namespace mds::trainer
