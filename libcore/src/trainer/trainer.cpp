// run_training and the loop: Megatron's train() — a step, its log, validation and a checkpoint when
// due, then the exit conditions — and what the end of training does. The set-up is in
// trainer_setup.cpp, the step in train_step.cpp (trainer_loop.h lists the pieces).
#include "mds/trainer/trainer.h"

#include <filesystem>

#include "mds/trainer/sample_map.h"    // drop_skip_ranges_before
#include "mds/trainer/stop_signals.h"  // stop_signal_received
#include "mds/util/text.h"  // python_float_repr
#include "mds/util/tool.h"  // print_info
#include "trainer_loop.h"

namespace mds::trainer {

RunSummary run_training(const flags::TrainArgs& args, const RunOptions& options) {
    const auto process_start = Clock::now();
    Trainer trainer(args, options, process_start);
    try {
        return trainer.train();
    } catch (const std::exception& e) {
        trainer.record_error(e.what());  // the run ledger's line says why the run stopped
        trainer.record_mlflow_error(e.what());
        throw;
    }
}

RunSummary Trainer::train() {
    if (args_.logging.evaluate_only()) return evaluate_only();
    // A run resumed at or past --exit-iteration / --exit-samples (a resubmitted job) trains nothing and
    // leaves its checkpoint as it is.
    Stop stop = exit_point_reached(args_.exit, iteration_, consumed_);
    if (stop != Stop::Continue) info(already_at_exit_point(stop));
    else info("training " + std::to_string(train_iters_) + " iterations of " + std::to_string(gbs_) + " × " +
              std::to_string(cfg_.seq_length) + " tokens");
    model_->set_training(true);
    interval_ = IntervalStats{};
    if (stop == Stop::Continue) stop = iteration_ < train_iters_ ? Stop::Continue : Stop::Finished;
    // --skip-train-iteration-range: BMD drops the ranges that end before the resumed iteration.
    drop_skip_ranges_before(skip_ranges_, iteration_);
    if (stop == Stop::Continue) info_datetime("before the start of training step");
    while (stop == Stop::Continue) {
        skip_data_if_due();
        if (profiler_) profiler_->before_step(iteration_);
        const StepOutcome step = train_step();
        log_step(step);
        if (profiler_) profiler_->after_step(iteration_);
        poll_save();
        if (do_valid_ && args_.logging.eval_interval > 0 && iteration_ % args_.logging.eval_interval == 0)
            evaluate_valid("iteration " + std::to_string(iteration_));
        if (flags::save_due(args_.checkpoint.save_interval, iteration_)) save();
        stop = should_stop();
        leave(stop);
    }
    if (profiler_) profiler_->finish(iteration_);  // the run stopped inside the window
    end_of_training(stop);
    return summary_;
}

// Exit conditions, checked between iterations as Megatron does. With several processes they agree
// first (a signal may reach one rank only), as Megatron's DistributedSignalHandler and its
// all-reduced exit duration.
Stop Trainer::should_stop() {
    StopInputs mine;
    mine.signal = stop_signal_received();
    mine.kill_switch = !args_.exit.kill_switch_path.empty() && std::filesystem::exists(args_.exit.kill_switch_path);
    mine.minutes = seconds_since(process_start_) / 60.0;
    stop_inputs_ = agree_on_stop(mine, *comm_);
    return trainer::should_stop(args_.exit, iteration_, consumed_, train_iters_, stop_inputs_);
}

std::string Trainer::already_at_exit_point(Stop stop) const {
    const std::string at = "iteration " + std::to_string(iteration_) + " (" + std::to_string(consumed_) + " consumed samples)";
    const std::string flag = stop == Stop::ExitIteration ? "--exit-iteration " + std::to_string(*args_.exit.exit_iteration)
                                                         : "--exit-samples " + std::to_string(*args_.exit.exit_samples);
    return "resumed at " + at + ", at or past " + flag + ": exiting without training (the checkpoint is left as it is)";
}

// Every exit but the kill switch (Megatron-DeepSpeed exits on it without saving) saves a checkpoint
// first; the messages and their order around the save are Megatron's.
void Trainer::leave(Stop stop) {
    switch (stop) {
    case Stop::Continue:
    case Stop::Finished:
        return;
    case Stop::Signal:
        info("received " + stop_reason(stop, stop_inputs_) + ": stopping after iteration " + std::to_string(iteration_));
        save();
        finish_save();
        return;
    case Stop::KillSwitch:
        info_datetime("Detected kill switch at " + args_.exit.kill_switch_path + ". Exiting");
        return;
    case Stop::ExitDuration:
        save();
        finish_save();  // the exit waits for the checkpoint's files
        info_datetime("exiting program after " + python_float_repr(stop_inputs_.minutes) + " minutes");
        return;
    case Stop::ExitInterval:
        save();
        finish_save();  // the exit waits for the checkpoint's files
        info_datetime("exiting program at iteration " + std::to_string(iteration_));
        return;
    case Stop::ExitIteration:
        save();
        finish_save();  // the exit waits for the checkpoint's files
        info_datetime("exiting program at iteration " + std::to_string(iteration_) + " (--exit-iteration " +
             std::to_string(*args_.exit.exit_iteration) + ")");
        return;
    case Stop::ExitSamples:
        save();
        finish_save();  // the exit waits for the checkpoint's files
        info_datetime("exiting program at iteration " + std::to_string(iteration_) + ": " + std::to_string(consumed_) +
             " consumed samples reach --exit-samples " + std::to_string(*args_.exit.exit_samples));
        return;
    }
}

void Trainer::end_of_training(Stop stop) {
    if (stop == Stop::Finished) {
        info_datetime("after training is done");
        if (do_valid_) evaluate_valid("the end of training for val data");
        if (iteration_ != 0) save();
        for (auto& t : test_sets_) (void)evaluate("the end of training for test data", t, true);
    }
    finish_run(stop);
}

// --eval-only: BMD's pretrain with do_train off. No step: the validation sets, then the test sets, as
// at the end of training, at iteration 0 (pretrain's own counter, which no step moved: the
// TensorBoard step), and no checkpoint (pretrain saves only after a step).
RunSummary Trainer::evaluate_only() {
    info("--eval-only: no training step; evaluating the weights " +
         (iteration_ > 0 ? "of iteration " + std::to_string(iteration_) : std::string("as initialized")));
    const std::int64_t loaded = iteration_;
    iteration_ = 0;
    if (do_valid_) evaluate_valid("the end of training for val data");
    for (auto& t : test_sets_) (void)evaluate("the end of training for test data", t, true);
    iteration_ = loaded;
    if (ledger_) ledger_->finish("eval only");  // before finish_run's "finished" (the first reason stays)
    finish_run(Stop::Finished);
    summary_.exit_reason = "eval only";
    return summary_;
}

void Trainer::finish_run(Stop stop) {
    finish_save();  // every exit publishes a save still being written before the process ends
    if (iteration_ > resumed_.iteration) report_memory("at the end of training");  // mds: the run's peaks
    if (tb_) tb_->flush(true);
    if (carbon_) {
        const auto row = carbon_->stop();
        for (const auto& note : carbon_->take_new_notes()) print_info("codecarbon: " + note);
        print_info("codecarbon: " + std::to_string(row.energy_consumed) + " kWh, " + std::to_string(row.emissions) +
                   " kg CO2eq in " + std::to_string(row.duration) + " s, written to " + carbon_->output_path());
    }
    if (reducer_ && iteration_ > resumed_.iteration)
        info("data-parallel gradients: in the last step " + std::to_string(reducer_->started_during_backward()) + " of " +
             std::to_string(reducer_->buckets()) + " bucket all-reduces started during the backward pass");
    comm_->finish();  // rank 0 holds the rendezvous store: nobody leaves while others use it
    summary_.iterations = iteration_;
    summary_.consumed_samples = consumed_;
    summary_.exit_reason = stop_reason(stop, stop_inputs_);
    if (ledger_) {
        ledger_->record_progress(iteration_, consumed_);
        ledger_->finish(summary_.exit_reason);
    }
    finish_mlflow(stop);  // last: it may wait --mlflow-flush-timeout for the server
}

}  // namespace mds::trainer
