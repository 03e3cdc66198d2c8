// mds-train checkpoints in the DeepSpeed pipeline layout that Megatron-DeepSpeed writes
// (specs/checkpoints.md §1-§5), so DeepSpeed's tools, Python's torch.load and the mds-ckpt-* tools
// read them and Megatron-DeepSpeed resumes from them:
//
//   <save>/global_step<N>/layer_01-model_00-model_states.pt        embedding (+ embedding LayerNorm)
//   <save>/global_step<N>/layer_03 .. layer_{L+2}-model_00-...     transformer blocks
//   <save>/global_step<N>/layer_{L+4}-model_00-model_states.pt     final LayerNorm
//   <save>/global_step<N>/mp_rank_00_model_states.pt               iteration, args (a Namespace),
//                                                                   (mp_rank_MM: MM = pp · TP + tp)
//                                                                   LR schedule, RNG states, DeepSpeed keys
//   <save>/global_step<N>/[bf16_]zero_pp_rank_0_mp_rank_00_optim_states.pt   fp32 masters + Adam moments
//   <save>/latest                                                  "global_step<N>", written last
//
// The optimizer file is the BF16 optimizer's (bf16 runs) or ZeRO stage 1's (fp16 and fp32 runs),
// in BMD's three parameter groups with flat, padded fp32 partitions. A save writes the tag into a
// temporary folder, syncs every file and the folder, renames it into place, syncs the root, and
// only then moves `latest`: a process killed at any moment leaves `latest` on a complete tag. An
// asynchronous save (AsyncCheckpointSaver) writes the same files from a host copy in the background.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mds/optim/loss_scaler.h"
#include "mds/optim/lr_schedule.h"
#include "mds/flags/train_args.h"

namespace mds::model {
class GptModel;
}

namespace mds::trainer {

class AdamOptimizer;
class Communicator;

// Everything a resume restores besides weights, optimizer and RNGs.
struct TrainingProgress {
    std::int64_t iteration = 0;
    std::int64_t consumed_train_samples = 0;
    std::int64_t consumed_valid_samples = 0;
    std::int64_t consumed_train_tokens = 0;
    double gigaflos_no_embeds = 0;
    std::int64_t skipped_steps = 0;  // DeepSpeed's skipped_steps: fp16 overflow iterations
    optim::LrScheduleState lr;
    // fp16 loss scaler: DeepSpeed's (--deepspeed) or Megatron's; neither for bf16 / fp32.
    std::optional<optim::DeepSpeedLossScaler::State> deepspeed_scaler;
    std::optional<optim::MegatronGradScaler::State> megatron_scaler;
    // Written into the optimizer's param groups; not restored (the schedule recomputes them).
    double current_lr = 0;
    double current_weight_decay = 0;
    // Saved in args (Megatron's do_train / do_valid / do_test), not restored.
    std::int64_t train_iters = 0;  // the run's iterations (Megatron's update_train_iters for --train-samples)
    bool do_valid = true, do_test = true;
    // --skip-train-iteration-range: the [start, end] ranges not reached yet (BMD pops each from its
    // args deque when it skips it, so its Namespace holds what is left at the save).
    std::vector<std::array<std::int64_t, 2>> skip_ranges_left;
    // The MLflow run this training logs to (docs/mlflow.md), so that a resubmitted job continues it:
    // the mp_rank file's top-level key "mds_mlflow_run_id" (Megatron-DeepSpeed reads the keys it knows
    // and ignores the others). "": none.
    std::string mlflow_run_id;
    // The Hugging Face vocabulary size of a checkpoint mds-hf-to-ckpt made (mp_rank's top-level key
    // "mds_hf_vocab_size"), carried to every later save, fine-tuning included, so that mds-ckpt-to-hf
    // exports those rows and not Megatron's padding. 0: none.
    std::int64_t hf_vocab_size = 0;
};

struct CheckpointSaveInfo {
    std::string tag;        // global_step<N>
    std::string directory;  // <save>/global_step<N>
    std::uint64_t bytes = 0;
    double seconds = 0;          // from the start of the save until `latest` moved
    double blocked_seconds = 0;  // of which the training waited (asynchronous saves; = seconds otherwise)
};

// Saves one checkpoint under `args.checkpoint.save` (optimizer states unless --no-save-optim, RNG
// states unless --no-save-rng). `original_vocab_size` is the tokenizer's. Throws mds::Error naming
// the file; on failure the previous checkpoint and `latest` are untouched. With `comm` (several
// processes) every rank calls it: data-parallel rank 0 of each tensor-parallel rank t of each
// pipeline stage p writes the layers of its stage and shard (layer_<l>-model_<t>; the tied
// embeddings only from the first stage, as DeepSpeed) and mp_rank_<m> with m = p · TP + t, each rank
// its optimizer partition (DeepSpeed's zero_pp_rank_<dp>_mp_rank_<m> files), and rank 0 publishes
// the folder and `latest` once all succeeded.
CheckpointSaveInfo save_checkpoint(const flags::TrainArgs& args, std::int64_t original_vocab_size,
                                   const model::GptModel& model, const AdamOptimizer& optimizer,
                                   const TrainingProgress& progress, Communicator* comm = nullptr);

// An asynchronous save (--async-save): the same files, folder and commit as save_checkpoint, but the
// training waits only while start() runs the save's collectives and copies every tensor into host
// buffers reused from save to save (pinned on a GPU); a background thread then writes and syncs this
// rank's files into the temporary folder, and finish() publishes the tag and moves `latest`. Until
// then the previous checkpoint and `latest` stay as they were, so a process killed during the write
// leaves `latest` on a complete tag. Every rank calls start(), all_written() and finish() at the same
// points (they are collectives); the destructor waits for a write still running (publishing nothing).
class AsyncCheckpointSaver {
public:
    AsyncCheckpointSaver(const flags::TrainArgs& args, std::int64_t original_vocab_size, Communicator* comm);
    ~AsyncCheckpointSaver();
    AsyncCheckpointSaver(const AsyncCheckpointSaver&) = delete;
    AsyncCheckpointSaver& operator=(const AsyncCheckpointSaver&) = delete;

    // Starts a save (none may be pending: finish() the previous one first). Throws mds::Error when the
    // folder cannot be prepared; an error while copying the state is reported by finish().
    void start(const model::GptModel& model, const AdamOptimizer& optimizer, const TrainingProgress& progress);
    bool pending() const;
    std::int64_t pending_iteration() const;  // the iteration of the save in flight
    // Whether every rank's writer is done (a collective; never blocks on the write itself).
    bool all_written();
    // Waits for this rank's writer, then as save_checkpoint: the ranks agree that all succeeded, rank 0
    // publishes the folder and `latest`. Throws mds::Error naming the file on any rank's failure
    // (previous checkpoint and `latest` untouched). Nothing is pending afterwards, success or not.
    CheckpointSaveInfo finish();
    // Waits for this rank's writer without publishing (an exception is unwinding the training).
    void abandon() noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// A checkpoint opened for a resume: the tag `latest` names under `args.checkpoint.load`. The
// weights go into the model first (the optimizer is then built from them), then the optimizer
// state, the RNG states and the progress, as --no-load-optim / --no-load-rng / --finetune say.
class CheckpointLoader {
public:
    // nullptr when the folder has no `latest` (Megatron starts from scratch then). Throws for a
    // checkpoint that does not fit the flags (shape, parallel sizes), naming the file and value.
    // `tp_rank`, `pp_rank`: the tensor-parallel shard and pipeline stage this process loads (the
    // checkpoint's TP and PP must be the flags'; an error names the mds-ckpt-reshape command).
    static std::unique_ptr<CheckpointLoader> open(const flags::TrainArgs& args, int tp_rank = 0, int pp_rank = 0);
    ~CheckpointLoader();

    const std::string& directory() const;
    std::int64_t iteration() const;  // as saved (0 is what --finetune trains from)

    // Copies every parameter from the layer files (converted to the model's dtype and device).
    void load_weights(model::GptModel& model) const;
    // Restores masters, moments and step count, and the fp16 loss scaler into `progress`; an error
    // suggests --no-load-optim when the checkpoint has no optimizer file (e.g. from mds-ckpt-shrink).
    void load_optimizer(AdamOptimizer& optimizer, const model::GptModel& model, TrainingProgress& progress) const;
    // Restores the CPU generator and the model's dropout generators (cuda_rng_state, and on the CPU
    // the tracker's 'model-parallel-rng'); an error suggests --no-load-rng when absent. Returns
    // warnings for states another kind of generator saved (a GPU run's, resumed on the CPU: its
    // Philox seed is taken when no draws were made, else this run's seeding stays).
    std::vector<std::string> load_rng(const model::GptModel& model) const;
    // Iteration, consumed samples and tokens, LR schedule and loss-scaler states.
    TrainingProgress progress() const;
    // The checkpoint's "mds_hf_vocab_size" (TrainingProgress::hf_vocab_size), 0 when absent; read for
    // --finetune too, which takes nothing else of progress().
    std::int64_t hf_vocab_size() const;

private:
    struct Impl;
    explicit CheckpointLoader(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Python's random.seed(seed) and numpy's np.random.seed(seed) states as Megatron's
// _set_random_seed leaves them (what it saves as random_rng_state / np_rng_state): MT19937 words
// from init_by_array (Python) and init_genrand (numpy), position 624.
std::array<std::uint32_t, 624> python_random_seed_state(std::uint64_t seed);
std::array<std::uint32_t, 624> numpy_random_seed_state(std::uint32_t seed);

// BMD's get_parameters_in_billions(model, exclude_embeddings=True) on this rank: its stage's
// parameters other than the nn.Embedding weights (word and position embeddings), as DeepSpeed's
// pipeline module holds them (the last stage's tied module adds BLOOM's embedding LayerNorm), times
// the model-parallel size (TP x PP). It is what BMD multiplies into gigaflos_no_embeds and saves as
// args.parameters_in_billions_no_embedding.
double megatron_parameters_in_billions_no_embedding(const model::GptModel& model, std::int64_t model_parallel_size);

}  // namespace mds::trainer
