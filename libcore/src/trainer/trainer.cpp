#include "mds/trainer/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "mds/data/gpt_datasets.h"
#include "mds/data/weighted_split.h"
#include "mds/model/gpt_model.h"
#include "mds/observe/carbon_tracker.h"
#include "mds/observe/flops.h"
#include "mds/observe/log_line.h"
#include "mds/observe/loss_alert.h"
#include "mds/observe/tensorboard_writer.h"
#include "mds/optim/loss_scaler.h"
#include "mds/optim/lr_schedule.h"
#include "mds/train/curriculum.h"
#include "mds/train/dry_run.h"          // padded_vocab_size
#include "mds/train/train_tokenizer.h"
#include "mds/train/stop_signals.h"
#include "mds/trainer/checkpoint.h"
#include "mds/trainer/comm.h"
#include "mds/trainer/grad_reducer.h"
#include "mds/trainer/optimizer.h"
#include "mds/trainer/pipeline.h"
#include "mds/util/cli.h"  // mds_version
#include "mds/util/error.h"
#include "mds/util/tool.h"

namespace mds::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Megatron prints its log lines with print_rank_last (stdout); flushed at once for `tee`.
void print_line(const std::string& s) {
    std::fputs(s.c_str(), stdout);
    if (s.empty() || s.back() != '\n') std::fputc('\n', stdout);
    std::fflush(stdout);
}

// The GPU of a process is its local rank's (modulo the GPUs it sees, for several ranks per GPU).
c10::Device pick_device(const std::string& name, int local_rank) {
    if (name == "cpu") return at::kCPU;
    const bool has_cuda = at::hasCUDA();
    if (name == "cuda" && !has_cuda) throw UsageError("--device cuda: no CUDA device is available (LibTorch sees none)");
    if (name != "auto" && name != "cuda") throw UsageError("--device must be auto, cpu or cuda, got " + name);
    if (!has_cuda) return at::kCPU;
    const auto gpus = static_cast<int>(std::max<std::size_t>(1, at::getNumGPUs()));
    return {at::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus)};
}

model::GptConfig model_config(const train::TrainArgs& args, std::int64_t padded_vocab) {
    const auto& m = args.model;
    model::GptConfig c;
    c.num_layers = m.num_layers;
    c.hidden_size = m.hidden_size;
    c.ffn_hidden_size = m.ffn_hidden_size.value_or(4 * m.hidden_size);
    c.num_attention_heads = m.num_attention_heads;
    c.seq_length = m.seq_length;
    c.max_position_embeddings = m.max_position_embeddings.value_or(m.seq_length);
    c.padded_vocab_size = padded_vocab;
    c.init_method_std = m.init_method_std;
    c.layernorm_epsilon = m.layernorm_epsilon;
    c.hidden_dropout = m.hidden_dropout;
    c.attention_dropout = m.attention_dropout;
    if (m.position_embedding_type == "alibi") {
        c.position_embedding = model::PositionEmbedding::Alibi;
    } else if (m.position_embedding_type != "absolute") {
        throw UsageError("--position-embedding-type " + m.position_embedding_type + " is not supported (absolute or alibi)");
    }
    c.embed_layernorm = m.embed_layernorm;
    c.checkpoint_activations = m.checkpoint_activations;
    c.checkpoint_num_layers = m.checkpoint_num_layers;
    c.precision = args.optimizer.fp16 ? model::Precision::FP16 : args.optimizer.bf16 ? model::Precision::BF16 : model::Precision::FP32;
    return c;
}

// fp16 loss scaling: DeepSpeed's scaler under --deepspeed (what BigScience ran), else Megatron's.
class LossScale {
public:
    explicit LossScale(const train::TrainArgs& args) {
        const auto& o = args.optimizer;
        if (!o.fp16) return;
        if (args.parallel.deepspeed) {
            ds_.emplace(optim::deepspeed_loss_scaler_config(o));
        } else {
            megatron_.emplace(optim::megatron_grad_scaler_config(o));
        }
    }
    bool active() const { return ds_ || megatron_; }
    double scale() const { return ds_ ? ds_->scale() : megatron_ ? megatron_->scale() : 1.0; }
    // Returns true when the step was skipped.
    bool update(bool found_inf) { return ds_ ? ds_->update(found_inf) : megatron_ ? megatron_->update(found_inf) : false; }
    void save_to(TrainingProgress& p) const {
        if (ds_) p.deepspeed_scaler = ds_->state();
        if (megatron_) p.megatron_scaler = megatron_->state();
    }
    void load_from(const TrainingProgress& p) {
        if (ds_ && p.deepspeed_scaler) ds_->load_state(*p.deepspeed_scaler);
        if (megatron_ && p.megatron_scaler) megatron_->load_state(*p.megatron_scaler);
    }

private:
    std::optional<optim::DeepSpeedLossScaler> ds_;
    std::optional<optim::MegatronGradScaler> megatron_;
};

// Sample n of one dataset (the training one, a validation or test split or group): seq + 1 token ids.
using Sampler = std::function<std::vector<std::int64_t>(std::int64_t)>;

// One micro batch of `mbs` samples starting at sample `first`, as [mbs, seq + 1].
at::Tensor micro_batch(const Sampler& sample, std::int64_t first, std::int64_t mbs, std::int64_t seq,
                       c10::Device device) {
    auto t = at::empty({mbs, seq + 1}, at::TensorOptions().dtype(at::kLong));
    auto* out = t.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < mbs; ++i) {
        const auto s = sample(first + i);
        if (static_cast<std::int64_t>(s.size()) != seq + 1)
            throw Error("sample " + std::to_string(first + i) + " has " + std::to_string(s.size()) + " tokens, expected " +
                        std::to_string(seq + 1));
        std::copy(s.begin(), s.end(), out + i * (seq + 1));
    }
    return t.to(device);
}

// A validation or test dataset: Mode 1's split, or a named group of Mode 2. Megatron-DeepSpeed logs
// a group as "NAME loss at ..." under TensorBoard's lm-loss-validation/NAME/.
struct EvalSet {
    std::optional<std::string> group;
    Sampler sample;
    std::int64_t consumed = 0;  // samples this set has served
};

// The -path files' groups as the flags' values (parse_data_paths_path), checked as Megatron does.
train::TrainArgs with_weighted_split_files(const train::TrainArgs& given) {
    train::TrainArgs args = given;
    for (int k = 0; k < 3; ++k) {
        const auto kk = static_cast<std::size_t>(k);
        if (args.data.weighted_split_paths_path[kk].empty()) continue;
        std::string flag = data::weighted_split_flag(k);
        flag += "-path";
        args.data.weighted_split_paths[kk] = data::read_weighted_split_paths_file(flag, args.data.weighted_split_paths_path[kk]);
    }
    return args;
}

struct IntervalStats {
    double loss_sum = 0;
    std::int64_t advanced = 0, skipped = 0, nan = 0;
    Clock::time_point start = Clock::now();
};

}  // namespace

RunSummary run_training(const train::TrainArgs& given_args, const RunOptions& options) {
    const auto process_start = Clock::now();
    // Megatron-DeepSpeed reads the --*-weighted-split-paths-path files while parsing its flags and keeps
    // their groups as the --*-weighted-split-paths values: so does this copy (the checkpoint args too).
    const train::TrainArgs args = with_weighted_split_files(given_args);
    if (args.checkpoint.finetune && args.checkpoint.load.empty()) throw UsageError("--finetune needs --load");
    const auto& launch = options.launch;
    const int world = launch.world_size;
    const std::int64_t tp_size = args.parallel.tensor_model_parallel_size;
    const std::int64_t pp_size = args.parallel.pipeline_model_parallel_size;
    if (tp_size * pp_size * args.parallel.data_parallel_size != world)
        throw UsageError("--tensor-model-parallel-size " + std::to_string(tp_size) + " x --pipeline-model-parallel-size " +
                         std::to_string(pp_size) + " x data-parallel size " + std::to_string(args.parallel.data_parallel_size) +
                         " is not the " + std::to_string(world) + " processes started (" +
                         (launch.source.empty() ? std::string("no launcher") : launch.source) + ")");
    const bool weighted_split = !args.data.weighted_split_paths[0].empty();
    if (args.data.data_path.empty() && !weighted_split)
        throw UsageError("--data-path (or --train-weighted-split-paths / --train-weighted-split-paths-path) is required");
    std::array<std::vector<data::WeightedSplitGroup>, 3> split_groups;  // Mode 2, checked before any work
    if (weighted_split) {
        for (int k = 0; k < 3; ++k) {
            const auto kk = static_cast<std::size_t>(k);
            const std::string& file = args.data.weighted_split_paths_path[kk];
            std::string where;
            if (!file.empty()) {
                where = "from ";
                where += file;
                where += " line 1";
            }
            split_groups[kk] = data::parse_weighted_split_paths(data::weighted_split_flag(k), args.data.weighted_split_paths[kk], where);
        }
    }

    train::install_stop_signal_handlers();
    if (options.threads > 0) at::set_num_threads(static_cast<int>(options.threads));
    const c10::Device device = pick_device(options.device, launch.local_rank);

    // Several processes: the rendezvous first, so that a rank that cannot join fails before any work.
    // Rank 0 prints what one process would; the last rank prints the iteration lines and writes the
    // TensorBoard events, as Megatron's print_rank_0 / print_rank_last / is_last_rank.
    std::unique_ptr<Communicator> comm;
    std::string engine = "gloo";
    const std::int64_t dp = args.parallel.data_parallel_size;
    if (world > 1) {
        CommOptions co;
        co.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(args.parallel.distributed_timeout_minutes * 60000.0));
        // As torch.distributed: NCCL between GPUs, Gloo on CPUs (--distributed-backend is about GPUs).
        if (args.parallel.distributed_backend == "nccl" && device.is_cuda()) {
            if (!nccl_available())
                throw UsageError("--distributed-backend nccl: this mds-train was built against a LibTorch without CUDA, so it has "
                                 "no NCCL; use --distributed-backend gloo");
            const auto gpus = static_cast<int>(at::getNumGPUs());
            if (launch.local_world_size > gpus)
                throw UsageError("--distributed-backend nccl: " + std::to_string(launch.local_world_size) + " ranks on this node (" +
                                 launch.source + ") share " + std::to_string(gpus) +
                                 " GPU(s), and NCCL needs a GPU of its own per rank; start one rank per GPU, or use "
                                 "--distributed-backend gloo to share GPUs");
            co.nccl_device = device;
            engine = "nccl for CUDA tensors, gloo for host numbers";
        }
        comm = std::make_unique<Communicator>(
            launch,
            dist::ParallelLayout(world, static_cast<int>(tp_size), static_cast<int>(pp_size)),
            co);
    }
    const std::int64_t dp_rank = comm ? comm->coordinates().dp : 0;
    const int pp_rank = comm ? comm->coordinates().pp : 0;
    const bool info_rank = launch.rank == 0, log_rank = launch.rank == world - 1;
    auto info = [info_rank](const std::string& m) {
        if (info_rank) print_info(m);
    };
    if (comm)
        info("TP " + std::to_string(tp_size) + " x PP " + std::to_string(pp_size) + " x DP " + std::to_string(dp) + " over " +
             std::to_string(world) + " processes (" + launch.launcher + ", rendezvous at " + launch.master_addr + ":" +
             std::to_string(launch.master_port) + ", " + engine + ")");

    // Tensor parallelism all-reduces activations in every layer: across nodes it runs at the speed of
    // the network between them (BigScience's rule: TP within a node, PP across nodes).
    if (comm && info_rank && launch.local_world_size >= 1 && tp_size > launch.local_world_size)
        print_warning("--tensor-model-parallel-size " + std::to_string(tp_size) + " spans " +
                      std::to_string((tp_size + launch.local_world_size - 1) / launch.local_world_size) + " nodes of " +
                      std::to_string(launch.local_world_size) + " ranks (" + launch.source +
                      "): tensor parallelism exchanges activations in every layer; keep it within a node and let "
                      "--pipeline-model-parallel-size span the nodes");

    // Tokenizer → padded vocabulary, as Megatron's build_tokenizer.
    const auto tok = train::load_tokenizer(args.data);
    const std::int64_t vocab = static_cast<std::int64_t>(tok.vocab_size());
    const std::int64_t padded = train::padded_vocab_size(vocab, args.model, args.parallel.tensor_model_parallel_size);
    info(" > padded vocab (size: " + std::to_string(vocab) + ") with " + std::to_string(padded - vocab) +
               " dummy tokens (new size: " + std::to_string(padded) + ")");

    const auto cfg = model_config(args, padded);
    at::manual_seed(static_cast<std::uint64_t>(args.seed) + 100 * static_cast<std::uint64_t>(pp_rank));  // _set_random_seed
    model::TensorParallel tp;
    if (comm && tp_size > 1) {
        tp.rank = comm->coordinates().tp;
        tp.size = static_cast<int>(tp_size);
        Communicator* c = comm.get();
        tp.all_reduce_sum = [c](at::Tensor& t) { c->all_reduce_sum({t}, Group::Tensor); };
        tp.all_reduce_max = [c](at::Tensor& t) { c->all_reduce_max(t, Group::Tensor); };
    }
    // This rank's pipeline stage, cut as DeepSpeed cuts GPTModelPipe; its neighbours in the pipeline.
    const auto stage = pipeline_stage(cfg, static_cast<int>(tp_size), pp_rank, static_cast<int>(pp_size),
                                      args.parallel.pp_partition_method.value_or("type:transformer"));
    int prev_stage = -1, next_stage = -1;
    if (comm && pp_size > 1) {
        const auto pipe = comm->members(Group::Pipeline);
        if (!stage.first()) prev_stage = pipe[static_cast<std::size_t>(pp_rank) - 1];
        if (!stage.last()) next_stage = pipe[static_cast<std::size_t>(pp_rank) + 1];
    }
    model::GptModel model(cfg, device, static_cast<std::uint64_t>(args.seed), tp, stage);
    if (pp_size > 1 && comm->coordinates().dp == 0 && comm->coordinates().tp == 0)
        print_info("pipeline stage " + std::to_string(pp_rank) + ": transformer blocks [" + std::to_string(stage.first_block) + ", " +
                   std::to_string(stage.end_block) + ")" + (stage.first() ? ", embedding" : "") +
                   (stage.last() ? ", final LayerNorm and output layer" : "") + ", " + std::to_string(model.parameter_count()) +
                   " parameters on TP rank 0");
    info(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): " +
               std::to_string(model.parameter_count()));
    info("device " + device.str() + ", " + model::precision_name(cfg.precision) + ", " +
               std::to_string(at::get_num_threads()) + " CPU threads");

    // Resume: weights first (the optimizer's fp32 masters are built from them), then the rest below.
    std::unique_ptr<CheckpointLoader> loader;
    if (!args.checkpoint.load.empty()) {
        loader = CheckpointLoader::open(args, tp.rank, pp_rank);
        if (!loader) {
            info("WARNING: could not find the metadata file " + (std::filesystem::path(args.checkpoint.load) / "latest").string());
            info("    will not load any checkpoints and will start from random");
        } else {
            info(" loading checkpoint from " + args.checkpoint.load + " at iteration " + std::to_string(loader->iteration()));
            loader->load_weights(model);
        }
    }

    // Batch sizes, iterations, data.
    auto calculator = train::make_num_micro_batches_calculator(args);
    const std::int64_t mbs = args.optimizer.micro_batch_size;
    const std::int64_t gbs = calculator.global_batch_size();
    data::NumSamplesOptions num_samples;
    num_samples.train_samples = args.length.train_samples;
    num_samples.train_iters = args.length.train_iters;
    num_samples.global_batch_size = gbs;
    num_samples.eval_interval = args.logging.eval_interval;
    num_samples.eval_iters = args.logging.eval_iters;
    if (const auto& r = args.optimizer.rampup_batch_size)
        num_samples.rampup_batch_size = std::array<std::int64_t, 3>{r->start_global_batch_size, r->batch_size_increment,
                                                                    r->ramp_up_samples};
    // Mode 1 (--data-path, --split): one train/valid/test split of the (blended) datasets. Mode 2: one
    // training group and named validation/test groups, each its own (blended) dataset.
    std::optional<data::GptDatasets> datasets;
    std::optional<data::WeightedSplitDatasets> weighted;
    Sampler train_sample;
    std::vector<EvalSet> valid_sets, test_sets;
    std::int64_t train_iters = 0;
    if (weighted_split) {
        data::WeightedSplitOptions wopt;
        wopt.groups = split_groups;
        wopt.seq_length = static_cast<std::int32_t>(cfg.seq_length);
        wopt.seed = args.seed;
        wopt.num_samples = num_samples;
        wopt.log = [&info](const std::string& m) { info(m); };
        const auto& w = weighted.emplace(wopt);
        train_iters = w.train_iters();
        train_sample = [&w](std::int64_t n) { return w.sample(0, 0, n); };
        for (int k = 1; k <= 2 && args.logging.eval_iters > 0; ++k)
            for (std::size_t g = 0; g < w.groups(k).size(); ++g)
                (k == 1 ? valid_sets : test_sets)
                    .push_back({w.groups(k)[g].name, [&w, k, g](std::int64_t n) { return w.sample(k, g, n); }, 0});
    } else {
        data::GptDatasetsOptions dopt;
        dopt.data_path = args.data.data_path;
        if (args.data.split) dopt.split = *args.data.split;
        dopt.seq_length = static_cast<std::int32_t>(cfg.seq_length);
        dopt.seed = args.seed;
        dopt.num_samples = num_samples;
        dopt.log = [&info](const std::string& m) { info(m); };
        const auto& d = datasets.emplace(dopt);
        train_iters = d.summary().train_iters;
        train_sample = [&d](std::int64_t n) { return d.sample(0, n); };
        for (int k = 1; k <= 2 && args.logging.eval_iters > 0; ++k)
            if (d.summary().sizes[static_cast<std::size_t>(k)] > 0)
                // Megatron-DeepSpeed names Mode 1's sets as groups too: "valid loss at ...", lm-loss-validation/valid/...
                (k == 1 ? valid_sets : test_sets)
                    .push_back({std::string(k == 1 ? "valid" : "test"), [&d, k](std::int64_t n) { return d.sample(k, n); }, 0});
    }
    const bool do_valid = !valid_sets.empty();
    const bool do_test = !test_sets.empty();

    optim::LrSchedule schedule(optim::lr_schedule_params_from_config(args.optimizer, args.length.train_iters,
                                                                     args.length.train_samples, gbs));
    // ZeRO stage 1 partitions the optimizer states over data parallelism; so does DeepSpeed's
    // BF16_Optimizer, which bf16 runs get at ZeRO stage 0 ("it implements its own zero stage 1
    // equivalent", tr11-176B-ml's ds_config).
    const bool partition_states = args.parallel.zero_stage == 1 || args.optimizer.bf16;
    AdamOptimizer optimizer(model.parameters(), args.optimizer, comm && partition_states ? comm.get() : nullptr);
    if (tp_size > 1 || pp_size > 1) {
        Communicator* c = comm.get();
        std::function<double(double)> tp_sum, pp_sum;
        if (tp_size > 1) tp_sum = [c](double v) { return c->sum(v, Group::Tensor); };
        if (pp_size > 1) pp_sum = [c](double v) { return c->sum(v, Group::Pipeline); };
        optimizer.set_model_parallel_sums(tp_sum, pp_sum);
    }
    if (optimizer.partitioned())
        info(std::string(args.parallel.zero_stage == 1 ? "ZeRO stage 1" : "BF16 optimizer") +
             ": each rank holds the optimizer states of about " + std::to_string(optimizer.state_elements()) +
             " of " + std::to_string(model.parameter_count()) + " parameters");
    // BMD's --sync-tp-duplicated-parameters (MixedFusedLayerNorm's layernorm_tp_auto_sync): the
    // LayerNorm weights and biases, of which every tensor-parallel rank holds a copy, averaged over
    // the group before they are used, so that replicas drifting apart (nondeterministic GPU
    // reductions) are pulled back together. Here once per step and before evaluation: the
    // parameters only change at the optimizer step, and averaging equal copies changes nothing.
    std::vector<at::Tensor> tp_norms;
    if (tp_size > 1 && args.model.sync_tp_duplicated_parameters) {
        for (auto& p : model.parameters())
            if (p.name.find("layernorm") != std::string::npos || p.name.rfind("word_embeddings.norm.", 0) == 0 ||
                p.layer == model::final_norm_layer_index(cfg.num_layers))
                tp_norms.push_back(p.tensor);
        info("--sync-tp-duplicated-parameters: " + std::to_string(tp_norms.size()) +
             " LayerNorm tensors averaged over the tensor-parallel group before each step");
    }
    auto sync_tp_norms = [&] {
        if (!tp_norms.empty()) comm->all_reduce_sum(tp_norms, Group::Tensor, 1.0 / static_cast<double>(tp_size));
    };
    // The data-parallel gradient all-reduce, started bucket by bucket during the last backward pass.
    std::unique_ptr<GradientReducer> reducer;
    if (comm && dp > 1) {
        // DDP's 25 MiB, or zero_optimization.reduce_bucket_size elements of the gradients' dtype.
        const std::int64_t element = model.parameters().front().tensor.element_size();
        const std::int64_t bucket_bytes = args.parallel.reduce_bucket_elements ? *args.parallel.reduce_bucket_elements * element : kGradientBucketBytes;
        reducer = std::make_unique<GradientReducer>(model.parameters(), *comm, 1.0 / static_cast<double>(dp), bucket_bytes);
        info("data-parallel gradients: " + std::to_string(reducer->buckets()) + " all-reduce bucket(s) of at most " +
             std::to_string(bucket_bytes) + " bytes, " +
             (args.parallel.overlap_grad_reduce ? "started during the backward pass" : "after the backward pass"));
    }
    LossScale scaler(args);
    TrainingProgress resumed;
    if (loader && !args.checkpoint.finetune) {
        resumed = loader->progress();
        if (!args.checkpoint.no_load_optim) loader->load_optimizer(optimizer, model, resumed);
        schedule.load_state(resumed.lr, optim::lr_checkpoint_policy(args.optimizer));
        scaler.load_from(resumed);
        if (!args.checkpoint.no_load_rng)
            for (const auto& w : loader->load_rng(model))
                if (info_rank) print_warning(w);
        info("  successfully loaded checkpoint from " + args.checkpoint.load + " at iteration " +
                   std::to_string(resumed.iteration) + (args.checkpoint.no_load_optim ? " (without optimizer states)" : "") +
                   (args.checkpoint.no_load_rng ? " (without RNG states)" : ""));
    } else if (loader) {
        info("  successfully loaded the weights of " + loader->directory() + " for fine-tuning from iteration 0");
    }
    loader.reset();
    // Megatron checks the batch size in force after loading and at every step; the batch-size
    // ramp-up's later sizes are checked here too, so that a data-parallel size that only some of
    // them divide stops the run now, not hours into it (tr1-13B resumed its ramp-up on 4x the nodes).
    calculator.check_remaining_batch_sizes(resumed.consumed_train_samples, resumed.iteration, train_iters);
    calculator.update(resumed.consumed_train_samples);

    // One carbon tracker per node (here: the process) covering its GPUs; CPU and RAM are measured
    // once per node, never per rank.
    std::optional<observe::CarbonTracker> carbon;
    if (!args.logging.codecarbon_dir.empty() && launch.local_rank == 0) {
        observe::CarbonTrackerConfig cc;
        // BigScience's codecarbon integration: one file per process that measures.
        if (world > 1) {
            char name[40];
            std::snprintf(name, sizeof name, "emissions-%03d.csv", launch.rank);
            cc.output_file = name;
        }
        cc.output_dir = args.logging.codecarbon_dir;
        cc.country_iso_code = options.country_iso_code;
        cc.pue = options.pue;
        cc.codecarbon_version = "mds-" + std::string(mds_version());
        // The node's GPUs: those of its local ranks.
        std::vector<unsigned> gpus;
        if (device.is_cuda())
            for (int i = 0; i < std::min<int>(launch.local_world_size, static_cast<int>(at::getNumGPUs())); ++i)
                gpus.push_back(static_cast<unsigned>(i));
        cc.gpu_indices = gpus;
        carbon.emplace(cc);
        for (const auto& note : carbon->take_new_notes()) print_info("codecarbon: " + note);
        print_info("codecarbon: " + carbon->output_path() + ", " + carbon->country_name() + " at " +
                   std::to_string(carbon->carbon_intensity_g_per_kwh()) + " g/kWh, PUE " + std::to_string(options.pue));
    }

    std::unique_ptr<observe::TensorBoardWriter> tb;
    if (!args.logging.tensorboard_dir.empty() && log_rank) tb = std::make_unique<observe::TensorBoardWriter>(args.logging.tensorboard_dir);

    observe::ThroughputShape flops_shape;
    flops_shape.num_layers = cfg.num_layers;
    flops_shape.hidden_size = cfg.hidden_size;
    flops_shape.padded_vocab_size = padded;
    flops_shape.seq_length = cfg.seq_length;
    flops_shape.checkpoint_activations = cfg.checkpoint_activations;
    // BMD's per-rank approximation (get_parameters_in_billions on this rank's stage x TP x PP), so that
    // gigaflos_no_embeds, its TensorBoard axis and the saved args are the real program's.
    const double params_no_embeddings_billions = megatron_parameters_in_billions_no_embedding(model, tp_size * pp_size);

    std::optional<train::CurriculumScheduler> curriculum;
    if (args.curriculum && args.curriculum->enabled) curriculum.emplace(*args.curriculum);
    observe::LossAlertDetector alerts(options.alert);
    std::optional<observe::AlertCommandRunner> alert_command;
    if (!options.alert_command.empty()) alert_command.emplace(options.alert_command);

    std::int64_t iteration = resumed.iteration, consumed = resumed.consumed_train_samples;
    std::int64_t consumed_tokens = resumed.consumed_train_tokens, consumed_valid = resumed.consumed_valid_samples;
    std::int64_t skipped_total = resumed.skipped_steps;
    double gigaflos_no_embeds = resumed.gigaflos_no_embeds;
    RunSummary summary;

    // Checkpoints: Megatron's save_checkpoint_and_time. The carbon tracker writes its row then too,
    // so a job killed after the save has its energy accounted up to it.
    std::int64_t last_saved = -1;
    auto save = [&]() {
        if (args.checkpoint.save.empty() || iteration == last_saved) return;
        TrainingProgress p;
        p.iteration = iteration;
        p.consumed_train_samples = consumed;
        p.consumed_valid_samples = consumed_valid;
        p.consumed_train_tokens = consumed_tokens;
        p.gigaflos_no_embeds = gigaflos_no_embeds;
        p.skipped_steps = skipped_total;
        p.lr = schedule.state();
        p.current_lr = schedule.lr();
        p.current_weight_decay = schedule.weight_decay();
        p.train_iters = train_iters;
        p.do_valid = do_valid;
        p.do_test = do_test;
        scaler.save_to(p);
        info("saving checkpoint at iteration " + std::to_string(iteration) + " to " + args.checkpoint.save);
        const auto saved = save_checkpoint(args, vocab, model, optimizer, p, comm.get());
        last_saved = iteration;
        char buf[160];
        std::snprintf(buf, sizeof buf, " (%.1f MB in %.2f s)", static_cast<double>(saved.bytes) / 1e6, saved.seconds);
        info("  successfully saved checkpoint at iteration " + std::to_string(iteration) + " to " + args.checkpoint.save + buf);
        if (tb) tb->flush();
        if (carbon) {
            carbon->flush();
            for (const auto& note : carbon->take_new_notes()) print_info("codecarbon: " + note);
        }
    };

    // The micro batches of one step: Megatron's pretraining sampler gives micro batch j of the step
    // the samples [j·mbs·DP, (j+1)·mbs·DP) of the global batch, of which this rank takes its mbs.
    auto pipeline_step = [&](const Sampler& sample, std::int64_t first_sample, std::int64_t nmb, std::int64_t seqlen) {
        PipelineStep ps;
        ps.model = &model;
        ps.comm = comm.get();
        ps.prev = prev_stage;
        ps.next = next_stage;
        ps.micro_batches = nmb;
        ps.micro_batch_size = mbs;
        ps.seq_length = seqlen;
        ps.batch = [&sample, first_sample, seqlen, mbs, dp, dp_rank, device, seq = cfg.seq_length](std::int64_t j) {
            auto b = micro_batch(sample, first_sample + j * mbs * dp + dp_rank * mbs, mbs, seq, device);
            return std::make_pair(b.narrow(1, 0, seqlen), b.narrow(1, 1, seqlen));
        };
        return ps;
    };

    // Megatron-DeepSpeed's evaluate_and_print_results for one validation or test set. A Mode 2 group
    // prints "NAME loss at ..." and writes lm-loss-validation/NAME/...; the test sets at iteration 0,
    // as Megatron passes it. Returns the samples served (Megatron adds them to consumed_valid_samples).
    auto evaluate = [&](const std::string& prefix, EvalSet& set, bool test) {
        c10::NoGradGuard no_grad;
        model.set_training(false);
        sync_tp_norms();
        const std::int64_t nmb = calculator.num_micro_batches();
        double total = 0;
        std::int64_t served = 0;
        for (std::int64_t it = 0; it < args.logging.eval_iters; ++it) {
            total += pipeline_evaluate(pipeline_step(set.sample, set.consumed, nmb, cfg.seq_length));
            set.consumed += nmb * mbs * dp;
            served += nmb * mbs * dp;
        }
        model.set_training(true);
        if (comm) total = comm->sum(total, Group::Data);
        const double loss = total / static_cast<double>(args.logging.eval_iters * nmb * dp);
        if (log_rank) print_line(observe::format_validation_block(prefix, {{"lm loss", loss}}, set.group));
        if (tb && (!test || set.group)) {
            const double ppl = std::exp(std::min(20.0, loss));
            std::string tag = "lm-loss-validation/";
            if (set.group) {
                tag += *set.group;
                tag += "/";
            }
            tag += "lm loss validation";
            const std::int64_t step = test ? 0 : iteration;
            tb->add_scalar(tag, loss, step);
            tb->add_scalar(tag + " vs samples", loss, consumed);
            tb->add_scalar(tag + " vs tokens", loss, consumed_tokens);
            tb->add_scalar(tag + " vs gigaflos (without embeddings)", loss, static_cast<std::int64_t>(gigaflos_no_embeds));
            if (args.logging.log_validation_ppl_to_tensorboard) {
                tb->add_scalar(tag + " ppl", ppl, step);
                tb->add_scalar(tag + " ppl vs samples", ppl, consumed);
                tb->add_scalar(tag + " ppl vs tokens", ppl, consumed_tokens);
                tb->add_scalar(tag + " ppl vs gigaflos (without embeddings)", ppl, static_cast<std::int64_t>(gigaflos_no_embeds));
            }
            tb->flush();
        }
        return served;
    };
    // Every validation set in order; on resume each starts at consumed_valid_samples / their number.
    for (auto& v : valid_sets) v.consumed = consumed_valid / static_cast<std::int64_t>(valid_sets.size());
    auto evaluate_valid = [&](const std::string& prefix) {
        for (auto& v : valid_sets) consumed_valid += evaluate(prefix, v, false);
    };

    info("training " + std::to_string(train_iters) + " iterations of " + std::to_string(gbs) + " × " +
               std::to_string(cfg.seq_length) + " tokens");
    model.set_training(true);
    IntervalStats interval;
    std::string exit_reason = "finished";
    while (iteration < train_iters) {
        calculator.update(consumed);
        const std::int64_t nmb = calculator.num_micro_batches();
        const std::int64_t batch_size = calculator.current_global_batch_size();
        const double scale = scaler.scale();
        // Curriculum: the step's sequence length; the samples are cut to it (Megatron-DeepSpeed).
        std::int64_t seqlen = cfg.seq_length, curriculum_seqlen = 0;
        if (curriculum) {
            const auto c = train::curriculum_step(*curriculum, iteration, cfg.seq_length);
            seqlen = c.batch_seq_length;
            curriculum_seqlen = c.curriculum_seqlen;
        }
        const std::int64_t tokens_per_sample = curriculum ? curriculum_seqlen : cfg.seq_length;

        optimizer.zero_grad();
        sync_tp_norms();
        auto train_step = pipeline_step(train_sample, consumed, nmb, seqlen);
        if (reducer && args.parallel.overlap_grad_reduce) train_step.before_last_backward = [&reducer] { reducer->arm(); };
        // Megatron divides each micro batch's loss by the number of micro batches.
        const double loss_sum = pipeline_train(train_step, scale / static_cast<double>(nmb));
        double lm_loss = loss_sum / static_cast<double>(nmb);  // the last stage's; 0 on the others
        // Gradients averaged over the data-parallel group before clipping (Megatron's
        // allreduce_gradients); a parameter without a gradient contributes zeros.
        if (reducer) reducer->finish();
        if (pp_size > 1 && (stage.first() || stage.last())) {
            // The tied word embeddings: the first stage's input and the last stage's output layer
            // get the sum of both gradients (DeepSpeed's allreduce_tied_weight_gradients).
            c10::NoGradGuard no_grad;
            auto& w = model.parameter(model::kEmbeddingLayer, "word_embeddings.weight").tensor;
            if (!w.grad().defined()) w.mutable_grad() = at::zeros_like(w);
            comm->all_reduce_sum({w.grad()}, Group::Embedding);
        }
        if (comm) lm_loss = comm->sum(lm_loss, Group::Data) / static_cast<double>(dp);
        const auto step = optimizer.step(schedule.lr(), schedule.weight_decay(), scale, scaler.active(),
                                         args.logging.log_num_zeros_in_grad);
        bool skipped = step.skipped;
        if (scaler.active()) skipped = scaler.update(step.skipped);
        if (!skipped) schedule.step(batch_size, consumed_tokens);  // tokens before this iteration, as BS AnnealingLR

        if (carbon) carbon->measure_if_due();
        ++iteration;
        consumed += batch_size;
        consumed_tokens += batch_size * tokens_per_sample;
        gigaflos_no_embeds += 6.0 * static_cast<double>(batch_size * cfg.seq_length) * params_no_embeddings_billions;
        summary.last_loss = lm_loss;
        if (skipped) {
            ++skipped_total;
            ++interval.skipped;
            if (!std::isfinite(lm_loss)) ++interval.nan;
        } else {
            ++interval.advanced;
            interval.loss_sum += lm_loss;
        }
        const double lr = schedule.lr();
        const std::optional<double> grad_norm = args.optimizer.clip_grad > 0 && !skipped ? std::optional(step.grad_norm) : std::nullopt;
        const std::optional<double> params_norm = args.logging.log_params_norm ? std::optional(optimizer.params_norm()) : std::nullopt;

        if (tb && iteration % args.logging.tensorboard_log_interval == 0) {
            auto both = [&](const std::string& tag, double v) {
                tb->add_scalar(tag, v, iteration);
                tb->add_scalar(tag + " vs samples", v, consumed);
            };
            auto three = [&](const std::string& tag, double v) {
                both(tag, v);
                tb->add_scalar(tag + " vs tokens", v, consumed_tokens);
            };
            tb->add_scalar("steps-vs-samples/y=steps,x=samples", static_cast<double>(iteration), consumed);
            tb->add_scalar("steps-vs-samples/y=samples,x=steps", static_cast<double>(consumed), iteration);
            tb->add_scalar("steps-vs-tokens/y=steps,x=tokens", static_cast<double>(iteration), consumed_tokens);
            tb->add_scalar("steps-vs-tokens/y=tokens,x=steps", static_cast<double>(consumed_tokens), iteration);
            if (args.logging.log_learning_rate_to_tensorboard) three("learning-rate/learning-rate", lr);
            if (args.logging.log_batch_size_to_tensorboard) both("batch-size/batch-size", static_cast<double>(batch_size));
            three("lm-loss-training/lm loss", lm_loss);
            tb->add_scalar("lm-loss-training/lm loss vs gigaflos (without embeddings)", lm_loss,
                           static_cast<std::int64_t>(gigaflos_no_embeds));
            if (scaler.active() && args.logging.log_loss_scale_to_tensorboard) three("loss-scale/loss-scale", scaler.scale());
            if (grad_norm) three("grad-norm/grad-norm", *grad_norm);
            if (step.num_zeros >= 0) three("num-zeros/num-zeros", static_cast<double>(step.num_zeros));
            if (params_norm) three("params-norm/params-norm", *params_norm);
            if (curriculum) tb->add_scalar("curriculum_seqlen", static_cast<double>(curriculum_seqlen), iteration);
        }

        if (iteration % args.logging.log_interval == 0) {
            const std::int64_t total_iters = interval.advanced + interval.skipped;
            const double per_iter = seconds_since(interval.start) / static_cast<double>(total_iters);
            flops_shape.global_batch_size = batch_size;
            flops_shape.seq_length = tokens_per_sample;
            observe::TrainingLogLine line;
            line.iteration = iteration;
            line.train_iters = train_iters;
            line.consumed_samples = consumed;
            line.consumed_tokens = consumed_tokens;
            line.seconds_per_iteration = per_iter;
            line.learning_rate = lr;
            line.global_batch_size = batch_size;
            line.losses = {{"lm loss", interval.loss_sum / static_cast<double>(std::max<std::int64_t>(1, interval.advanced))}};
            if (args.optimizer.fp16) line.loss_scale = scaler.scale();
            line.grad_norm = grad_norm;
            if (step.num_zeros >= 0) line.num_zeros = static_cast<double>(step.num_zeros);
            line.params_norm = params_norm;
            line.skipped_iterations = interval.skipped;
            line.nan_iterations = interval.nan;
            line.samples_per_second = static_cast<double>(batch_size) / per_iter;
            line.tflops = observe::tflops_per_gpu(flops_shape, per_iter, world);
            line.tokens_per_second = line.samples_per_second * static_cast<double>(tokens_per_sample);
            if (curriculum) line.curriculum_seqlen = curriculum_seqlen;
            if (!args.logging.codecarbon_dir.empty()) {
                // Energy up to now (not up to the last 15 s tick), summed over the nodes.
                double kwh = 0, kg = 0;
                if (carbon) {
                    carbon->measure();
                    kwh = carbon->energy_kwh();
                    kg = carbon->emissions_kg();
                }
                if (comm) {
                    kwh = comm->sum(kwh, Group::World);
                    kg = comm->sum(kg, Group::World);
                }
                line.energy_kwh = kwh;
                line.co2_kg = kg;
            }
            if (log_rank) print_line(observe::format_training_log_line(line));
            // Loss alerts on what the line shows; a NaN/Inf iteration in the interval alerts too.
            const double shown = interval.nan > 0 || interval.advanced == 0 ? std::nan("") : line.losses[0].second;
            const auto alert = alerts.observe(iteration, std::isfinite(lm_loss) ? shown : lm_loss);
            if (alert && log_rank) {
                print_line(alert->message);
                if (alert_command) alert_command->run(alert->message);
            }
            if (tb && args.logging.log_timers_to_tensorboard) {
                tb->add_scalar("iteration-time/iteration-time", per_iter, iteration);
                tb->add_scalar("iteration-time/iteration-time vs samples", per_iter, consumed);
                tb->add_scalar("iteration-time/iteration-time vs tokens", per_iter, consumed_tokens);
                tb->add_scalar("iteration-time/samples per second", line.samples_per_second, iteration);
                tb->add_scalar("iteration-time/samples per second per replica", line.samples_per_second, iteration);
                tb->add_scalar("iteration-time/tokens per second", *line.tokens_per_second, iteration);
                tb->add_scalar("iteration-time/tokens per second per replica", *line.tokens_per_second, iteration);
                tb->add_scalar("iteration-time/TFLOPs per gpu (estimated)", line.tflops, iteration);
            }
            if (tb) tb->flush();
            interval = IntervalStats{};
        }

        if (do_valid && args.logging.eval_interval > 0 && iteration % args.logging.eval_interval == 0)
            evaluate_valid("iteration " + std::to_string(iteration));

        if (args.checkpoint.save_interval && iteration % *args.checkpoint.save_interval == 0) save();

        // Exit conditions, checked between iterations as Megatron does. Every one but the kill
        // switch (Megatron-DeepSpeed exits on it without saving) saves a checkpoint first. With
        // several processes they agree first (a signal may reach one rank only), as Megatron's
        // DistributedSignalHandler and its all-reduced exit duration.
        int stop_signal = train::stop_signal_received();
        bool kill_switch = !args.exit.kill_switch_path.empty() && std::filesystem::exists(args.exit.kill_switch_path);
        double minutes = seconds_since(process_start) / 60.0;
        if (comm) {
            const auto agreed = comm->max({static_cast<double>(stop_signal), kill_switch ? 1.0 : 0.0, minutes}, Group::World);
            stop_signal = static_cast<int>(agreed[0]);
            kill_switch = agreed[1] > 0;
            minutes = agreed[2];
        }
        if (const int sig = stop_signal) {
            exit_reason = train::signal_name(sig);
            info("received " + exit_reason + ": stopping after iteration " + std::to_string(iteration));
            save();
            break;
        }
        if (kill_switch) {
            exit_reason = "kill switch";
            info("Detected kill switch at " + args.exit.kill_switch_path + ". Exiting");
            break;
        }
        if (args.exit.exit_duration_in_mins && minutes > static_cast<double>(*args.exit.exit_duration_in_mins)) {
            exit_reason = "exit duration";
            save();
            info("exiting program after " + std::to_string(minutes) + " minutes");
            break;
        }
        if (args.exit.exit_interval && *args.exit.exit_interval > 0 && iteration % *args.exit.exit_interval == 0) {
            exit_reason = "exit interval";
            save();
            info("exiting program at iteration " + std::to_string(iteration));
            break;
        }
    }

    if (exit_reason == "finished") {
        if (do_valid) evaluate_valid("the end of training for val data");
        if (iteration != 0) save();
        for (auto& t : test_sets) (void)evaluate("the end of training for test data", t, true);
    }
    if (tb) tb->flush(true);
    if (carbon) {
        const auto row = carbon->stop();
        for (const auto& note : carbon->take_new_notes()) print_info("codecarbon: " + note);
        print_info("codecarbon: " + std::to_string(row.energy_consumed) + " kWh, " + std::to_string(row.emissions) +
                   " kg CO2eq in " + std::to_string(row.duration) + " s, written to " + carbon->output_path());
    }
    if (reducer && iteration > resumed.iteration)
        info("data-parallel gradients: in the last step " + std::to_string(reducer->started_during_backward()) + " of " +
             std::to_string(reducer->buckets()) + " bucket all-reduces started during the backward pass");
    if (comm) comm->finish();  // rank 0 holds the rendezvous store: nobody leaves while others use it
    summary.iterations = iteration;
    summary.consumed_samples = consumed;
    summary.exit_reason = exit_reason;
    return summary;
}

}  // namespace mds::trainer
