// The Trainer's set-up, in the order Megatron's pretrain() does it: flags, launch and communicator,
// tokenizer and model, resume of the weights, data, optimizer, resume of the rest, observers. The
// order is part of the behaviour: it is the order of the info lines and of the errors.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/DeviceAccelerator.h>  // at::accelerator::synchronizeDevice (timers on a GPU), getDeviceStats

#include <algorithm>
#include <cerrno>  // EPIPE: a closed standard output (print_line)
#include <charconv>
#include <csignal>  // SIGPIPE
#include <cstdio>
#include <cstdlib>  // std::getenv (MDS_DUMP_BATCHES)
#include <cstring>
#include <ctime>  // print_datetime's local time
#include <filesystem>
#include <string>
#if defined(__GLIBC__)
#include <malloc.h>  // mallopt
#endif

#include "mds/ckpt/ds_optimizer_layout.h"  // ds_partitions_optimizer_states
#include "mds/ckpt/pickle.h"  // PyValue (the args Namespace at the job's start)
#include "mds/flags/dry_run.h"  // padded_vocab_size
#include "mds/trainer/stop_signals.h"  // install_stop_signal_handlers
#include "mds/flags/train_tokenizer.h"  // load_tokenizer
#include "mds/util/text.h"  // python_float_repr
#include "device_clock.h"  // make_device_clock (the per-step timers on a GPU)
#include "megatron_args.h"  // megatron_args_lines
#include "mds/observe/gpu_energy.h"  // open_nvml_energy_reader (the GPU's name, for its peak)
#include "mds/observe/log_line.h"  // py_format_float, format_memory_report
#include "mds/util/cli.h"  // mds_version
#include "mds/util/error.h"
#include "mds/util/tool.h"  // print_info, print_warning
#include "trainer_loop.h"

namespace mds::trainer {
namespace {

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

model::GptConfig model_config(const flags::TrainArgs& args, std::int64_t padded_vocab) {
    const auto& m = args.model;
    model::GptConfig c;
    c.num_layers = m.num_layers;
    c.hidden_size = m.hidden_size;
    c.ffn_hidden_size = m.ffn_hidden();
    c.num_attention_heads = m.num_attention_heads;
    c.kv_channels = m.kv();
    c.seq_length = m.seq_length;
    c.max_position_embeddings = m.max_positions();
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
    // ParallelMLP's choice: the fused bias GeLU first, then a GLU, --openai-gelu, --onnx-safe, F.gelu.
    c.activation = m.bias_gelu_fusion ? model::Activation::FusedGelu
                   : m.openai_gelu    ? model::Activation::OpenAiGelu
                   : m.onnx_safe_on() ? model::Activation::ErfGelu
                                      : model::Activation::Gelu;
    if (m.glu_activation) c.glu = model::glu_from_name(*m.glu_activation);
    c.residual_post_layernorm = m.apply_residual_connection_post_layernorm;
    c.fp32_residual = m.fp32_residual_connection;
    // The fused kernels: setup_model, from fusions_for (the flags, or on by default on a GPU).
    c.checkpoint_activations = m.checkpoint_activations;
    c.checkpoint_num_layers = m.checkpoint_num_layers;
    c.precision = args.optimizer.fp16 ? model::Precision::FP16 : args.optimizer.bf16 ? model::Precision::BF16 : model::Precision::FP32;
    return c;
}

// Megatron-DeepSpeed reads the --*-weighted-split-paths-path files while parsing its flags and keeps
// their groups as the --*-weighted-split-paths values: so does this copy (the checkpoint args too).
flags::TrainArgs with_weighted_split_files(const flags::TrainArgs& given) {
    flags::TrainArgs args = given;
    for (int k = 0; k < 3; ++k) {
        const auto kk = static_cast<std::size_t>(k);
        if (args.data.weighted_split_paths_path[kk].empty()) continue;
        std::string flag = data::weighted_split_flag(k);
        flag += "-path";
        args.data.weighted_split_paths[kk] = data::read_weighted_split_paths_file(flag, args.data.weighted_split_paths_path[kk]);
    }
    return args;
}

}  // namespace

void print_line(const std::string& s) {
    bool ok = std::fputs(s.c_str(), stdout) != EOF;
    if (ok && (s.empty() || s.back() != '\n')) ok = std::fputc('\n', stdout) != EOF;
    if (ok) ok = std::fflush(stdout) != EOF;
    if (ok || errno != EPIPE) return;
    // The log's reader is gone (SIGPIPE is ignored: install_stop_signal_handlers). Training on without a log would
    // leave nobody watching; ending here would lose the steps since the last checkpoint: stop as on SIGUSR1.
    static bool told = false;
    if (!told) {
        told = true;
        std::fputs("mds-train: standard output is closed (broken pipe): stopping after this iteration, saving a "
                   "checkpoint first when --save is given\n", stderr);
    }
    request_stop(SIGPIPE);
}

LossScale::LossScale(const flags::TrainArgs& args) {
    const auto& o = args.optimizer;
    if (!o.fp16) return;
    if (args.parallel.deepspeed) {
        ds_.emplace(optim::deepspeed_loss_scaler_config(o));
    } else {
        megatron_.emplace(optim::megatron_grad_scaler_config(o));
    }
}

void LossScale::save_to(TrainingProgress& p) const {
    if (ds_) p.deepspeed_scaler = ds_->state();
    if (megatron_) p.megatron_scaler = megatron_->state();
}

void LossScale::load_from(const TrainingProgress& p) {
    if (ds_ && p.deepspeed_scaler) ds_->load_state(*p.deepspeed_scaler);
    if (megatron_ && p.megatron_scaler) megatron_->load_state(*p.megatron_scaler);
}

Trainer::Trainer(const flags::TrainArgs& args, const RunOptions& options, Clock::time_point process_start)
    : args_(with_weighted_split_files(args)), options_(options), process_start_(process_start) {
    check_args();
    setup_launch();
    // pretrain()'s start-up lines, in its order (scripts watching main_log.txt wait for "training ...").
    char init_seconds[32];
    std::snprintf(init_seconds, sizeof init_seconds, "%.3f", seconds_since(process_start_));
    info(std::string("time to initialize megatron (seconds): ") + init_seconds);
    info_datetime("after megatron is initialized");
    // BMD's pretrain() times its set-up: the model and the optimizer (the checkpoint's load within them), then the
    // data; the last rank prints "time (ms) | load-checkpoint: X" (with --load) and the two set-up timers' line.
    timers_.start("model-and-optimizer-setup");
    setup_model();
    // BMD's arguments block (parse_args prints it first; here once the model that sets rank and the vocabulary
    // exists): stdout, rank 0, as the real program's.
    if (info_rank_)
        for (const auto& line : megatron_args_lines(args_, *model_)) print_line(line);
    timers_.start("load-checkpoint");
    load_weights();
    timers_.stop("load-checkpoint");
    timers_.stop("model-and-optimizer-setup");
    timers_.start("train/valid/test-data-iterators-setup");
    setup_data();
    timers_.stop("train/valid/test-data-iterators-setup");
    timers_.start("model-and-optimizer-setup");
    setup_optimizer();
    timers_.start("load-checkpoint");
    load_state();
    timers_.stop("load-checkpoint");
    // BMD's per-rank estimate (get_parameters_in_billions: this rank's stage x TP x PP, in billions; exact only when
    // every stage holds as many), printed from rank 0; the one without embeddings also makes gigaflos_no_embeds, its
    // TensorBoard axis and the saved args the real program's.
    params_no_embeddings_billions_ = megatron_parameters_in_billions_no_embedding(*model_, tp_size_ * pp_size_);
    info("estimated model parameters: " +
         python_float_repr(static_cast<double>(model_->parameter_count() * tp_size_ * pp_size_) / 1e9));
    info("estimated model parameters without embeddings: " + python_float_repr(params_no_embeddings_billions_));
    timers_.stop("model-and-optimizer-setup");
    info_datetime("after model, optimizer, and learning rate scheduler are built");
    info_datetime("after dataloaders are built");
    info("done with setup ...");
    if (!args_.checkpoint.load.empty())
        log_timers(timers_, {"load-checkpoint"}, 1.0, args_.logging.timing_log_option, *comm_, log_rank_);
    log_timers(timers_, {"model-and-optimizer-setup", "train/valid/test-data-iterators-setup"}, 1.0,
               args_.logging.timing_log_option, *comm_, log_rank_);
    info("training ...");
    setup_observers();
    start_ledger();
    const auto ns = tb_ ? std::optional(start_args()) : std::nullopt;  // the writers' (the last rank's)
    start_mlflow(ns ? &*ns : nullptr);
    start_tensorboard(ns ? &*ns : nullptr);
}

Trainer::~Trainer() = default;

void Trainer::info(const std::string& m) const {
    if (info_rank_) print_info(m);
}

void Trainer::info_datetime(const std::string& what) const {
    if (!info_rank_) return;
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &local);
    print_info("[" + what + "] datetime: " + when + " ");
}

void Trainer::check_args() {
    if (args_.checkpoint.finetune && args_.checkpoint.load.empty()) throw UsageError("--finetune needs --load");
    world_ = launch_.world_size;
    tp_size_ = args_.parallel.tensor_model_parallel_size;
    pp_size_ = args_.parallel.pipeline_model_parallel_size;
    dp_ = args_.parallel.data_parallel_size;
    if (tp_size_ * pp_size_ * dp_ != world_)
        throw UsageError("--tensor-model-parallel-size " + std::to_string(tp_size_) + " x --pipeline-model-parallel-size " +
                         std::to_string(pp_size_) + " x data-parallel size " + std::to_string(dp_) + " is not the " +
                         std::to_string(world_) + " processes started (" +
                         (launch_.source.empty() ? std::string("no launcher") : launch_.source) + ")");
    weighted_split_ = !args_.data.weighted_split_paths[0].empty();
    if (args_.data.data_path.empty() && !weighted_split_)
        throw UsageError("--data-path (or --train-weighted-split-paths / --train-weighted-split-paths-path) is required");
    if (!weighted_split_) return;
    for (int k = 0; k < 3; ++k) {
        const auto kk = static_cast<std::size_t>(k);
        const std::string& file = args_.data.weighted_split_paths_path[kk];
        std::string where;
        if (!file.empty()) {
            where = "from ";
            where += file;
            where += " line 1";
        }
        split_groups_[kk] = data::parse_weighted_split_paths(data::weighted_split_flag(k), args_.data.weighted_split_paths[kk], where);
    }
}

// --timing-log-level's timers. On a GPU the level-0 ones wait for the device at start and stop (as BMD's _Timer
// does), so that the work queued before them is not counted in them and their own is; the per-step ones (levels
// 1 and 2) time the device's queue with events and never wait (observe/timers.h).
static observe::Timers make_timers(const flags::LoggingArgs& logging, c10::Device device) {
    std::function<void()> sync;
    if (device.is_cuda())
        sync = [index = device.has_index() ? device.index() : c10::DeviceIndex(0)] { at::accelerator::synchronizeDevice(index); };
    return observe::Timers(static_cast<int>(logging.timing_log_level), std::move(sync), make_device_clock(device));
}

// Training on the CPU, the step's largest tensors (the logits: micro batch x sequence x padded vocabulary floats,
// 33.5 MB in the demo) are past glibc's own mmap threshold (32 MiB at most): each is mmap()ed, page-faulted in and
// munmap()ed again every micro batch. The heap serves them instead (up to 256 MiB a block) and keeps up to 1 GiB
// freed for reuse: the demo's model, 40 iterations on 2 cores, 30.4 s -> 22.7 s, system time 12 s -> 0.6 s
// (2026-11-29). Not when GLIBC_TUNABLES sets glibc.malloc.* (the user's choice), nor beside a GPU, where the host
// holds no activations and the largest host buffers are a checkpoint's, better returned after a save.
// Returns what it set, for the log; empty when it set nothing.
static std::string keep_freed_cpu_tensors() {
    constexpr int kLargestHeapBlockMiB = 256, kKeptFreedMiB = 1024;
    if (const char* tunables = std::getenv("GLIBC_TUNABLES"); tunables && std::strstr(tunables, "glibc.malloc.")) return {};
#if defined(__GLIBC__)
    if (mallopt(M_MMAP_THRESHOLD, kLargestHeapBlockMiB << 20) == 1 && mallopt(M_TRIM_THRESHOLD, kKeptFreedMiB << 20) == 1)
        return "host heap: blocks up to " + std::to_string(kLargestHeapBlockMiB) + " MiB, " + std::to_string(kKeptFreedMiB / 1024) +
               " GiB of freed memory kept for reuse";
#endif
    return {};
}

void Trainer::setup_launch() {
    install_stop_signal_handlers();
    if (options_.threads > 0) at::set_num_threads(static_cast<int>(options_.threads));
    device_ = pick_device(options_.device, launch_.local_rank);
    if (device_.is_cpu()) host_heap_ = keep_freed_cpu_tensors();
    timers_ = make_timers(args_.logging, device_);
    if (const char* dump = std::getenv("MDS_DUMP_BATCHES")) dump_batches_ = dump;
    info_rank_ = launch_.rank == 0;
    log_rank_ = launch_.rank == world_ - 1;
    if (world_ == 1) {
        comm_ = Communicator::single_process();
        return;
    }
    // Several processes: the rendezvous first, so that a rank that cannot join fails before any work.
    std::string engine = "gloo";
    CommOptions co;
    co.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(args_.parallel.distributed_timeout_minutes * 60000.0));
    // As torch.distributed: NCCL between GPUs, Gloo on CPUs (--distributed-backend is about GPUs).
    if (args_.parallel.distributed_backend == "nccl" && device_.is_cuda()) {
        if (!nccl_available())
            throw UsageError("--distributed-backend nccl: this mds-train was built against a LibTorch without CUDA, so it has "
                             "no NCCL; use --distributed-backend gloo");
        const auto gpus = static_cast<int>(at::getNumGPUs());
        if (launch_.local_world_size > gpus)
            throw UsageError("--distributed-backend nccl: " + std::to_string(launch_.local_world_size) + " ranks on this node (" +
                             launch_.source + ") share " + std::to_string(gpus) +
                             " GPU(s), and NCCL needs a GPU of its own per rank; start one rank per GPU, or use "
                             "--distributed-backend gloo to share GPUs");
        co.nccl_device = device_;
        engine = "nccl for CUDA tensors, gloo for host numbers";
    }
    comm_ = std::make_unique<Communicator>(
        launch_, dist::ParallelLayout(world_, static_cast<int>(tp_size_), static_cast<int>(pp_size_)), co);
    dp_rank_ = comm_->coordinates().dp;
    pp_rank_ = comm_->coordinates().pp;
    info("TP " + std::to_string(tp_size_) + " x PP " + std::to_string(pp_size_) + " x DP " + std::to_string(dp_) + " over " +
         std::to_string(world_) + " processes (" + launch_.launcher + ", rendezvous at " + launch_.master_addr + ":" +
         std::to_string(launch_.master_port) + ", " + engine + ")");
    // Tensor parallelism all-reduces activations in every layer: across nodes it runs at the speed of
    // the network between them (BigScience's rule: TP within a node, PP across nodes).
    if (info_rank_ && launch_.local_world_size >= 1 && tp_size_ > launch_.local_world_size)
        print_warning("--tensor-model-parallel-size " + std::to_string(tp_size_) + " spans " +
                      std::to_string((tp_size_ + launch_.local_world_size - 1) / launch_.local_world_size) + " nodes of " +
                      std::to_string(launch_.local_world_size) + " ranks (" + launch_.source +
                      "): tensor parallelism exchanges activations in every layer; keep it within a node and let "
                      "--pipeline-model-parallel-size span the nodes");
}

void Trainer::setup_model() {
    // Tokenizer → padded vocabulary, as Megatron's build_tokenizer.
    const auto tok = flags::load_tokenizer(args_.data);
    vocab_ = static_cast<std::int64_t>(tok.vocab_size());
    // --vocab-extra-ids: Megatron's GPT2BPETokenizer ignores it; its PretrainedFromHF passes <extra_id_0> ...
    // <extra_id_{N-1}> to AutoTokenizer as additional special tokens, which adds those it lacks to len(tokenizer).
    if (args_.data.tokenizer_type.value_or("GPT2BPETokenizer") == "PretrainedFromHF")
        for (std::int64_t i = 0; i < args_.data.vocab_extra_ids; ++i)
            if (tok.token_id("<extra_id_" + std::to_string(i) + ">") < 0) ++vocab_;
    if (args_.data.eod_mask_loss) {
        if (tok.eod_id() < 0) throw UsageError("--eod-mask-loss: the tokenizer has no end-of-document token");
        eod_mask_id_ = tok.eod_id();
    }
    if (args_.data.reset_position_ids) {
        if (tok.eod_id() < 0) throw UsageError("--reset-position-ids: the tokenizer has no end-of-document token");
        reset_position_eod_ = tok.eod_id();
    }
    padded_ = flags::padded_vocab_size(vocab_, args_.model, args_.parallel.tensor_model_parallel_size);
    info(" > padded vocab (size: " + std::to_string(vocab_) + ") with " + std::to_string(padded_ - vocab_) +
         " dummy tokens (new size: " + std::to_string(padded_) + ")");

    cfg_ = model_config(args_, padded_);
    std::vector<std::string> by_default;
    fusions_ = fusions_for(args_, device_, &by_default);
    cfg_.cross_entropy_fusion = fusions_.cross_entropy;
    cfg_.layernorm_backward_fusion = fusions_.layernorm_backward;
    cfg_.bias_grad_fusion = fusions_.bias_grad;
    cfg_.gradient_accumulation_fusion = fusions_.gradient_accumulation;
    cfg_.residual_layernorm_fusion = fusions_.residual_layernorm;
    cfg_.gelu_epilogue_fusion = fusions_.gelu_epilogue;
    if (!by_default.empty()) {
        std::string flags;
        for (const auto& f : by_default) flags += " " + f;
        info("fused kernels on " + device_.str() + " by default:" + flags + " (each turned off by its --no- form)");
    }
    at::manual_seed(static_cast<std::uint64_t>(args_.seed) + 100 * static_cast<std::uint64_t>(pp_rank_));  // _set_random_seed
    if (tp_size_ > 1) {
        tp_.rank = comm_->coordinates().tp;
        tp_.size = static_cast<int>(tp_size_);
        Communicator* c = comm_.get();
        tp_.all_reduce_sum = [c](at::Tensor& t) { c->all_reduce_sum({t}, Group::Tensor); };
        tp_.all_reduce_max = [c](at::Tensor& t) { c->all_reduce_max(t, Group::Tensor); };
    }
    // This rank's pipeline stage, cut as DeepSpeed cuts GPTModelPipe; its neighbours in the pipeline.
    stage_ = pipeline_stage(cfg_, static_cast<int>(tp_size_), pp_rank_, static_cast<int>(pp_size_),
                            args_.parallel.pp_partition_method.value_or("type:transformer"));
    if (pp_size_ > 1) {
        const auto pipe = comm_->members(Group::Pipeline);
        if (!stage_.first()) prev_stage_ = pipe[static_cast<std::size_t>(pp_rank_) - 1];
        if (!stage_.last()) next_stage_ = pipe[static_cast<std::size_t>(pp_rank_) + 1];
    }
    model_ = std::make_unique<model::GptModel>(cfg_, device_, static_cast<std::uint64_t>(args_.seed), tp_, stage_);
    if (pp_size_ > 1 && comm_->coordinates().dp == 0 && comm_->coordinates().tp == 0)
        print_info("pipeline stage " + std::to_string(pp_rank_) + ": transformer blocks [" + std::to_string(stage_.first_block) +
                   ", " + std::to_string(stage_.end_block) + ")" + (stage_.first() ? ", embedding" : "") +
                   (stage_.last() ? ", final LayerNorm and output layer" : "") + ", " +
                   std::to_string(model_->parameter_count()) + " parameters on TP rank 0");
    info(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): " + std::to_string(model_->parameter_count()));
    info("device " + device_.str() + ", " + model::precision_name(cfg_.precision) + ", " + std::to_string(at::get_num_threads()) +
         " CPU threads" + (host_heap_.empty() ? "" : " (" + host_heap_ + ")"));
}

void Trainer::setup_data() {
    calculator_.emplace(flags::make_num_micro_batches_calculator(args_));
    mbs_ = args_.optimizer.micro_batch_size;
    gbs_ = calculator_->global_batch_size();
    data::NumSamplesOptions num_samples;
    num_samples.train_samples = args_.length.train_samples;
    num_samples.train_iters = args_.length.train_iters;
    num_samples.global_batch_size = gbs_;
    num_samples.eval_interval = args_.logging.eval_interval;
    num_samples.eval_iters = args_.logging.eval_iters;
    if (const auto& r = args_.optimizer.rampup_batch_size)
        num_samples.rampup_batch_size = std::array<std::int64_t, 3>{r->start_global_batch_size, r->batch_size_increment,
                                                                    r->ramp_up_samples};
    auto log = [this](const std::string& m) { info(m); };
    if (args_.data.sft) {
        setup_sft_data(num_samples);
    } else if (weighted_split_) {
        data::WeightedSplitOptions wopt;
        wopt.groups = split_groups_;
        wopt.seq_length = static_cast<std::int32_t>(cfg_.seq_length);
        wopt.seed = args_.seed;
        wopt.num_samples = num_samples;
        wopt.log = log;
        const auto& w = weighted_.emplace(wopt);
        train_iters_ = w.train_iters();
        train_batches_ = gpt_batches([&w](std::int64_t n) { return w.sample(0, 0, n); });
        for (int k = 1; k <= 2 && args_.logging.eval_iters > 0; ++k)
            for (std::size_t g = 0; g < w.groups(k).size(); ++g)
                (k == 1 ? valid_sets_ : test_sets_)
                    .push_back({w.groups(k)[g].name, gpt_batches([&w, k, g](std::int64_t n) { return w.sample(k, g, n); }), 0});
    } else {
        data::GptDatasetsOptions dopt;
        dopt.data_path = args_.data.data_path;
        if (args_.data.split) dopt.split = *args_.data.split;
        dopt.seq_length = static_cast<std::int32_t>(cfg_.seq_length);
        dopt.seed = args_.seed;
        dopt.num_samples = num_samples;
        dopt.log = log;
        const auto& d = datasets_.emplace(dopt);
        train_iters_ = d.summary().train_iters;
        train_batches_ = gpt_batches([&d](std::int64_t n) { return d.sample(0, n); });
        for (int k = 1; k <= 2 && args_.logging.eval_iters > 0; ++k)
            if (d.summary().sizes[static_cast<std::size_t>(k)] > 0)
                // Megatron-DeepSpeed names Mode 1's sets as groups too: "valid loss at ...", lm-loss-validation/valid/...
                (k == 1 ? valid_sets_ : test_sets_)
                    .push_back({std::string(k == 1 ? "valid" : "test"), gpt_batches([&d, k](std::int64_t n) { return d.sample(k, n); }), 0});
    }
    do_valid_ = !valid_sets_.empty();
    do_test_ = !test_sets_.empty();
    setup_sample_order();
}

// --sft: the packed prompt / answer datasets of either mode, as BMD's finetune_t0_non_causal_decoder.py
// builds them (decoder_packed_mtf_dataset.py), and their batches.
void Trainer::setup_sft_data(const data::NumSamplesOptions& num_samples) {
    const auto tok = flags::load_tokenizer(args_.data);
    data::PackedSftDatasetsOptions o;
    o.data_path = args_.data.data_path;
    if (args_.data.split) o.split = *args_.data.split;
    if (weighted_split_) o.groups = split_groups_;
    o.seq_length = static_cast<std::int32_t>(cfg_.seq_length);
    o.seed = args_.seed;
    // Padding fills a row after its last example: BMD's tokenizer.pad. GPT-2's vocabulary has no pad
    // token; its end-of-document token stands in. Padding takes no part in the loss, nor in the
    // attention of real tokens (its own segment), so which id it is changes no number.
    const std::int32_t pad = tok.token_id("<pad>");
    o.pad_token = pad >= 0 ? pad : tok.eod_id() >= 0 ? tok.eod_id() : 0;
    o.num_samples = num_samples;
    o.log = [this](const std::string& m) { info(m); };
    const auto& d = sft_.emplace(o);
    info(data::format_summary(d));
    train_iters_ = d.train_iters();
    sft_options_.loss_on_targets_only = args_.data.loss_on_targets_only;
    sft_options_.eod_mask_id = eod_mask_id_;
    info(std::string("> supervised fine-tuning (--sft): attention and position ids within each packed example; loss on ") +
         (sft_options_.loss_on_targets_only ? "the answer tokens only (--loss-on-targets-only)" : "prompts and answers") +
         (sft_options_.eod_mask_id ? ", not where the input is the end-of-document token (--eod-mask-loss)" : ""));
    if (args_.data.reset_position_ids || args_.data.reset_attention_mask)
        info("> --reset-position-ids / --reset-attention-mask: no effect with --sft, whose rows restart attention and "
             "positions at each packed example");
    train_batches_ = sft_batches(0, 0);
    for (int k = 1; k <= 2 && args_.logging.eval_iters > 0; ++k)
        for (std::size_t g = 0; g < d.groups(k).size(); ++g)
            if (d.groups(k)[g].size > 0) (k == 1 ? valid_sets_ : test_sets_).push_back({d.groups(k)[g].name, sft_batches(k, g), 0});
}

// --dataloader-type and --skip-train-iteration-range: the order this rank reads the training samples in.
void Trainer::setup_sample_order() {
    const auto type = dataloader_type(args_.data.dataloader_type);
    if (type == DataloaderType::Cyclic && (do_valid_ || do_test_))
        // BMD's build_train_valid_test_data_iterators wraps the LIST of validation / test data loaders in
        // cyclic_iter, so its evaluation gets a DataLoader for a batch and fails.
        throw UsageError("--dataloader-type cyclic: Megatron-DeepSpeed's evaluation fails with it (its validation and "
                         "test iterators cycle over the list of data loaders); give no validation or test data "
                         "(--split 100,0,0, no --valid/--test-weighted-split-paths) or --eval-iters 0");
    const std::int64_t total = sft_             ? sft_->size(0)
                               : weighted_split_ ? weighted_->groups(0).front().size
                                                 : datasets_->summary().sizes[0];
    train_order_.emplace(type, total, mbs_, dp_, dp_rank_);
    skip_ranges_.assign(args_.data.skip_ranges.begin(), args_.data.skip_ranges.end());
}

void Trainer::setup_optimizer() {
    schedule_.emplace(optim::lr_schedule_params_from_config(args_.optimizer, args_.length.train_iters, args_.length.train_samples, gbs_));
    // ZeRO stage 1 partitions the optimizer states over data parallelism; so does DeepSpeed's
    // BF16_Optimizer, which bf16 runs get at ZeRO stage 0 ("it implements its own zero stage 1
    // equivalent", tr11-176B-ml's ds_config). The optimizer partitions only over more than one rank.
    const bool partition_states = ckpt::ds_partitions_optimizer_states(args_.parallel.zero_stage, args_.optimizer.bf16);
    // bf16: every micro batch's gradients added into fp32 buffers, which the data-parallel all-reduce, the
    // clipping and the step read, as DeepSpeed's BF16_Optimizer (and Megatron's local DDP, which bf16 sets to
    // accumulate_allreduce_grads_in_fp32) does: a bf16 sum over many micro batches would lose the small terms.
    if (!model_->parameters().empty() && model_->parameters().front().tensor.scalar_type() == at::kBFloat16) {
        main_grads_ = std::make_unique<MainGrads>(model_->parameters());
        info("bf16: gradients accumulated over the micro batches and all-reduced in fp32 (" +
             std::to_string(main_grads_->flat().numel()) + " fp32 main gradients)");
    }
    auto optimizer_config = args_.optimizer;
    optimizer_config.adam_step_fusion = fusions_.adam_step;
    optimizer_ = std::make_unique<AdamOptimizer>(model_->parameters(), optimizer_config, partition_states ? comm_.get() : nullptr,
                                                 args_.parallel.host_optimizer(), main_grads_.get());
    if (optimizer_->offloaded())
        info("optimizer offload: fp32 master weights, Adam moments and the step in host memory (--cpu-optimizer / "
             "offload_optimizer)");
    if (tp_size_ > 1 || pp_size_ > 1) {
        Communicator* c = comm_.get();
        std::function<double(double)> tp_sum, pp_sum;
        if (tp_size_ > 1) tp_sum = [c](double v) { return c->sum(v, Group::Tensor); };
        if (pp_size_ > 1) pp_sum = [c](double v) { return c->sum(v, Group::Pipeline); };
        optimizer_->set_model_parallel_sums(tp_sum, pp_sum);
    }
    if (optimizer_->partitioned())
        info(std::string(args_.parallel.zero_stage == 1 ? "ZeRO stage 1" : "BF16 optimizer") +
             ": each rank holds the optimizer states of about " + std::to_string(optimizer_->state_elements()) + " of " +
             std::to_string(model_->parameter_count()) + " parameters");
    // BMD's --sync-tp-duplicated-parameters (MixedFusedLayerNorm's layernorm_tp_auto_sync): the
    // LayerNorm weights and biases, of which every tensor-parallel rank holds a copy, averaged over
    // the group before they are used, so that replicas drifting apart (nondeterministic GPU
    // reductions) are pulled back together. Here once per step and before evaluation: the
    // parameters only change at the optimizer step, and averaging equal copies changes nothing.
    if (tp_size_ > 1 && args_.model.sync_tp_duplicated_parameters) {
        for (auto& p : model_->parameters())
            if (p.name.find("layernorm") != std::string::npos || p.name.rfind("word_embeddings.norm.", 0) == 0 ||
                p.layer == model::final_norm_layer_index(cfg_.num_layers))
                tp_norms_.push_back(p.tensor);
        info("--sync-tp-duplicated-parameters: " + std::to_string(tp_norms_.size()) +
             " LayerNorm tensors averaged over the tensor-parallel group before each step");
    }
    // The data-parallel gradient all-reduce, started bucket by bucket during the last backward pass.
    if (dp_ > 1) {
        // DDP's 25 MiB, or zero_optimization.reduce_bucket_size elements of the gradients' dtype (fp32 for bf16).
        const std::int64_t element = main_grads_ ? 4 : model_->parameters().front().tensor.element_size();
        const std::int64_t bucket_bytes =
            args_.parallel.reduce_bucket_elements ? *args_.parallel.reduce_bucket_elements * element : kGradientBucketBytes;
        reducer_ = std::make_unique<GradientReducer>(model_->parameters(), *comm_, 1.0 / static_cast<double>(dp_), bucket_bytes,
                                                     main_grads_.get());
        info("data-parallel gradients: " + std::to_string(reducer_->buckets()) + " all-reduce bucket(s) of at most " +
             std::to_string(bucket_bytes) + " bytes, " +
             (args_.parallel.overlap_grad_reduce ? "started during the backward pass" : "after the backward pass"));
    }
    scaler_ = LossScale(args_);
}

void Trainer::setup_observers() {
    // One carbon tracker per node (here: the process) covering its GPUs; CPU and RAM are measured
    // once per node, never per rank.
    if (!args_.logging.codecarbon_dir.empty() && launch_.local_rank == 0) {
        observe::CarbonTrackerConfig cc;
        // BigScience's codecarbon integration: one file per process that measures.
        if (world_ > 1) {
            char name[40];
            std::snprintf(name, sizeof name, "emissions-%03d.csv", launch_.rank);
            cc.output_file = name;
        }
        cc.output_dir = args_.logging.codecarbon_dir;
        cc.country_iso_code = options_.country_iso_code;
        cc.pue = options_.pue;
        cc.codecarbon_version = "mds-" + std::string(mds_version());
        // The node's GPUs: those of its local ranks.
        std::vector<unsigned> gpus;
        if (device_.is_cuda())
            for (int i = 0; i < std::min<int>(launch_.local_world_size, static_cast<int>(at::getNumGPUs())); ++i)
                gpus.push_back(static_cast<unsigned>(i));
        cc.gpu_indices = gpus;
        carbon_.emplace(cc);
        for (const auto& note : carbon_->take_new_notes()) print_info("codecarbon: " + note);
        print_info("codecarbon: " + carbon_->output_path() + ", " + carbon_->country_name() + " at " +
                   std::to_string(carbon_->carbon_intensity_g_per_kwh()) + " g/kWh, PUE " + std::to_string(options_.pue));
    }

    // TensorBoard and MLflow behind one add_scalar (metrics_log.h), on the last rank.
    std::unique_ptr<observe::TensorBoardWriter> tensorboard;
    if (!args_.logging.tensorboard_dir.empty() && log_rank_)
        tensorboard = std::make_unique<observe::TensorBoardWriter>(args_.logging.tensorboard_dir);
    auto mlflow = make_mlflow_logger();
    if (tensorboard || mlflow) tb_ = std::make_unique<MetricsLog>(std::move(tensorboard), std::move(mlflow));

    flops_shape_.num_layers = cfg_.num_layers;
    flops_shape_.hidden_size = cfg_.hidden_size;
    flops_shape_.padded_vocab_size = padded_;
    flops_shape_.seq_length = cfg_.seq_length;
    flops_shape_.checkpoint_activations = cfg_.checkpoint_activations;

    if (args_.curriculum && args_.curriculum->enabled) curriculum_.emplace(*args_.curriculum);
    alerts_.emplace(options_.alert);
    if (!options_.alert_command.empty()) alert_command_.emplace(options_.alert_command);
    setup_stragglers();  // a collective (the hosts): every rank
    setup_peak_tflops();
    setup_attention_backend();
    setup_profiler();
}

// --attention-backend: only the kernel asked for stays enabled in LibTorch's SDPA (a process-wide setting);
// the "attention:" line names the kernel the model's attention gets.
void Trainer::setup_attention_backend() {
    const auto& b = args_.model.attention_backend;
    if (b != "auto") {
        auto& ctx = at::globalContext();
        ctx.setSDPUseFlash(b == "flash");
        ctx.setSDPUseMemEfficient(false);
        ctx.setSDPUseCuDNN(b == "fused");
        ctx.setSDPUseMath(b == "unfused" || b == "local");
    }
    const auto kernel = model_->attention_kernel(mbs_, cfg_.seq_length, args_.data.sft);
    if (kernel.rfind("none", 0) == 0)
        throw UsageError("--attention-backend " + b + ": that kernel cannot run this model's attention on " + device_.str() +
                         " (" + model::precision_name(cfg_.precision) + ", head size " + std::to_string(cfg_.head_dim()) +
                         "): " + kernel);
    info("attention: " + kernel);
}

// --profile on the ranks of --profile-ranks (Megatron-LM's flags; step_profiler.h).
void Trainer::setup_profiler() {
    const auto& l = args_.logging;
    if (!l.profile) {
        if (l.use_pytorch_profiler) print_warning("--use-pytorch-profiler has no effect without --profile");
        return;
    }
    std::vector<int> ranks;
    for (const auto& r : l.profile_ranks.empty() ? std::vector<std::string>{"0"} : l.profile_ranks) {
        int v = -1;
        const auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), v);
        if (ec != std::errc() || end != r.data() + r.size() || v < 0 || v >= world_)
            throw UsageError("--profile-ranks " + r + ": expected a global rank from 0 to " + std::to_string(world_ - 1));
        ranks.push_back(v);
    }
    ProfileOptions o;
    o.pytorch = l.use_pytorch_profiler;
    o.step_start = l.profile_step_start;
    o.step_end = l.profile_step_end;
    o.trace_dir = l.tensorboard_dir.empty() ? "." : l.tensorboard_dir;
    o.cuda = device_.is_cuda();
    o.rank = launch_.rank;
    auto profiler = std::make_unique<StepProfiler>(o);  // checks the window on every rank; starts nothing
    if (std::find(ranks.begin(), ranks.end(), launch_.rank) == ranks.end()) return;
    if (!l.use_pytorch_profiler && !device_.is_cuda()) {
        print_warning("--profile without --use-pytorch-profiler marks a capture range for Nsight Systems, which a CPU "
                      "run has not: nothing is profiled (add --use-pytorch-profiler)");
        return;
    }
    profiler_ = std::move(profiler);
    if (iteration_ > o.step_start)
        print_warning("--profile-step-start " + std::to_string(o.step_start) + " is before iteration " +
                      std::to_string(iteration_) + ", where this run resumes: nothing is profiled");
}

// The MFU field's denominator: --peak-tflops, else the table's peak for the GPU's product name (NVML,
// as the carbon tracker reads it) in the training's precision; no MFU on a CPU or an unknown GPU.
void Trainer::setup_peak_tflops() {
    if (options_.peak_tflops > 0) {
        peak_tflops_ = options_.peak_tflops;
        info("> MFU against --peak-tflops " + python_float_repr(options_.peak_tflops) + " TFLOP/s per device");
        return;
    }
    if (!device_.is_cuda()) return;
    const auto nvml = observe::open_nvml_energy_reader();
    std::string name;
    if (nvml.reader && nvml.reader->device_count() > 0) {
        const unsigned count = nvml.reader->device_count();
        const auto local = static_cast<unsigned>(std::max(0, launch_.local_rank));
        name = nvml.reader->device_name(local < count ? local : 0);
    }
    const bool half = cfg_.precision != model::Precision::FP32;
    peak_tflops_ = observe::gpu_peak_tflops(name, half);
    if (peak_tflops_)
        info("> MFU against the " + name + "'s dense " + (half ? "bf16 / fp16" : "fp32") + " peak of " +
             observe::py_format_float(*peak_tflops_, 1, 'f') + " TFLOP/s (--peak-tflops overrides)");
    else
        info("> no MFU in the log line: the peak of GPU '" + (name.empty() ? std::string("unknown") : name) +
             "' is not in mds's table (give it with --peak-tflops)");
}

void Trainer::report_memory(const std::string& when) {
    if (!device_.is_cuda() || dp_rank_ != 0) return;
    const auto index = device_.has_index() ? device_.index() : c10::DeviceIndex(0);
    const auto s = at::accelerator::getDeviceStats(index);
    print_line(observe::format_memory_report(launch_.rank, when, s.allocated_bytes[0].current, s.allocated_bytes[0].peak,
                                             s.reserved_bytes[0].current, s.reserved_bytes[0].peak));
}

}  // namespace mds::trainer
