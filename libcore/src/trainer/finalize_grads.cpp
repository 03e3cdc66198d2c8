#include "mds/trainer/finalize_grads.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "mds/trainer/comm.h"
#include "mds/trainer/grad_reducer.h"
#include "mds/trainer/main_grads.h"

namespace mds::trainer {

void finalize_model_grads(model::GptModel& model, Communicator& comm, GradientReducer* data_parallel,
                          observe::Timers* timers, const MainGrads* main) {
    // Gradients averaged over the data-parallel group before clipping (Megatron's
    // allreduce_gradients); a parameter without a gradient contributes zeros. With
    // --overlap-grad-reduce most buckets were reduced during backward-compute: this times the rest.
    {
        observe::ScopedTimer t(timers, "backward-params-all-reduce");
        if (data_parallel) data_parallel->finish();
    }
    observe::ScopedTimer t(timers, "backward-embedding-all-reduce");
    const auto& stage = model.pipeline_stage();
    if (stage.size > 1 && (stage.first() || stage.last())) {
        // The tied word embeddings: the first stage's input and the last stage's output layer
        // get the sum of both gradients (DeepSpeed's allreduce_tied_weight_gradients).
        c10::NoGradGuard no_grad;
        auto& w = model.parameter(model::kEmbeddingLayer, "word_embeddings.weight").tensor;
        if (main) {
            comm.all_reduce_sum({main->of(w)}, Group::Embedding);
            return;
        }
        if (!w.grad().defined()) w.mutable_grad() = at::zeros_like(w);
        comm.all_reduce_sum({w.grad()}, Group::Embedding);
    }
}

}  // namespace mds::trainer
