// Everything done to the gradients between the step's last backward pass and the optimizer, in one
// place, as Megatron-core's finalize_model_grads (megatron/core/distributed/finalize_model_grads.py)
// gathers it:
//   1. the data-parallel reduction: the gradients averaged over the data-parallel group
//      (Megatron's allreduce_gradients / DDP's finish_grad_sync; GradientReducer::finish, whose
//      buckets may have started during the backward pass);
//   2. the tied word embeddings: with pipeline stages, the first stage's input embedding and the
//      last stage's output layer both get the sum of their gradients (DeepSpeed's
//      allreduce_tied_weight_gradients, Megatron-core's _allreduce_word_embedding_grads).
// The LayerNorm copies of --sync-tp-duplicated-parameters are weights, not gradients: they are
// averaged before the forward pass (Trainer::sync_tp_duplicated_parameters), not here.
#pragma once

#include "mds/model/gpt_model.h"
#include "mds/observe/timers.h"  // Timers

namespace mds::trainer {

class Communicator;
class GradientReducer;
class MainGrads;

// `data_parallel`: the data-parallel reducer, null when DP = 1. A collective: with several
// processes every rank calls it after its backward passes. A parameter without a gradient takes
// part as zeros. `timers` (null: none) times step 1 as backward-params-all-reduce and step 2 as
// backward-embedding-all-reduce, BMD's names; both run, as in BMD, even where there is nothing to reduce.
// `main` (bf16's fp32 main gradients, null: none): the gradients are those, not the parameters' .grad.
void finalize_model_grads(model::GptModel& model, Communicator& comm, GradientReducer* data_parallel,
                          observe::Timers* timers = nullptr, const MainGrads* main = nullptr);

}  // namespace mds::trainer
