// What a training step reports: Megatron-DeepSpeed's training_log — the TensorBoard scalars every
// --tensorboard-log-interval iterations, the iteration line every --log-interval (print_rank_last),
// with the codecarbon energy summed over the nodes — and the loss alerts on what the line shows.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "mds/observe/log_line.h"  // TrainingLogLine, format_training_log_line
#include "megatron_args.h"  // megatron_args, python_str (the args as TensorBoard text)
#include "trainer_loop.h"

namespace mds::trainer {

void log_timers(observe::Timers& timers, const std::vector<std::string>& names, double normalizer,
                const std::string& option, Communicator& comm, bool print) {
    const auto values = observe::reduce_timers(
        timers, names, normalizer, observe::parse_timing_log_option(option), comm.rank(), comm.world_size(),
        [&comm](std::vector<double> v) { return comm.max(std::move(v), Group::World); });
    const std::string line = observe::format_timers_line(values, observe::parse_timing_log_option(option), comm.world_size());
    if (print && !line.empty()) print_line(line);
    for (const auto& n : names) timers.reset(n);
}

void Trainer::log_step(const StepOutcome& step) {
    const double lr = schedule_->lr();
    const std::optional<double> grad_norm =
        args_.optimizer.clip_grad > 0 && !step.skipped ? std::optional(step.optimizer.grad_norm) : std::nullopt;
    const std::optional<double> params_norm = args_.logging.log_params_norm ? std::optional(optimizer_->params_norm()) : std::nullopt;
    if (tb_ && iteration_ % args_.logging.tensorboard_log_interval == 0) write_step_tensorboard(step, lr, grad_norm, params_norm);
    if (interval_.advanced + interval_.skipped == 1) {  // the interval's first iteration: where its data starts
        interval_.first_iteration = iteration_;
        interval_.consumed_before = consumed_ - step.batch_size;
        interval_.skipped_samples_before = skipped_samples_;
    }
    if (iteration_ % args_.logging.log_interval == 0) {
        write_log_line(step, lr, grad_norm, params_norm);
        interval_ = IntervalStats{};
        if (memory_report_due_ && lr > 0.0) {  // BMD: after the optimizer states exist
            report_memory("after " + std::to_string(iteration_) + " iterations");
            memory_report_due_ = false;
        }
    }
}

ckpt::PyValue Trainer::start_args() const {
    TrainingProgress p = resumed_;
    p.train_iters = train_iters_;
    return megatron_args(args_, *model_, p);
}

void Trainer::start_tensorboard(const ckpt::PyValue* args) {
    if (!tb_) return;
    if (auto* tb = tb_->tensorboard(); tb && args) {
        for (const auto& [k, v] : args->namespace_attributes().items()) {
            if (k.type() != ckpt::PyType::Str) continue;
            // The writing process's own rank (the last rank's), where the checkpoint's args have the saving rank's
            // (local_rank is already the process's own: the launcher's).
            const auto& key = k.as_str();
            const std::string text = key == "rank" ? std::to_string(launch_.rank) : python_str(v);
            tb->add_text(key, text, resumed_.iteration);
        }
    }
    // Through tb_: MLflow gets it too, as every scalar.
    tb_->add_scalar("iteration-time/world_size", static_cast<double>(world_), resumed_.iteration);
    tb_->add_scalar("iteration-time/world_size", 0.0, resumed_.iteration + 1);
}

std::optional<double> Trainer::logged_num_zeros(const StepOutcome& step) const {
    if (step.optimizer.num_zeros >= 0) return static_cast<double>(step.optimizer.num_zeros);  // --log-num-zeros-in-grad
    // BMD with --deepspeed: train_step returns num_zeros_in_grad = 0 from DeepSpeed's engine, which never counts,
    // so its log line has "num zeros: 0.0" and TensorBoard its num-zeros scalars at every iteration.
    if (args_.parallel.deepspeed) return 0.0;
    return std::nullopt;
}

void Trainer::write_step_tensorboard(const StepOutcome& step, double lr, const std::optional<double>& grad_norm,
                                     const std::optional<double>& params_norm) {
    auto& tb = *tb_;
    auto both = [&](const std::string& tag, double v) {
        tb.add_scalar(tag, v, iteration_);
        tb.add_scalar(tag + " vs samples", v, consumed_);
    };
    auto three = [&](const std::string& tag, double v) {
        both(tag, v);
        tb.add_scalar(tag + " vs tokens", v, consumed_tokens_);
    };
    tb.add_scalar("steps-vs-samples/y=steps,x=samples", static_cast<double>(iteration_), consumed_);
    tb.add_scalar("steps-vs-samples/y=samples,x=steps", static_cast<double>(consumed_), iteration_);
    tb.add_scalar("steps-vs-tokens/y=steps,x=tokens", static_cast<double>(iteration_), consumed_tokens_);
    tb.add_scalar("steps-vs-tokens/y=tokens,x=steps", static_cast<double>(consumed_tokens_), iteration_);
    if (args_.logging.log_learning_rate_to_tensorboard) three("learning-rate/learning-rate", lr);
    if (args_.logging.log_batch_size_to_tensorboard) both("batch-size/batch-size", static_cast<double>(step.batch_size));
    three("lm-loss-training/lm loss", step.lm_loss);
    tb.add_scalar("lm-loss-training/lm loss vs gigaflos (without embeddings)", step.lm_loss,
                  static_cast<std::int64_t>(gigaflos_no_embeds_));
    if (scaler_.active() && args_.logging.log_loss_scale_to_tensorboard) three("loss-scale/loss-scale", scaler_.scale());
    if (grad_norm) three("grad-norm/grad-norm", *grad_norm);
    if (const auto zeros = logged_num_zeros(step)) three("num-zeros/num-zeros", *zeros);
    if (params_norm) three("params-norm/params-norm", *params_norm);
    if (curriculum_) tb.add_scalar("curriculum_seqlen", static_cast<double>(step.curriculum_seqlen), iteration_);
    if (args_.logging.log_timers_to_tensorboard) {
        // BMD's timers.write: this (last) rank's own timers, in seconds per iteration since the last log
        // line, not reset (the log line does that).
        const auto iters = static_cast<double>(std::max<std::int64_t>(1, interval_.advanced + interval_.skipped));
        for (const auto& name : observe::timer_log_order()) {
            if (!timers_.enabled(name) || !timers_.ran(name)) continue;
            std::string tag = "time/";  // built piecewise: GCC 12 warns falsely (-Wrestrict) of "literal" + string
            tag += name;
            tag += "-time";
            tb.add_scalar(tag, timers_.seconds(name) / iters, iteration_);
        }
    }
}

void Trainer::write_log_line(const StepOutcome& step, double lr, const std::optional<double>& grad_norm,
                             const std::optional<double>& params_norm) {
    const std::int64_t total_iters = interval_.advanced + interval_.skipped;
    const double per_iter = seconds_since(interval_.start) / static_cast<double>(total_iters);
    flops_shape_.global_batch_size = step.batch_size;
    flops_shape_.seq_length = step.tokens_per_sample;
    observe::TrainingLogLine line;
    line.iteration = iteration_;
    line.train_iters = train_iters_;
    line.consumed_samples = consumed_;
    line.consumed_tokens = consumed_tokens_;
    line.seconds_per_iteration = per_iter;
    line.learning_rate = lr;
    line.global_batch_size = step.batch_size;
    line.losses = {{"lm loss", interval_.loss_sum / static_cast<double>(std::max<std::int64_t>(1, interval_.advanced))}};
    if (args_.optimizer.fp16) line.loss_scale = scaler_.scale();
    line.grad_norm = grad_norm;
    line.num_zeros = logged_num_zeros(step);
    line.params_norm = params_norm;
    line.skipped_iterations = interval_.skipped;
    line.nan_iterations = interval_.nan;
    line.samples_per_second = static_cast<double>(step.batch_size) / per_iter;
    line.tflops = observe::tflops_per_gpu(flops_shape_, per_iter, world_);
    line.tokens_per_second = line.samples_per_second * static_cast<double>(step.tokens_per_sample);
    if (peak_tflops_) line.mfu = observe::model_flops_utilization(flops_shape_, per_iter, world_, *peak_tflops_);
    if (curriculum_) line.curriculum_seqlen = step.curriculum_seqlen;
    if (!args_.logging.codecarbon_dir.empty()) {
        // Energy up to now (not up to the last 15 s tick), summed over the nodes.
        double kwh = 0, kg = 0;
        if (carbon_) {
            carbon_->measure();
            kwh = carbon_->energy_kwh();
            kg = carbon_->emissions_kg();
        }
        line.energy_kwh = comm_->sum(kwh, Group::World);
        line.co2_kg = comm_->sum(kg, Group::World);
    }
    if (log_rank_) print_line(observe::format_training_log_line(line));
    // Loss alerts on what the line shows; a NaN/Inf iteration in the interval alerts too.
    const double shown = interval_.nan > 0 || interval_.advanced == 0 ? std::nan("") : line.losses[0].second;
    auto alert = alerts_->observe(iteration_, std::isfinite(step.lm_loss) ? shown : step.lm_loss);
    if (alert && log_rank_) {
        // The data of the interval and the command that prints it: through the run ledger (rank 0
        // keeps it; this last rank knows its path from the flags), else from this process's command
        // line and resumed iteration.
        const std::string ledger =
            ledger_ ? ledger_->path() : resolve_ledger_path(options_.run_ledger, args_.checkpoint.save);
        observe::AlertData data;
        data.first_iteration = interval_.first_iteration;
        data.last_iteration = iteration_;
        data.consumed_begin = interval_.consumed_before;
        data.consumed_end = consumed_;
        data.skipped_before = interval_.skipped_samples_before;
        data.skipped_after = skipped_samples_;
        // mds-sample-text reads GPT datasets; packed --sft rows are not its kind (no command then).
        data.sample_text_command =
            sft_            ? std::string()
            : !ledger.empty() ? observe::ledger_sample_text_command(std::filesystem::absolute(ledger).string(),
                                                                  data.first_iteration, data.last_iteration)
                            : observe::run_sample_text_command(dp_, resumed_.iteration, data.first_iteration,
                                                               data.last_iteration, options_.command_line);
        alert->attach_data(std::move(data));
        print_line(alert->message);
        if (alert_command_) alert_command_->run(*alert);
    }
    // The slowest and fastest ranks (a collective; reads the timers, so before their reset below).
    log_stragglers(total_iters);
    if (tb_ && args_.logging.log_timers_to_tensorboard) {
        tb_->add_scalar("iteration-time/iteration-time", per_iter, iteration_);
        tb_->add_scalar("iteration-time/iteration-time vs samples", per_iter, consumed_);
        tb_->add_scalar("iteration-time/iteration-time vs tokens", per_iter, consumed_tokens_);
        tb_->add_scalar("iteration-time/samples per second", line.samples_per_second, iteration_);
        tb_->add_scalar("iteration-time/samples per second per replica", line.samples_per_second, iteration_);
        tb_->add_scalar("iteration-time/tokens per second", *line.tokens_per_second, iteration_);
        tb_->add_scalar("iteration-time/tokens per second per replica", *line.tokens_per_second, iteration_);
        tb_->add_scalar("iteration-time/TFLOPs per gpu (estimated)", line.tflops, iteration_);
    }
    // Megatron's timers: BMD's "time (ms) | ..." line after the iteration line, normalized by the log
    // interval as BMD's timers.log(..., normalizer=log_interval), then every timer starts over.
    log_timers(timers_, observe::timer_log_order(), static_cast<double>(args_.logging.log_interval),
               args_.logging.timing_log_option, *comm_, log_rank_);
    timers_.reset();
    if (tb_) tb_->flush();
}

}  // namespace mds::trainer
