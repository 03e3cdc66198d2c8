// The Trainer behind run_training (mds/trainer/trainer.h), in the shape of torchtitan's Trainer:
// the set-up (launch and communicator, tokenizer and model, resume, data, optimizer, observers),
// then train(): train_step() → log_step() → evaluate / save when due → should_stop(), and at the
// end the final validation, save and test. The pieces live in
//   trainer.cpp        run_training, train() and the exits
//   trainer_setup.cpp  the constructor's set-up, in the order Megatron's pretrain() does it
//   train_step.cpp     one step: forward / backward, gradient finishing, optimizer step
//   evaluate.cpp       evaluation of the validation and test sets
//   training_log.cpp   the iteration log line, TensorBoard scalars and loss alerts
//   straggler_log.cpp  the straggler report and alert of each log interval
//   trainer_state.cpp  resume (load) and save: what a checkpoint holds of the loop
//
// There is always a communicator (Communicator::single_process() for one process). What differs
// between one process and several beyond the collectives (the "TP x PP x DP" line, which rank
// prints, ZeRO partitioning) tests the world or data-parallel size explicitly.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mds/data/gpt_datasets.h"
#include "mds/data/packed_sft_datasets.h"
#include "mds/data/weighted_split.h"
#include "mds/model/gpt_model.h"
#include "mds/observe/carbon_tracker.h"
#include "mds/observe/flops.h"
#include "mds/observe/loss_alert.h"
#include "mds/observe/straggler.h"
#include "mds/observe/tensorboard_writer.h"
#include "mds/observe/timers.h"
#include "mds/optim/batch_size_rampup.h"
#include "mds/optim/loss_scaler.h"
#include "mds/optim/lr_schedule.h"
#include "mds/flags/curriculum.h"
#include "mds/flags/train_args.h"
#include "mds/trainer/checkpoint.h"
#include "mds/trainer/comm.h"
#include "mds/trainer/grad_reducer.h"
#include "mds/trainer/main_grads.h"
#include "mds/trainer/micro_batches.h"
#include "mds/trainer/optimizer.h"
#include "mds/trainer/pipeline.h"
#include "mds/trainer/run_ledger.h"
#include "mds/trainer/step_profiler.h"
#include "mds/trainer/stop_conditions.h"
#include "mds/trainer/trainer.h"
#include "fusions.h"
#include "metrics_log.h"

namespace mds::ckpt {
class PyValue;
}

namespace mds::trainer {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Megatron prints its log lines with print_rank_last (stdout); flushed at once for `tee`. When standard output's
// reader is gone (EPIPE), the run stops after the iteration as on SIGUSR1 (stop_signals.h), saying so on stderr once.
void print_line(const std::string& s);

// Megatron's timers' line for `names` (BMD's "time (ms) | name: ms | ..."), each timer reduced over the
// world as --timing-log-option says (a collective: every rank calls it at the same point), printed when
// `print` (the last rank); then those timers are reset.
void log_timers(observe::Timers& timers, const std::vector<std::string>& names, double normalizer,
                const std::string& option, Communicator& comm, bool print);

// fp16 loss scaling: DeepSpeed's scaler under --deepspeed (what BigScience ran), else Megatron's.
class LossScale {
public:
    LossScale() = default;  // none (until the set-up makes the flags' one)
    explicit LossScale(const flags::TrainArgs& args);
    bool active() const { return ds_ || megatron_; }
    double scale() const { return ds_ ? ds_->scale() : megatron_ ? megatron_->scale() : 1.0; }
    // Returns true when the step was skipped.
    bool update(bool found_inf) { return ds_ ? ds_->update(found_inf) : megatron_ ? megatron_->update(found_inf) : false; }
    void save_to(TrainingProgress& p) const;
    void load_from(const TrainingProgress& p);

private:
    std::optional<optim::DeepSpeedLossScaler> ds_;
    std::optional<optim::MegatronGradScaler> megatron_;
};

// A validation or test dataset: Mode 1's split, or a named group of Mode 2. Megatron-DeepSpeed logs
// a group as "NAME loss at ..." under TensorBoard's lm-loss-validation/NAME/.
struct EvalSet {
    std::optional<std::string> group;
    BatchSource batches;
    std::int64_t consumed = 0;  // samples this set has served
};

// What the log line averages over: the iterations since the last one.
struct IntervalStats {
    double loss_sum = 0;
    std::int64_t advanced = 0, skipped = 0, nan = 0;
    Clock::time_point start = Clock::now();
    // Where its data is, for a loss alert (log_step sets them at the interval's first iteration):
    // that iteration, the consumed samples before it, and skipped_samples_ then.
    std::int64_t first_iteration = 0, consumed_before = 0, skipped_samples_before = 0;
};

// What one training step produced, for the log line, TensorBoard and the alerts.
struct StepOutcome {
    std::int64_t batch_size = 0;         // the global batch size in force (ramp-up)
    std::int64_t tokens_per_sample = 0;  // the curriculum's length, else seq_length
    std::int64_t curriculum_seqlen = 0;  // 0 without a curriculum
    double lm_loss = 0;                  // averaged over the data-parallel group
    bool skipped = false;                // fp16 overflow: no update
    StepResult optimizer;                // grad norm, zero count
};

class Trainer {
public:
    // The whole set-up, in pretrain()'s order; throws mds::Error / UsageError.
    Trainer(const flags::TrainArgs& args, const RunOptions& options, Clock::time_point process_start);
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;

    // Trains until should_stop() says so, then the end of training; returns the summary.
    RunSummary train();

    StepOutcome train_step();
    void log_step(const StepOutcome& step);
    // Megatron-DeepSpeed's evaluate_and_print_results for one set; returns the samples served.
    std::int64_t evaluate(const std::string& prefix, EvalSet& set, bool test);
    void evaluate_valid(const std::string& prefix);
    // Megatron's save_checkpoint_and_time (once per iteration at most; nothing without --save). With
    // --async-save it starts the save (after finishing the previous one); finish_save() completes it.
    void save();
    // --async-save: at an iteration boundary, publishes the pending save if every rank has written its
    // files (a collective while one is pending); finish_save() waits for the write and publishes it.
    void poll_save();
    void finish_save();
    // The exit conditions of this iteration, agreed over the ranks (a collective).
    Stop should_stop();
    // An exception escaped the training: the run ledger's line says "error: <message>" (run_ledger.cpp).
    void record_error(const std::string& message);
    // The same for MLflow: the job's last tags and the run marked FAILED (mlflow_log.cpp).
    void record_mlflow_error(const std::string& message);

private:
    // ---- set-up (trainer_setup.cpp), called by the constructor in this order ----
    void check_args();          // flag combinations, Mode 2's groups: before any work
    void setup_launch();        // signals, threads, device, communicator
    void setup_model();         // tokenizer → padded vocabulary, model stage, seed
    void setup_data();          // batch sizes, datasets, iterations
    void setup_sample_order();  // --dataloader-type, --skip-train-iteration-range (end of setup_data)
    void setup_optimizer();     // LR schedule, AdamW, TP-duplicated norms, data-parallel reducer
    void setup_observers();     // carbon tracker, TensorBoard, throughput shape, curriculum, alerts
    void setup_peak_tflops();   // end of setup_observers: the device's peak for the MFU field
    void setup_attention_backend();  // end of setup_observers: --attention-backend, the "attention:" line
    void setup_profiler();      // end of setup_observers: --profile (step_profiler.h)
    // Megatron's report_memory on a GPU (every rank of data-parallel rank 0 prints; nothing on a CPU).
    void report_memory(const std::string& when);
    // ---- resume (trainer_state.cpp) ----
    void load_weights();        // opens --load, the weights (before the optimizer's masters)
    void load_state();          // optimizer, LR schedule, loss scaler, RNG, progress
    // ---- run ledger (run_ledger.cpp) ----
    std::vector<std::string> ledger_hosts();  // every rank's host (a collective)
    void start_ledger();        // rank 0 appends the running line; every rank joins the host gather
    // ---- MLflow (mlflow_log.cpp) ----
    // Where setup_observers makes tb_: the MLflow logger of the last rank, when the flags ask for one.
    std::unique_ptr<observe::MlflowLogger> make_mlflow_logger();
    // after start_ledger: params (`args`: the Namespace of start_args, null without a writer) and this job's tags
    // (a host gather every rank joins)
    void start_mlflow(const ckpt::PyValue* args);
    void finish_mlflow(Stop stop);  // end of finish_run: this job's end tags, flush, run status
    std::string mlflow_run_id_for_checkpoint();  // the last rank's run id on every rank (a collective)
    // ---- straggler report (straggler_log.cpp) ----
    std::vector<std::string> rank_hosts();  // every rank's host, by rank (a collective)
    void setup_stragglers();    // end of setup_observers: checks the flags, gathers the hosts
    // At each log interval, on every rank (a collective over the world), before the timers' reset:
    // the report, its TensorBoard scalars and the straggler alert (the last rank prints).
    void log_stragglers(std::int64_t total_iters);

    void info(const std::string& m) const;  // rank 0 prints (print_rank_0)
    // BMD's print_datetime from rank 0: "[what] datetime: 2026-11-30 23:59:59 " (local time, its trailing space).
    void info_datetime(const std::string& what) const;
    void sync_tp_duplicated_parameters();
    PipelineStep pipeline_step(const BatchSource& source, const PretrainingSampler& order, std::int64_t first_sample,
                               std::int64_t nmb, std::int64_t seqlen);
    // The batches of a GPT dataset's samples (--eod-mask-loss, --reset-position-ids applied), and of
    // split `split`, group `group` of the --sft datasets.
    BatchSource gpt_batches(Sampler sample) const;
    BatchSource sft_batches(int split, std::size_t group) const;
    void setup_sft_data(const data::NumSamplesOptions& num_samples);  // --sft's part of setup_data
    // --skip-train-iteration-range at the top of an iteration, as BMD's train loop (trainer.cpp).
    void skip_data_if_due();
    // BMD's train() start: write_args_to_tensorboard (every args attribute as text) and log_restart_to_tensorboard
    // (iteration-time/world_size: the world size at the loaded iteration, 0 at the next, a restart's blip).
    // `args`: the Namespace of start_args, null without a writer.
    void start_tensorboard(const ckpt::PyValue* args);
    // The args Namespace at this job's start (the checkpoint's, with the loaded progress): MLflow's params and
    // TensorBoard's texts.
    ckpt::PyValue start_args() const;
    // The "num zeros" of the log line and TensorBoard: the count with --log-num-zeros-in-grad, BMD's 0 with
    // --deepspeed, else none.
    std::optional<double> logged_num_zeros(const StepOutcome& step) const;
    void write_step_tensorboard(const StepOutcome& step, double lr, const std::optional<double>& grad_norm,
                                const std::optional<double>& params_norm);
    void write_log_line(const StepOutcome& step, double lr, const std::optional<double>& grad_norm,
                        const std::optional<double>& params_norm);
    void start_async_save(const TrainingProgress& p);  // trainer_state.cpp
    void flush_observers_after_save();                 // TensorBoard and carbon, after a save is published
    void leave(Stop stop);      // what an exit does before the loop ends (messages, save)
    std::string already_at_exit_point(Stop stop) const;  // the message of a run resumed past --exit-iteration/-samples
    void end_of_training(Stop stop);
    RunSummary evaluate_only();  // --eval-only (trainer.cpp)
    void finish_run(Stop stop);  // what every run does last: flush, carbon, summary

    // ---- flags and launch ----
    const flags::TrainArgs args_;
    const RunOptions options_;
    const dist::LaunchInfo& launch_ = options_.launch;
    const Clock::time_point process_start_;
    int world_ = 1;
    std::int64_t tp_size_ = 1, pp_size_ = 1, dp_ = 1;
    bool weighted_split_ = false;
    std::array<std::vector<data::WeightedSplitGroup>, 3> split_groups_;  // Mode 2, checked before any work
    c10::Device device_{at::kCPU};
    // Rank 0 prints what one process would; the last rank prints the iteration lines and writes the
    // TensorBoard events, as Megatron's print_rank_0 / print_rank_last / is_last_rank.
    std::unique_ptr<Communicator> comm_;
    std::int64_t dp_rank_ = 0;
    int pp_rank_ = 0;
    bool info_rank_ = true, log_rank_ = true;

    // ---- model ----
    std::int64_t vocab_ = 0, padded_ = 0;
    model::GptConfig cfg_;
    Fusions fusions_;  // the fused kernels in effect (fusions.h): the flags, or on by default on a GPU
    model::TensorParallel tp_;
    model::PipelineStage stage_;
    int prev_stage_ = -1, next_stage_ = -1;  // neighbours in the pipeline (global ranks)
    std::unique_ptr<model::GptModel> model_;
    std::unique_ptr<CheckpointLoader> loader_;  // from load_weights() to load_state()
    std::string loaded_dir_;                    // the checkpoint folder loaded, for the run ledger

    // ---- data ----
    std::optional<optim::NumMicroBatchesCalculator> calculator_;
    std::int64_t mbs_ = 1, gbs_ = 1;
    // Mode 1 (--data-path, --split): one train/valid/test split of the (blended) datasets. Mode 2: one
    // training group and named validation/test groups, each its own (blended) dataset.
    std::optional<data::GptDatasets> datasets_;
    std::optional<data::WeightedSplitDatasets> weighted_;
    // --sft: the packed prompt / answer datasets (either mode), and how their rows become batches.
    std::optional<data::PackedSftDatasets> sft_;
    SftBatchOptions sft_options_;
    BatchSource train_batches_;
    std::optional<PretrainingSampler> train_order_;  // --dataloader-type
    std::optional<std::int64_t> eod_mask_id_;        // --eod-mask-loss: the tokenizer's EOD id
    std::optional<std::int64_t> reset_position_eod_; // --reset-position-ids: the tokenizer's EOD id
    // --skip-train-iteration-range: the ranges not reached yet, and the samples skipped since this
    // launch (BMD's data iterator runs ahead of consumed_train_samples by them; not saved, as in BMD).
    std::deque<std::array<std::int64_t, 2>> skip_ranges_;
    std::int64_t skipped_samples_ = 0;
    std::string dump_batches_;  // MDS_DUMP_BATCHES, read once at set-up (docs/mds-sample-text.md); "": off
    std::string host_heap_;  // on the CPU: what keep_freed_cpu_tensors (trainer_setup.cpp) set, for the device line; "": nothing
    std::vector<EvalSet> valid_sets_, test_sets_;
    std::int64_t train_iters_ = 0;
    bool do_valid_ = false, do_test_ = false;

    // ---- optimization ----
    std::optional<optim::LrSchedule> schedule_;
    std::unique_ptr<MainGrads> main_grads_;  // bf16: the fp32 sums of the micro batches' gradients
    std::unique_ptr<AdamOptimizer> optimizer_;
    std::vector<at::Tensor> tp_norms_;  // --sync-tp-duplicated-parameters
    std::unique_ptr<GradientReducer> reducer_;  // DP > 1
    LossScale scaler_;
    TrainingProgress resumed_;

    // ---- observers ----
    std::optional<observe::CarbonTracker> carbon_;
    // TensorBoard and MLflow (metrics_log.h): non-null on the last rank when either is on.
    std::unique_ptr<MetricsLog> tb_;
    std::unique_ptr<StepProfiler> profiler_;  // --profile on this rank
    bool mlflow_on_ = false;  // --mlflow-tracking-uri / MLFLOW_TRACKING_URI usable (the same on every rank)
    bool mlflow_id_waited_ = false;  // the first save waited for the run id (mlflow_log.cpp)
    observe::ThroughputShape flops_shape_;
    std::optional<double> peak_tflops_;  // for MFU: --peak-tflops, else the known GPU's (setup_peak_tflops)
    bool memory_report_due_ = true;      // BMD's report_memory_flag: after the first logged iteration
    double params_no_embeddings_billions_ = 0;
    std::optional<flags::CurriculumScheduler> curriculum_;
    std::optional<observe::LossAlertDetector> alerts_;
    // Megatron's timers (--timing-log-level); the step's pieces start/stop them, write_log_line prints
    // and resets them. Replaced in setup_launch() once the device (for the CUDA sync) is known.
    observe::Timers timers_;
    std::optional<observe::AlertCommandRunner> alert_command_;
    std::optional<observe::StragglerDetector> stragglers_;  // on with several ranks (setup_stragglers)
    std::optional<RunLedger> ledger_;  // rank 0, unless --run-ledger none (or no --save and no --run-ledger)

    // ---- progress ----
    std::int64_t iteration_ = 0, consumed_ = 0, consumed_tokens_ = 0, consumed_valid_ = 0, skipped_total_ = 0;
    double gigaflos_no_embeds_ = 0;
    std::int64_t last_saved_ = -1;
    // --async-save: the saver (made at the first save), its timers and the consumed samples of its save.
    std::unique_ptr<AsyncCheckpointSaver> saver_;
    observe::Timers save_timers_;
    std::int64_t save_consumed_ = 0;
    IntervalStats interval_;
    StopInputs stop_inputs_;  // the last agreed ones
    RunSummary summary_;
};

}  // namespace mds::trainer
