// Evaluation: Megatron-DeepSpeed's evaluate_and_print_results on the validation sets (every
// --eval-interval iterations and at the end) and the test sets (at the end).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "mds/observe/log_line.h"  // format_validation_block
#include "trainer_loop.h"

namespace mds::trainer {

// A Mode 2 group prints "NAME loss at ..." and writes lm-loss-validation/NAME/...; the test sets at
// iteration 0, as Megatron passes it. Returns the samples served (Megatron adds them to
// consumed_valid_samples).
std::int64_t Trainer::evaluate(const std::string& prefix, EvalSet& set, bool test) {
    c10::NoGradGuard no_grad;
    model_->set_training(false);
    sync_tp_duplicated_parameters();
    const std::int64_t nmb = calculator_->num_micro_batches();
    double total = 0;
    std::int64_t served = 0;
    // Evaluation reads in order (check_data refuses --dataloader-type cyclic with validation or test sets).
    const PretrainingSampler order(DataloaderType::Single, 0, mbs_, dp_, dp_rank_);
    for (std::int64_t it = 0; it < args_.logging.eval_iters; ++it) {
        total += pipeline_evaluate(pipeline_step(set.batches, order, set.consumed, nmb, cfg_.seq_length));
        set.consumed += nmb * mbs_ * dp_;
        served += nmb * mbs_ * dp_;
    }
    model_->set_training(true);
    total = comm_->sum(total, Group::Data);
    const double loss = total / static_cast<double>(args_.logging.eval_iters * nmb * dp_);
    if (log_rank_) print_line(observe::format_validation_block(prefix, {{"lm loss", loss}}, set.group));
    if (tb_ && (!test || set.group)) {
        const double ppl = std::exp(std::min(20.0, loss));
        std::string tag = "lm-loss-validation/";
        if (set.group) {
            tag += *set.group;
            tag += "/";
        }
        tag += "lm loss validation";
        const std::int64_t step = test ? 0 : iteration_;
        tb_->add_scalar(tag, loss, step);
        tb_->add_scalar(tag + " vs samples", loss, consumed_);
        tb_->add_scalar(tag + " vs tokens", loss, consumed_tokens_);
        tb_->add_scalar(tag + " vs gigaflos (without embeddings)", loss, static_cast<std::int64_t>(gigaflos_no_embeds_));
        if (args_.logging.log_validation_ppl_to_tensorboard) {
            tb_->add_scalar(tag + " ppl", ppl, step);
            tb_->add_scalar(tag + " ppl vs samples", ppl, consumed_);
            tb_->add_scalar(tag + " ppl vs tokens", ppl, consumed_tokens_);
            tb_->add_scalar(tag + " ppl vs gigaflos (without embeddings)", ppl, static_cast<std::int64_t>(gigaflos_no_embeds_));
        }
        tb_->flush();
    }
    return served;
}

// Every validation set in order.
void Trainer::evaluate_valid(const std::string& prefix) {
    for (auto& v : valid_sets_) consumed_valid_ += evaluate(prefix, v, false);
}

}  // namespace mds::trainer
