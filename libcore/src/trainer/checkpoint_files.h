// The pieces save_checkpoint and CheckpointLoader (mds/trainer/checkpoint.h) are built from, private
// to the trainer area:
//   ds_checkpoint_files.cpp  the DeepSpeed / Megatron files: layer_XX-model_YY, mp_rank_XX_model_states,
//                            [bf16_]zero_pp_rank_D_mp_rank_XX_optim_states, and FileBuilder
//   tied_module.cpp          the last pipeline stage's tied embedding module as DeepSpeed saves it
//   rng_state.cpp            MT19937 seeding, the Python / numpy / torch / CUDA RNG states, saved and restored
//   checkpoint_commit.cpp    save_checkpoint: the distributed commit (temporary folder, `latest`)
//   checkpoint_loader.cpp    CheckpointLoader
//   universal_loader.cpp     CheckpointLoader's resume from a universal checkpoint (--universal-checkpoint)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "mds/ckpt/pickle.h"
#include "mds/ckpt/torch_file.h"
#include "mds/ckpt/universal.h"  // OptimState
#include "mds/model/gpt_model.h"
#include "mds/flags/train_args.h"
#include "mds/trainer/checkpoint.h"
#include "mds/trainer/optimizer.h"

namespace mds::trainer {
class Communicator;
}

namespace mds::trainer::checkpoint_detail {

// The DeepSpeed version whose file layout mds writes (group_paddings, param_slice_mappings of
// fragment_address, BF16 optimizer keys): DeepSpeed's loaders parse it and require >= 0.6.
inline constexpr const char* kDeepSpeedFormatVersion = "0.7.0";
inline constexpr double kCheckpointVersion = 3.0;

// ---- tensors and values (ds_checkpoint_files.cpp) --------------------------------------------------

std::span<const std::byte> bytes_of(const at::Tensor& t);
// A CPU tensor holding a copy of a checkpoint tensor (any strides).
at::Tensor to_tensor(const ckpt::TorchTensor& t);
// The name DeepSpeed's PipelineModule gives a parameter (param_shapes, param_slice_mappings and
// universal checkpoint folders): the tied embedding under tied_modules.embed, the rest under
// their global layer index.
std::string ds_param_name(const model::Parameter& p);
// An int or float value as a double.
double number(const ckpt::PyValue& v);

// An asynchronous save's host copy of the state (checkpoint_commit.cpp): every tensor a file holds is
// copied into buffers reused from save to save (pinned when the model is on a GPU, so that the copies
// run at PCIe speed), and the files wait here, object tree built, for the background writer. Nothing in
// it aliases the live model or optimizer, so training goes on while they are written.
class Snapshot {
public:
    // `device`: the model's; on a GPU the buffers are pinned and the copies non-blocking.
    explicit Snapshot(c10::Device device) : device_(device), pinned_(device.is_cuda()) {}
    // Starts a save: the buffers are handed out again in the same order (the same model asks for the
    // same sizes each time), the previous save's files are gone.
    void begin();
    // A host buffer of `numel` elements of `dtype`, 1-D, contiguous, uninitialized.
    at::Tensor take(at::ScalarType dtype, std::int64_t numel);
    // Waits for the non-blocking device-to-host copies made into the buffers.
    void wait_copies() const;

    struct File {
        ckpt::TorchSaveWriter writer;
        ckpt::PyValue root;
        std::vector<at::Tensor> keep;  // the buffers its storages point into
    };
    void add(File file) { files_.push_back(std::move(file)); }
    // Called by the writer thread: writes (and syncs) every file, in order.
    void write_files();
    std::uint64_t buffer_bytes() const;
    bool pinned() const { return pinned_; }

private:
    c10::Device device_;
    bool pinned_;
    std::vector<at::Tensor> buffers_;  // bytes, in the order of take()
    std::size_t next_ = 0;
    std::vector<File> files_;
};

// A torch.save file. Without a snapshot it is written by finish() from tensors that stay alive until
// then (a synchronous save); with one, tensor() and flat() copy into the snapshot's buffers and finish()
// hands the file to the snapshot for the background writer.
class FileBuilder {
public:
    explicit FileBuilder(std::string path, Snapshot* snapshot = nullptr);
    ckpt::PyValue tensor(const at::Tensor& t);
    // A flat fp32 tensor of the pieces (flattened, in order) followed by `padding` zeros, streamed.
    ckpt::PyValue flat(std::vector<at::Tensor> pieces, std::int64_t padding);
    void finish(const ckpt::PyValue& root);

private:
    ckpt::TorchSaveWriter writer_;
    std::vector<at::Tensor> keep_;
    Snapshot* snapshot_;
};

// ---- the tied embedding module (tied_module.cpp) ----------------------------------------------------

// DeepSpeed's pipeline engine builds the whole tied embedding module (TiedLayerSpec 'embed') on the
// last stage too: besides the word embeddings (the tied weight) it holds the position embeddings and
// the embedding LayerNorm, unused there, and its ZeRO groups, param_shapes and optimizer partition
// include them. mds's last stage holds only the word embeddings, so a checkpoint adds them back:
// `TiedModule` is the last stage's parameter list as DeepSpeed has it, with the first stage's values
// (its copies never receive a gradient: their Adam moments are zeros).
struct TiedModule {
    std::vector<model::Parameter> params;  // the stage's parameters with the extra ones after the tied word embeddings
    std::vector<int> origin;               // index into the model's parameters, or -1 for an added one
};

// A collective over the pipeline group (every stage calls it when PP > 1): the first stage's values
// of the extra tied parameters, for the last stage. Empty on other stages and without PP.
TiedModule tied_module(const model::GptModel& model, Communicator* comm);

// DeepSpeed's partition `rank` of `count` of the last stage's flat groups with the tied module's
// extra parameters (TiedModule). The stage's own elements come from the optimizer's state: all on
// this rank when it is not partitioned; under ZeRO-1 or the BF16 optimizer the extra tensors shift
// DeepSpeed's partition boundaries away from the optimizer's, and the data-parallel ranks exchange
// the pieces each one lacks, point to point (a collective over the data-parallel group: every rank of
// the last stage calls it). The extra parameters carry the first stage's values and zero moments.
StatePartition with_tied_module(const AdamOptimizer& opt, const std::vector<model::Parameter>& params,
                                const TiedModule& tied, int rank, int count, Communicator* comm);

// ---- the files of one tag (ds_checkpoint_files.cpp) ---------------------------------------------------

// DeepSpeed's model-parallel rank of a TP x PP grid: the mp_rank_MM of the file names.
int model_parallel_rank(const model::GptModel& model);
// layer_XX-model_TT-model_states.pt for every layer of this stage and tensor-parallel rank.
// `snapshot` (here and below): an asynchronous save's (the files are only prepared); null: written now.
void write_layer_files(const std::string& dir, const model::GptModel& model, Snapshot* snapshot = nullptr);
// mp_rank_MM_model_states.pt: DeepSpeed's engine keys, then Megatron's client state.
void write_mp_rank_file(const std::string& path, const flags::TrainArgs& a, std::int64_t original_vocab,
                        const model::GptModel& model, const TrainingProgress& p, const TiedModule& tied,
                        Snapshot* snapshot = nullptr);
// The optimizer file of one data-parallel rank: BF16_Optimizer.state_dict() (bf16) or
// DeepSpeedZeroOptimizer's (stage 1), holding that rank's partition of each flat group; fragment
// addresses are relative to the partition, and the last partition carries the group's padding.
void write_optimizer_file(const std::string& path, const flags::TrainArgs& a, const std::vector<model::Parameter>& params,
                          const AdamOptimizer& opt, const StatePartition& part, const TrainingProgress& p,
                          Snapshot* snapshot = nullptr);

// ---- RNG states (rng_state.cpp) ------------------------------------------------------------------------

// Sets Megatron's RNG keys of the mp_rank file: random_rng_state, np_rng_state, torch_rng_state,
// cuda_rng_state, rng_tracker_states.
void set_rng_states(ckpt::PyDict& root, FileBuilder& file, const flags::TrainArgs& a, const model::GptModel& model);
// CheckpointLoader::load_rng from the mp_rank file `mp_rank`.
std::vector<std::string> restore_rng_states(const ckpt::TorchFile& mp_rank, const model::GptModel& model);

// ---- universal checkpoints (universal_loader.cpp) ------------------------------------------------------

// The folder DIR/latest_universal names (what DeepSpeed's load_universal reads instead of `latest`).
// Throws, naming --universal-checkpoint, when that file is missing or the folder has no zero/.
std::filesystem::path universal_checkpoint_dir(const std::string& load);
// The source mp_rank file a tensor-parallel rank takes its progress, LR schedule and RNG from:
// DeepSpeed's choice, the one at the same relative position (tp_rank * files / tp).
std::string universal_mp_rank_file(const std::filesystem::path& dir, int tp_rank, int tp);
// This rank's shard of zero/<name>/<state>.pt for `p` (full, TP-merged fp32 tensors), cut by the
// model's TP split (GLU halves separately), the vocabulary zero-padded to the model's rows. Errors
// name the file and the expected shape.
at::Tensor universal_shard(const std::filesystem::path& dir, const model::Parameter& p, ckpt::OptimState state, int tp,
                           int tp_rank, bool glu);
// The model's parameters from the fp32.pt files (rounded to the model's dtype).
void load_universal_weights(const std::filesystem::path& dir, model::GptModel& model, int tp, int tp_rank);
// Adam's step count: zero/<param>/step.pt, else zero/optimizer_state.pt's param_groups[0]['step'].
std::int64_t universal_step(const std::filesystem::path& dir, const std::string& first_param);
// Masters and moments of every parameter of the model (this rank's TP shard, whole over DP) and the
// step count, for AdamOptimizer::load_state; `optimizer_state`: zero/optimizer_state.pt (loss scaler).
struct UniversalStates {
    std::vector<at::Tensor> master, m1, m2;
    std::int64_t steps = 0;
    std::string optimizer_state;
};
UniversalStates read_universal_states(const std::filesystem::path& dir, const model::GptModel& model, int tp, int tp_rank);

}  // namespace mds::trainer::checkpoint_detail
