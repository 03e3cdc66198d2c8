// The data-parallel gradient all-reduce, overlapped with the backward pass as PyTorch's DDP does
// it: the parameters, in reverse order (roughly the order backward finishes them), are cut into
// buckets of at most `bucket_bytes` (DDP's 25 MiB by default). During the last backward pass of a step (the gradients of the earlier
// micro batches are only partial sums), a hook on each parameter notes when its gradient is final;
// once every gradient of the next bucket in line is, the bucket is flattened and its all-reduce
// started on the data-parallel group while backward goes on. Buckets start in the same fixed order
// on every rank, which a collective group needs. finish() starts the buckets still waiting (a
// parameter that got no gradient counts as zeros), waits for all, and writes the averages back.
// With fp32 main gradients (bf16, main_grads.h) the reducer all-reduces those instead of the .grad
// tensors, in fp32 as the real program does, and hears of each gradient from MainGrads' hooks; a
// bucket is then a range of their one buffer, reduced in place (no flattened copy, nothing to write back).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mds/model/gpt_model.h"
#include "mds/trainer/comm.h"  // kGradientBucketBytes

namespace mds::trainer {

class MainGrads;

class GradientReducer {
public:
    // `params` and `comm` (and `main`, when given) must outlive the reducer; `scale` multiplies the sums
    // (1 / DP: a mean); buckets hold at most `bucket_bytes` of the tensors reduced.
    GradientReducer(std::vector<model::Parameter>& params, Communicator& comm, double scale,
                    std::int64_t bucket_bytes = kGradientBucketBytes, MainGrads* main = nullptr);
    ~GradientReducer();
    GradientReducer(const GradientReducer&) = delete;
    GradientReducer& operator=(const GradientReducer&) = delete;

    // The next backward pass is the step's last: reduce the gradients as they become final.
    void arm();
    // Every bucket reduced and written back (into the parameters' .grad, or the main gradients); disarms.
    void finish();
    std::size_t buckets() const;
    // Buckets whose all-reduce started before finish() in the last step (the overlap achieved).
    std::size_t started_during_backward() const;

private:
    struct Impl;
    std::shared_ptr<Impl> impl_;  // shared with the hooks on the parameters
};

}  // namespace mds::trainer
