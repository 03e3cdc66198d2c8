// What a checkpoint holds of the training loop (torchtitan's state_dict / load_state_dict): the
// resume, in two parts around the optimizer's construction, and the save. The files themselves are
// checkpoint.h's.
#include <ATen/DeviceAccelerator.h>  // at::accelerator::synchronizeDevice (the save timers on a GPU)

#include <cstdio>
#include <functional>
#include <filesystem>

#include "mds/util/tool.h"  // print_info, print_warning
#include "trainer_loop.h"

namespace mds::trainer {

// Resume: weights first (the optimizer's fp32 masters are built from them), then the rest in load_state.
void Trainer::load_weights() {
    if (args_.checkpoint.load.empty()) return;
    loader_ = CheckpointLoader::open(args_, tp_.rank, pp_rank_);
    if (!loader_) {
        info("WARNING: could not find the metadata file " + (std::filesystem::path(args_.checkpoint.load) / "latest").string());
        info("    will not load any checkpoints and will start from random");
        return;
    }
    info(" loading checkpoint from " + args_.checkpoint.load + " at iteration " + std::to_string(loader_->iteration()));
    loaded_dir_ = loader_->directory();
    loader_->load_weights(*model_);
}

void Trainer::load_state() {
    if (loader_ && !args_.checkpoint.finetune) {
        resumed_ = loader_->progress();
        if (!args_.checkpoint.no_load_optim) loader_->load_optimizer(*optimizer_, *model_, resumed_);
        schedule_->load_state(resumed_.lr, optim::lr_checkpoint_policy(args_.optimizer));
        scaler_.load_from(resumed_);
        if (!args_.checkpoint.no_load_rng)
            for (const auto& w : loader_->load_rng(*model_))
                if (info_rank_) print_warning(w);
        info("  successfully loaded checkpoint from " + args_.checkpoint.load + " at iteration " +
             std::to_string(resumed_.iteration) + (args_.checkpoint.no_load_optim ? " (without optimizer states)" : "") +
             (args_.checkpoint.no_load_rng ? " (without RNG states)" : ""));
    } else if (loader_) {
        resumed_.hf_vocab_size = loader_->hf_vocab_size();
        info("  successfully loaded the weights of " + loader_->directory() + " for fine-tuning from iteration 0");
    }
    loader_.reset();
    // Megatron checks the batch size in force after loading and at every step; the batch-size
    // ramp-up's later sizes are checked here too, so that a data-parallel size that only some of
    // them divide stops the run now, not hours into it (tr1-13B resumed its ramp-up on 4x the nodes).
    calculator_->check_remaining_batch_sizes(resumed_.consumed_train_samples, resumed_.iteration, train_iters_);
    calculator_->update(resumed_.consumed_train_samples);

    iteration_ = resumed_.iteration;
    consumed_ = resumed_.consumed_train_samples;
    consumed_tokens_ = resumed_.consumed_train_tokens;
    consumed_valid_ = resumed_.consumed_valid_samples;
    skipped_total_ = resumed_.skipped_steps;
    gigaflos_no_embeds_ = resumed_.gigaflos_no_embeds;
    // Every validation set in order; on resume each starts at consumed_valid_samples / their number.
    for (auto& v : valid_sets_) v.consumed = consumed_valid_ / static_cast<std::int64_t>(valid_sets_.size());
}

// Checkpoints: Megatron's save_checkpoint_and_time. The carbon tracker writes its row then too,
// so a job killed after the save has its energy accounted up to it. With --async-save (the default)
// the save only starts here; finish_save() publishes it (and logs, flushes) once written.
void Trainer::save() {
    if (args_.checkpoint.save.empty() || iteration_ == last_saved_) return;
    if (args_.checkpoint.async_save) finish_save();  // one save at a time: the previous one first
    TrainingProgress p;
    p.iteration = iteration_;
    p.consumed_train_samples = consumed_;
    p.consumed_valid_samples = consumed_valid_;
    p.consumed_train_tokens = consumed_tokens_;
    p.gigaflos_no_embeds = gigaflos_no_embeds_;
    p.skipped_steps = skipped_total_;
    p.lr = schedule_->state();
    p.current_lr = schedule_->lr();
    p.current_weight_decay = schedule_->weight_decay();
    p.train_iters = train_iters_;
    p.do_valid = do_valid_;
    p.do_test = do_test_;
    p.skip_ranges_left.assign(skip_ranges_.begin(), skip_ranges_.end());
    p.mlflow_run_id = mlflow_run_id_for_checkpoint();
    p.hf_vocab_size = resumed_.hf_vocab_size;
    scaler_.save_to(p);
    info("saving checkpoint at iteration " + std::to_string(iteration_) + " to " + args_.checkpoint.save);
    if (args_.checkpoint.async_save) {
        start_async_save(p);
        return;
    }
    timers_.start("save-checkpoint");
    const auto saved = save_checkpoint(args_, vocab_, *model_, *optimizer_, p, comm_.get());
    timers_.stop("save-checkpoint");
    last_saved_ = iteration_;
    if (ledger_) ledger_->record_save(iteration_, saved.directory, consumed_);  // `latest` has moved
    char buf[160];
    std::snprintf(buf, sizeof buf, " (%.1f MB in %.2f s)", static_cast<double>(saved.bytes) / 1e6, saved.seconds);
    info("  successfully saved checkpoint at iteration " + std::to_string(iteration_) + " to " + args_.checkpoint.save + buf);
    // BMD's save_checkpoint_and_time: its own "time (ms) | save-checkpoint: X" line (a collective).
    log_timers(timers_, {"save-checkpoint"}, 1.0, args_.logging.timing_log_option, *comm_, log_rank_);
    flush_observers_after_save();
}

void Trainer::flush_observers_after_save() {
    if (tb_) tb_->flush();
    if (carbon_) {
        carbon_->flush();
        for (const auto& note : carbon_->take_new_notes()) print_info("codecarbon: " + note);
    }
}

// The blocked part of an asynchronous save: its collectives and the copy of the state to host memory.
// Its own timers, not timers_: the iteration lines reset those while the write runs, and Megatron-LM
// logs the blocked time beside the total.
void Trainer::start_async_save(const TrainingProgress& p) {
    if (!saver_) {
        std::function<void()> sync;
        if (device_.is_cuda())
            sync = [index = device_.has_index() ? device_.index() : c10::DeviceIndex(0)] { at::accelerator::synchronizeDevice(index); };
        save_timers_ = observe::Timers(2, std::move(sync));  // level 2: the blocked time is always logged
        saver_ = std::make_unique<AsyncCheckpointSaver>(args_, vocab_, comm_.get());
    }
    save_timers_.start("save-checkpoint");
    save_timers_.start("save-checkpoint-blocked");
    try {
        saver_->start(*model_, *optimizer_, p);
    } catch (...) {
        save_timers_.stop("save-checkpoint-blocked");
        save_timers_.stop("save-checkpoint");
        throw;
    }
    save_timers_.stop("save-checkpoint-blocked");
    last_saved_ = iteration_;
    save_consumed_ = consumed_;
}

void Trainer::poll_save() {
    if (saver_ && saver_->pending() && saver_->all_written()) finish_save();
}

// Waits for the pending asynchronous save (if any), publishes it, then what a synchronous save does
// after its files: the run ledger, the log lines, TensorBoard and carbon flushes.
void Trainer::finish_save() {
    if (!saver_ || !saver_->pending()) return;
    const std::int64_t iteration = saver_->pending_iteration();
    CheckpointSaveInfo saved;
    try {
        saved = saver_->finish();
    } catch (...) {
        save_timers_.stop("save-checkpoint");
        throw;
    }
    save_timers_.stop("save-checkpoint");
    if (ledger_) ledger_->record_save(iteration, saved.directory, save_consumed_);  // `latest` has moved
    char buf[200];
    std::snprintf(buf, sizeof buf, " (%.1f MB in %.2f s, training blocked %.2f s)", static_cast<double>(saved.bytes) / 1e6,
                  saved.seconds, saved.blocked_seconds);
    info("  successfully saved checkpoint at iteration " + std::to_string(iteration) + " to " + args_.checkpoint.save + buf);
    log_timers(save_timers_, {"save-checkpoint", "save-checkpoint-blocked"}, 1.0, args_.logging.timing_log_option, *comm_,
               log_rank_);
    flush_observers_after_save();
}

}  // namespace mds::trainer
