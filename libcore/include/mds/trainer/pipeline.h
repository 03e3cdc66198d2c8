// Pipeline parallelism as Megatron-DeepSpeed runs it: the model's layers cut into stages as
// DeepSpeed's PipelineModule cuts GPTModelPipe's spec list (--pp-partition-method, default
// 'type:transformer'), and one training step's micro batches run through the stages with the 1F1B
// schedule (Megatron's forward_backward_pipelining_without_interleaving): stage s first runs
// PP - s - 1 forward passes, then alternates one forward and one backward, then drains the
// backward passes. Activations travel forward and their gradients back between neighbouring
// stages; a stage sending forward while receiving the gradient of an earlier micro batch does both
// at once (Communicator::exchange), as Megatron's batched isend/irecv.
//
// With one stage the same code runs each micro batch's forward then backward, in order.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mds/model/gpt_model.h"
#include "mds/observe/timers.h"  // Timers
#include "mds/trainer/micro_batches.h"  // MicroBatchInputs

namespace mds::trainer {

class Communicator;

// The blocks of stage `stage` of `stages` for the model `config` split over `tp` tensor-parallel
// ranks, as DeepSpeed partitions Megatron-DeepSpeed's GPTModelPipe with `method`
// ('type:transformer', 'uniform' or 'parameters', counted per TP rank). Throws mds::UsageError when
// the cut leaves the embedding off the first stage or the final LayerNorm and output layer off the
// last one, or for an unknown method.
model::PipelineStage pipeline_stage(const model::GptConfig& config, int tp, int stage, int stages, const std::string& method);

// What a pipeline step needs: the model stage, the neighbours (global ranks, -1 at the ends), the
// micro batches' shape, and micro batch j's tokens, labels [micro_batch_size, seq_length], loss
// mask and position ids (read by the first stage, which uses the tokens and position ids, and the
// last, which uses the labels and the mask: each micro batch's loss is sum(loss · mask) / sum(mask),
// BMD's loss_func). The attention is causal on every stage (GPTModelPipe passes no mask along);
// packed --sft rows also keep it within each example, from their segment ids, which every stage
// reads (batch_on_every_stage).
struct PipelineStep {
    model::GptModel* model = nullptr;
    Communicator* comm = nullptr;  // the trainer always gives one; a single stage never uses it
    int prev = -1, next = -1;
    std::int64_t micro_batches = 1, micro_batch_size = 1, seq_length = 1;
    std::function<MicroBatchInputs(std::int64_t)> batch;
    bool batch_on_every_stage = false;  // middle stages call batch() too (for the segment ids)
    // Called just before the step's last backward pass (e.g. GradientReducer::arm); may be empty.
    std::function<void()> before_last_backward;
    // Megatron's timers of the schedule (null: none): forward-compute (with batch-generator inside,
    // as in BMD), backward-compute, and each transfer by what it moves, as Megatron's p2p_communication
    // names them: forward-recv, forward-send, backward-recv, backward-send, and the combined exchanges
    // forward-send-backward-recv and backward-send-forward-recv. Training only; evaluation is not timed.
    observe::Timers* timers = nullptr;
};

// One training step's forward and backward passes (1F1B); each micro batch's loss is
// backpropagated multiplied by `loss_factor` (loss scale / micro batches). Returns the sum of the
// micro batches' losses on the last stage, 0 on the others. Gradients accumulate in the parameters.
double pipeline_train(const PipelineStep& step, double loss_factor);

// Forward passes only (evaluation): the sum of the micro batches' losses on the last stage.
double pipeline_evaluate(const PipelineStep& step);

}  // namespace mds::trainer
