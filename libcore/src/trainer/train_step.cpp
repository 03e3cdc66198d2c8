// One training step, Megatron's train_step: the micro batches through the pipeline schedule
// (forward and backward), the gradients finished (data-parallel average, tied embeddings), the
// optimizer step with the fp16 loss scaler and the LR schedule, and the step's bookkeeping.
#include <ATen/ATen.h>

#include <cmath>

#include "mds/trainer/finalize_grads.h"  // finalize_model_grads
#include "mds/trainer/sample_map.h"      // skip_ranges_due, rank_micro_batch_samples, dump_batches
#include "trainer_loop.h"

namespace mds::trainer {

void Trainer::sync_tp_duplicated_parameters() {
    if (!tp_norms_.empty()) comm_->all_reduce_sum(tp_norms_, Group::Tensor, 1.0 / static_cast<double>(tp_size_));
}

// The micro batches of one step: micro batch j starts at data stream position first_sample + j·mbs·DP;
// `order` (--dataloader-type) says which samples this rank takes there.
PipelineStep Trainer::pipeline_step(const BatchSource& source, const PretrainingSampler& order, std::int64_t first_sample,
                                    std::int64_t nmb, std::int64_t seqlen) {
    PipelineStep ps;
    ps.model = model_.get();
    ps.comm = comm_.get();
    ps.prev = prev_stage_;
    ps.next = next_stage_;
    ps.micro_batches = nmb;
    ps.micro_batch_size = mbs_;
    ps.seq_length = seqlen;
    ps.batch = [&source, &order, first_sample, seqlen, mbs = mbs_, dp = dp_](std::int64_t j) {
        return source(rank_micro_batch_samples(order, first_sample, j, mbs, dp), seqlen);
    };
    ps.batch_on_every_stage = sft_.has_value();
    return ps;
}

BatchSource Trainer::gpt_batches(Sampler sample) const {
    return [sample = std::move(sample), device = device_, seq = cfg_.seq_length, eod = eod_mask_id_,
            reset_eod = reset_position_eod_](const std::vector<std::int64_t>& ids, std::int64_t seqlen) {
        return micro_batch_inputs(host_micro_batch(sample, ids, seq, device), seqlen, eod, reset_eod, device);
    };
}

BatchSource Trainer::sft_batches(int split, std::size_t group) const {
    return [this, split, group](const std::vector<std::int64_t>& ids, std::int64_t seqlen) {
        std::vector<data::PackedSample> rows;
        rows.reserve(ids.size());
        for (const auto id : ids) rows.push_back(sft_->sample(split, group, id));
        return sft_micro_batch_inputs(rows, cfg_.seq_length, seqlen, sft_options_, device_);
    };
}

// BMD's train loop, before a step: when iteration + 1 falls in the first range left, it drops the range
// and draws END - iteration micro batches from the data iterator without training on them, then
// trains this same iteration on what follows. Only that first range is looked at (a range ending at
// the resumed iteration blocks the later ones, as in BMD); iteration, consumed samples, LR schedule
// and batch-size ramp-up do not move.
void Trainer::skip_data_if_due() {
    skipped_samples_ += skip_ranges_due(skip_ranges_, iteration_, mbs_, dp_, [this](std::int64_t start, std::int64_t end) {
        info("Skipped iterations " + std::to_string(start) + " to " + std::to_string(end) +
             " due to --skip-train-iteration-range flag.");
    });
}

StepOutcome Trainer::train_step() {
    // ---- this step's batch size, sequence length and loss scale ----
    calculator_->update(consumed_);
    const std::int64_t nmb = calculator_->num_micro_batches();
    StepOutcome out;
    out.batch_size = calculator_->current_global_batch_size();
    const double scale = scaler_.scale();
    // Curriculum: the step's sequence length; the samples are cut to it (Megatron-DeepSpeed).
    std::int64_t seqlen = cfg_.seq_length;
    if (curriculum_) {
        const auto c = flags::curriculum_step(*curriculum_, iteration_, cfg_.seq_length);
        seqlen = c.batch_seq_length;
        out.curriculum_seqlen = c.curriculum_seqlen;
    }
    out.tokens_per_sample = curriculum_ ? out.curriculum_seqlen : cfg_.seq_length;

    // ---- zero the gradients, pull the TP-duplicated LayerNorms together ----
    optimizer_->zero_grad();
    sync_tp_duplicated_parameters();

    // ---- forward / backward (1F1B over the pipeline stages; one stage: each micro batch in turn) ----
    // The data stream runs ahead of consumed_ by what --skip-train-iteration-range skipped (BMD's iterator).
    auto step = pipeline_step(train_batches_, *train_order_, consumed_ + skipped_samples_, nmb, seqlen);
    if (!dump_batches_.empty())  // debugging aid: docs/mds-sample-text.md
        step.batch = dump_batches(std::move(step.batch),
                                  {dump_batches_ + ".rank" + std::to_string(launch_.rank), iteration_ + 1, dp_rank_,
                                   tp_.rank, pp_rank_,
                                   [order = &*train_order_, first = consumed_ + skipped_samples_, mbs = mbs_, dp = dp_](
                                       std::int64_t j) { return rank_micro_batch_samples(*order, first, j, mbs, dp); }});
    if (reducer_ && args_.parallel.overlap_grad_reduce) step.before_last_backward = [this] { reducer_->arm(); };
    step.timers = &timers_;
    // Megatron divides each micro batch's loss by the number of micro batches.
    const double loss_sum = [&] {
        observe::ScopedTimer t(&timers_, "forward-backward");  // Megatron-LM's, around its forward_backward_func
        return pipeline_train(step, scale / static_cast<double>(nmb));
    }();
    const double stage_loss = loss_sum / static_cast<double>(nmb);  // the last stage's; 0 on the others

    // ---- gradient finishing: data-parallel average, tied embeddings ----
    finalize_model_grads(*model_, *comm_, reducer_.get(), &timers_, main_grads_.get());
    out.lm_loss = comm_->sum(stage_loss, Group::Data) / static_cast<double>(dp_);

    // ---- optimizer step (unscale, clip, AdamW; fp16: skipped on overflow), LR schedule ----
    timers_.start("optimizer");  // BMD's: Megatron's optimizer.step(), whose fp16 loss scaler update is inside
    out.optimizer = optimizer_->step(schedule_->lr(), schedule_->weight_decay(), scale, scaler_.active(),
                                     args_.logging.log_num_zeros_in_grad);
    out.skipped = out.optimizer.skipped;
    if (scaler_.active()) out.skipped = scaler_.update(out.optimizer.skipped);
    timers_.stop("optimizer");
    if (!out.skipped) schedule_->step(out.batch_size, consumed_tokens_);  // tokens before this iteration, as BS AnnealingLR

    // ---- bookkeeping ----
    if (carbon_) carbon_->measure_if_due();
    ++iteration_;
    consumed_ += out.batch_size;
    consumed_tokens_ += out.batch_size * out.tokens_per_sample;
    gigaflos_no_embeds_ += 6.0 * static_cast<double>(out.batch_size * cfg_.seq_length) * params_no_embeddings_billions_;
    summary_.last_loss = out.lm_loss;
    if (out.skipped) {
        ++skipped_total_;
        ++interval_.skipped;
        if (!std::isfinite(out.lm_loss)) ++interval_.nan;
    } else {
        ++interval_.advanced;
        interval_.loss_sum += out.lm_loss;
    }
    return out;
}

}  // namespace mds::trainer
