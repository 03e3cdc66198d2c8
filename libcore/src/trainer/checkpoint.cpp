#include "mds/trainer/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/pickle.h"
#include "mds/ckpt/torch_file.h"
#include "mds/data/blending.h"        // data_prefixes, data_weights
#include "mds/data/weighted_split.h"  // the weighted split paths args
#include "mds/model/gpt_model.h"
#include "mds/model/tensor_io.h"
#include "mds/trainer/comm.h"
#include "mds/trainer/optimizer.h"
#include "mds/util/cli.h"  // mds_version
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/safe_paths.h"  // filesystem_error_message

namespace mds::trainer {
namespace fs = std::filesystem;
using ckpt::PyValue;

namespace {

// The DeepSpeed version whose file layout mds writes (group_paddings, param_slice_mappings of
// fragment_address, BF16 optimizer keys): DeepSpeed's loaders parse it and require >= 0.6.
constexpr const char* kDeepSpeedFormatVersion = "0.7.0";
constexpr double kCheckpointVersion = 3.0;

// ---- Python values -------------------------------------------------------------------------------

PyValue str(std::string s) { return PyValue::str(std::move(s)); }
PyValue integer(std::int64_t v) { return PyValue::integer(v); }
PyValue floating(double v) { return PyValue::floating(v); }

PyValue ordered_dict() { return PyValue::object("collections", "OrderedDict", PyValue::tuple({})); }
void od_set(const PyValue& od, const std::string& key, PyValue value) { od.as_object().dict_items.set(key, std::move(value)); }

// An instance rebuilt as pickle protocol 2 writes plain classes: cls.__new__(cls), then BUILD with
// its __dict__ (argparse.Namespace, DeepSpeed's loss scalers and fragment_address dataclass).
PyValue instance(const std::string& module, const std::string& name, PyValue attributes) {
    auto o = PyValue::object(module, name, PyValue::tuple({}), /*newobj=*/true);
    o.as_object().has_state = true;
    o.as_object().state = std::move(attributes);
    return o;
}

PyValue torch_size(const std::vector<std::int64_t>& shape) {
    std::vector<PyValue> dims;
    for (auto d : shape) dims.push_back(integer(d));
    return PyValue::object("torch", "Size", PyValue::tuple({PyValue::tuple(std::move(dims))}));
}

PyValue from_json(const nlohmann::json& j) {
    switch (j.type()) {
    case nlohmann::json::value_t::null: return PyValue::none();
    case nlohmann::json::value_t::boolean: return PyValue::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return integer(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return integer(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case nlohmann::json::value_t::number_float: return floating(j.get<double>());
    case nlohmann::json::value_t::string: return str(j.get<std::string>());
    case nlohmann::json::value_t::array: {
        std::vector<PyValue> items;
        for (const auto& e : j) items.push_back(from_json(e));
        return PyValue::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
        auto d = PyValue::dict();
        for (const auto& [k, v] : j.items()) d.as_dict().set(k, from_json(v));
        return d;
    }
    default: return PyValue::none();
    }
}

// ---- MT19937 seeding (Python's random and numpy's legacy RandomState) -----------------------------

using MtState = std::array<std::uint32_t, 624>;

void init_genrand(MtState& mt, std::uint32_t s) {
    mt[0] = s;
    for (std::uint32_t i = 1; i < 624; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
}

PyValue mt_words(const MtState& mt) {
    std::vector<PyValue> words;
    for (auto w : mt) words.push_back(integer(w));
    return PyValue::tuple(std::move(words));
}

// ---- tensors -------------------------------------------------------------------------------------

std::span<const std::byte> bytes_of(const at::Tensor& t) {
    return {static_cast<const std::byte*>(t.data_ptr()), static_cast<std::size_t>(t.nbytes())};
}

// A CPU tensor holding a copy of a checkpoint tensor (any strides).
at::Tensor to_tensor(const ckpt::TorchTensor& t) {
    auto out = at::empty(t.shape, at::TensorOptions().dtype(model::to_scalar_type(t.dtype)));
    const auto data = t.gather();
    if (data.size() != static_cast<std::size_t>(out.nbytes())) throw Error("internal: tensor size mismatch");
    if (!data.empty()) std::memcpy(out.data_ptr(), data.data(), data.size());
    return out;
}

// The name DeepSpeed's PipelineModule gives a parameter (param_shapes, param_slice_mappings and
// universal checkpoint folders): the tied embedding under tied_modules.embed, the rest under
// their global layer index.
std::string ds_param_name(const model::Parameter& p) {
    if (p.layer == model::kEmbeddingLayer) return "tied_modules.embed." + p.name;
    return std::to_string(p.layer) + "." + p.name;
}

// ---- saving --------------------------------------------------------------------------------------

// A torch.save file built from tensors that stay alive until it is written.
class FileBuilder {
public:
    explicit FileBuilder(std::string path) : writer_(std::move(path), "cpu") {}
    PyValue tensor(const at::Tensor& t) {
        auto c = t.detach().to(at::kCPU).contiguous();
        keep_.push_back(c);
        return writer_.add_tensor(model::to_ckpt_dtype(c.scalar_type()), c.sizes().vec(), bytes_of(c));
    }
    // A flat fp32 tensor of the pieces (flattened, in order) followed by `padding` zeros, streamed.
    PyValue flat(std::vector<at::Tensor> pieces, std::int64_t padding) {
        std::int64_t numel = padding;
        for (const auto& p : pieces) numel += p.numel();
        return writer_.add_tensor(ckpt::DType::F32, {numel}, [pieces = std::move(pieces), padding](ckpt::TorchZipWriter& out) {
            for (const auto& p : pieces) {
                const auto c = p.detach().to(at::kCPU, at::kFloat).contiguous();
                out.write(bytes_of(c));
            }
            const std::vector<std::byte> zeros(static_cast<std::size_t>(padding) * 4);
            out.write(zeros);
        });
    }
    void finish(const PyValue& root) {
        writer_.finish(root);
        keep_.clear();
    }

private:
    ckpt::TorchSaveWriter writer_;
    std::vector<at::Tensor> keep_;
};

std::string decay_style_name(optim::LrDecayStyle s) { return optim::to_string(s); }

PyValue lr_scheduler_state(const optim::LrScheduleState& s) {
    // BMD's AnnealingLR.state_dict() keys, then megatron-core's extra ones (ignored by BMD).
    auto d = PyValue::dict();
    auto& m = d.as_dict();
    m.set("max_lr", floating(s.params.max_lr));
    m.set("warmup_steps", floating(s.params.lr_warmup_steps));
    m.set("num_steps", integer(s.num_steps));
    m.set("warmup_tokens", integer(s.warmup_tokens));
    m.set("num_tokens", integer(s.num_tokens));
    m.set("decay_style", str(decay_style_name(s.params.lr_decay_style)));
    m.set("decay_steps", integer(s.params.lr_decay_steps));
    m.set("min_lr", floating(s.params.min_lr));
    m.set("decay_tokens", s.params.lr_decay_tokens ? integer(*s.params.lr_decay_tokens) : PyValue::none());
    m.set("init_lr", floating(s.params.init_lr));
    m.set("start_wd", floating(s.params.start_wd));
    m.set("end_wd", floating(s.params.end_wd));
    m.set("wd_incr_steps", integer(s.params.wd_incr_steps));
    m.set("wd_incr_style", str(optim::to_string(s.params.wd_incr_style)));
    return d;
}

PyValue position_embedding_enum(const std::string& type) {
    const std::int64_t v = type == "rotary" ? 1 : type == "alibi" ? 3 : 2;
    return PyValue::object("megatron.enums", "PositionEmbeddingType", PyValue::tuple({integer(v)}));
}

PyValue optional_int(const std::optional<std::int64_t>& v) { return v ? integer(*v) : PyValue::none(); }
PyValue optional_str(const std::optional<std::string>& v) { return v ? str(*v) : PyValue::none(); }

PyValue ds_config(const train::TrainArgs& a);

PyValue boolean(bool v) { return PyValue::boolean(v); }
PyValue optional_float(const std::optional<double>& v) { return v ? floating(*v) : PyValue::none(); }
PyValue text_or_none(const std::string& s) { return s.empty() ? PyValue::none() : str(s); }
PyValue true_or_none(bool v) { return v ? boolean(true) : PyValue::none(); }  // store_true with default=None
PyValue text_list(const std::vector<std::string>& v) {
    std::vector<PyValue> items;
    for (const auto& s : v) items.push_back(str(s));
    return PyValue::list(std::move(items));
}
// --rampup-batch-size: argparse keeps its three values as strings (nargs='*', no type).
PyValue rampup_list(const optim::OptimizerConfig& o) {
    if (!o.rampup_batch_size) return PyValue::none();
    const auto& r = *o.rampup_batch_size;
    return PyValue::list({str(std::to_string(r.start_global_batch_size)), str(std::to_string(r.batch_size_increment)),
                          str(std::to_string(r.ramp_up_samples))});
}

// Megatron-DeepSpeed's args as an argparse.Namespace: every attribute BMD's parse_args and
// pretrain() leave on it, in its order, with its Python types: the flags mds-train takes from
// their values, the Megatron flags mds does not take at their defaults (giving one fails the
// parse), the derived ones as BMD derives them. The Megatron tools read them; BMD's
// check_checkpoint_args compares some (tokenizer_type defaults to pretrain_gpt.py's
// GPT2BPETokenizer).
PyValue megatron_args(const train::TrainArgs& a, const model::GptModel& model, const TrainingProgress& p) {
    auto d = PyValue::dict();
    auto& m = d.as_dict();
    auto set = [&m](const char* name, PyValue v) { m.set(name, std::move(v)); };
    auto given = [&a](const char* flag) { return a.flags_given.count(flag) > 0; };
    const auto& md = a.model;
    const auto& o = a.optimizer;
    const std::int64_t padded_vocab = model.config().padded_vocab_size;
    const std::int64_t tp = a.parallel.tensor_model_parallel_size, pp = a.parallel.pipeline_model_parallel_size;
    // The rank that saves this model-parallel rank's file: data-parallel rank 0 of Megatron's grid
    // (tensor fastest, then data, then pipeline).
    const std::int64_t rank = model.pipeline_stage().rank * a.parallel.data_parallel_size * tp + model.tensor_parallel().rank;
    // update_train_iters for --train-samples: the iterations the run computes (ramp-up included).
    std::optional<std::int64_t> train_iters = a.length.train_iters;
    if (!train_iters && p.train_iters > 0) train_iters = p.train_iters;
    const double billions_no_embedding = megatron_parameters_in_billions_no_embedding(model, tp * pp);
    set("num_layers", integer(md.num_layers));
    set("hidden_size", integer(md.hidden_size));
    set("ffn_hidden_size", integer(md.ffn_hidden_size.value_or(4 * md.hidden_size)));
    set("num_attention_heads", integer(md.num_attention_heads));
    set("kv_channels", integer(md.hidden_size / md.num_attention_heads));
    set("max_position_embeddings", integer(md.max_position_embeddings.value_or(md.seq_length)));
    set("make_vocab_size_divisible_by", integer(md.make_vocab_size_divisible_by));
    set("pad_vocab_size_to", optional_int(md.pad_vocab_size_to));
    set("layernorm_epsilon", floating(md.layernorm_epsilon));
    set("sync_tp_duplicated_parameters", boolean(md.sync_tp_duplicated_parameters));
    set("apply_residual_connection_post_layernorm", boolean(false));
    set("embed_layernorm", boolean(md.embed_layernorm));
    set("openai_gelu", boolean(false));
    set("onnx_safe", PyValue::none());
    set("bert_binary_head", boolean(true));
    set("position_embedding_type", position_embedding_enum(md.position_embedding_type));
    set("glu_activation", PyValue::none());
    set("kill_switch_path", text_or_none(a.exit.kill_switch_path));
    set("log_level", optional_str(a.logging.log_level));
    set("log_level_replica", optional_str(a.logging.log_level_replica));
    set("attention_dropout", floating(md.attention_dropout));
    set("hidden_dropout", floating(md.hidden_dropout));
    set("weight_decay", floating(o.weight_decay));
    set("clip_grad", floating(o.clip_grad));
    set("adam_beta1", floating(o.adam_beta1));
    set("adam_beta2", floating(o.adam_beta2));
    set("adam_eps", floating(o.adam_eps));
    set("sgd_momentum", floating(o.sgd_momentum));
    set("micro_batch_size", integer(o.micro_batch_size));
    set("global_batch_size", integer(o.global_batch_size.value_or(o.micro_batch_size * a.parallel.data_parallel_size)));
    set("rampup_batch_size", rampup_list(o));
    set("checkpoint_activations", boolean(md.checkpoint_activations));
    set("distribute_checkpointed_activations", boolean(false));
    set("checkpoint_num_layers", integer(md.checkpoint_num_layers));
    set("train_iters", optional_int(train_iters));
    set("train_samples", optional_int(a.length.train_samples));
    set("train_tokens", PyValue::none());
    set("log_interval", integer(a.logging.log_interval));
    set("exit_interval", optional_int(a.exit.exit_interval));
    set("exit_duration_in_mins", optional_int(a.exit.exit_duration_in_mins));
    set("tensorboard_dir", text_or_none(a.logging.tensorboard_dir));
    set("masked_softmax_fusion", boolean(true));
    set("bias_gelu_fusion", boolean(true));
    set("bias_dropout_fusion", boolean(true));
    set("optimizer", str(o.optimizer));
    set("use_bnb_optimizer", boolean(false));
    set("dataloader_type", str("single"));
    set("cpu_optimizer", boolean(false));
    set("cpu_torch_adam", boolean(false));
    set("codecarbon_dir", text_or_none(a.logging.codecarbon_dir));
    set("eval_only", PyValue::none());
    set("skip_train_iteration_range", PyValue::none());
    set("inference", boolean(false));
    set("abort_on_unmet_fused_kernel_constraints", boolean(md.abort_on_unmet_fused_kernel_constraints));
    set("pp_partition_method", optional_str(a.parallel.pp_partition_method));
    set("seed", integer(a.seed));
    set("init_method_std", floating(md.init_method_std));
    set("init_method_xavier_uniform", boolean(false));
    set("lr", floating(o.lr));
    set("lr_decay_style", str(o.lr_decay_style));
    set("lr_decay_iters", optional_int(a.length.train_iters ? std::optional<std::int64_t>(o.lr_decay_iters.value_or(*a.length.train_iters)) : o.lr_decay_iters));
    set("lr_decay_samples", optional_int(a.length.train_samples ? std::optional<std::int64_t>(o.lr_decay_samples.value_or(*a.length.train_samples)) : o.lr_decay_samples));
    set("lr_decay_tokens", optional_int(o.lr_decay_tokens));
    set("lr_warmup_fraction", optional_float(o.lr_warmup_fraction));
    set("lr_warmup_iters", integer(o.lr_warmup_iters));
    set("lr_warmup_samples", integer(o.lr_warmup_samples));
    set("min_lr", floating(o.min_lr));
    set("override_lr_scheduler", boolean(o.override_lr_scheduler));
    set("use_checkpoint_lr_scheduler", boolean(o.use_checkpoint_lr_scheduler));
    set("universal_checkpoint", boolean(false));
    set("save", text_or_none(a.checkpoint.save));
    set("save_interval", optional_int(a.checkpoint.save_interval));
    set("no_save_optim", true_or_none(a.checkpoint.no_save_optim));
    set("no_save_rng", true_or_none(a.checkpoint.no_save_rng));
    set("load", text_or_none(a.checkpoint.load));
    set("no_load_optim", true_or_none(a.checkpoint.no_load_optim));
    set("no_load_rng", true_or_none(a.checkpoint.no_load_rng));
    set("finetune", boolean(a.checkpoint.finetune));
    set("fp16", boolean(o.fp16));
    set("bf16", boolean(o.bf16));
    // Megatron's loss-scale flags as given (their defaults otherwise): under --deepspeed the fp16 section
    // of the DeepSpeed config sets the scaler, not these args.
    set("loss_scale", given("--loss-scale") ? optional_float(o.loss_scale) : PyValue::none());
    set("initial_loss_scale", given("--initial-loss-scale") ? floating(o.initial_loss_scale) : integer(4294967296));
    set("min_loss_scale", given("--min-loss-scale") ? floating(o.min_loss_scale) : floating(1.0));
    set("loss_scale_window", given("--loss-scale-window") ? floating(static_cast<double>(o.loss_scale_window)) : integer(1000));
    set("hysteresis", given("--hysteresis") ? integer(o.hysteresis) : integer(2));
    set("fp32_residual_connection", boolean(false));
    set("apply_query_key_layer_scaling", boolean(true));
    set("attention_softmax_in_fp32", boolean(false));
    set("accumulate_allreduce_grads_in_fp32", boolean(o.bf16));  // parse_args: bf16 accumulates and all-reduces in fp32
    set("fp16_lm_cross_entropy", boolean(false));
    set("tensor_model_parallel_size", integer(a.parallel.tensor_model_parallel_size));
    set("pipeline_model_parallel_size", integer(a.parallel.pipeline_model_parallel_size));
    set("num_layers_per_virtual_pipeline_stage", PyValue::none());
    set("distributed_backend", str(a.parallel.distributed_backend));
    set("DDP_impl", str("local"));
    set("use_contiguous_buffers_in_ddp", boolean(o.bf16));  // parse_args: bf16 accumulates and all-reduces in fp32
    set("scatter_gather_tensors_in_pipeline", boolean(true));
    set("local_rank", integer(rank));
    set("lazy_mpu_init", PyValue::none());
    set("use_cpu_initialization", PyValue::none());
    set("eval_iters", integer(a.logging.eval_iters));
    set("eval_interval", integer(a.logging.eval_interval));
    set("data_path", a.data.data_path.empty() ? PyValue::none() : text_list(a.data.data_path));
    // parse_args gives --data-path runs BMD's default split when none is given (Mode 2 keeps None).
    set("split", a.data.split ? str(*a.data.split) : a.data.data_path.empty() ? PyValue::none() : str("969, 30, 1"));
    // Data loading Mode 2: BMD's parse_data_paths keeps each group's paths, weights and ranges as
    // lists of strings (and the names); its -path action never stores the file's name (None).
    std::array<std::optional<std::vector<data::WeightedSplitGroup>>, 3> split_groups;
    for (int k = 0; k < 3; ++k) {
        const auto& values = a.data.weighted_split_paths[static_cast<std::size_t>(k)];
        if (!values.empty()) split_groups[static_cast<std::size_t>(k)] = data::parse_weighted_split_paths(data::weighted_split_flag(k), values);
    }
    auto group_lists = [&](int k, auto member) {
        const auto& g = split_groups[static_cast<std::size_t>(k)];
        if (!g) return PyValue::none();
        std::vector<PyValue> items;
        for (const auto& group : *g) items.push_back(text_list(group.*member));
        return PyValue::list(std::move(items));
    };
    set("train_weighted_split_paths", group_lists(0, &data::WeightedSplitGroup::paths));
    set("valid_weighted_split_paths", group_lists(1, &data::WeightedSplitGroup::paths));
    set("test_weighted_split_paths", group_lists(2, &data::WeightedSplitGroup::paths));
    set("train_weighted_split_paths_path", PyValue::none());
    set("valid_weighted_split_paths_path", PyValue::none());
    set("test_weighted_split_paths_path", PyValue::none());
    set("log_path", PyValue::none());
    set("vocab_file", text_or_none(a.data.vocab_file));
    set("merge_file", text_or_none(a.data.merge_file));
    set("vocab_extra_ids", integer(0));
    set("seq_length", integer(md.seq_length));
    set("encoder_seq_length", integer(md.seq_length));
    set("decoder_seq_length", PyValue::none());
    set("retriever_seq_length", integer(256));
    set("sample_rate", floating(1.0));
    set("mask_prob", floating(0.15));
    set("short_seq_prob", floating(0.1));
    set("mmap_warmup", boolean(false));
    set("num_workers", integer(a.data.num_workers));
    set("valid_num_workers", integer(a.data.valid_num_workers));
    set("tokenizer_type", str(a.data.tokenizer_type.value_or("GPT2BPETokenizer")));
    set("tokenizer_name_or_path", text_or_none(a.data.tokenizer_name_or_path));
    set("data_impl", str(a.data.data_impl));
    set("reset_position_ids", boolean(false));
    set("reset_attention_mask", boolean(false));
    set("eod_mask_loss", boolean(false));
    set("loss_on_targets_only", boolean(false));
    set("reweight_loss_based_on_position_frequency", boolean(false));
    set("noise_density", PyValue::none());
    set("mean_noise_span_length", PyValue::none());
    set("adlr_autoresume", boolean(false));
    set("adlr_autoresume_interval", integer(1000));
    set("ict_head_size", PyValue::none());
    set("biencoder_projection_dim", integer(0));
    set("biencoder_shared_query_context_model", boolean(false));
    set("ict_load", PyValue::none());
    set("bert_load", PyValue::none());
    set("titles_data_path", PyValue::none());
    set("query_in_block_prob", floating(0.1));
    set("use_one_sent_docs", boolean(false));
    set("evidence_data_path", PyValue::none());
    set("retriever_report_topk_accuracies", PyValue::list());
    set("retriever_score_scaling", boolean(false));
    set("block_data_path", PyValue::none());
    set("embedding_path", PyValue::none());
    set("indexer_batch_size", integer(128));
    set("indexer_log_interval", integer(1000));
    set("num_classes", integer(1000));
    set("img_dim", integer(224));
    set("num_channels", integer(3));
    set("patch_dim", integer(16));
    set("log_params_norm", boolean(a.logging.log_params_norm));
    set("log_num_zeros_in_grad", boolean(a.logging.log_num_zeros_in_grad));
    set("tensorboard_log_interval", integer(a.logging.tensorboard_log_interval));
    set("tensorboard_queue_size", integer(a.logging.tensorboard_queue_size));
    set("log_timers_to_tensorboard", boolean(a.logging.log_timers_to_tensorboard));
    set("log_batch_size_to_tensorboard", boolean(a.logging.log_batch_size_to_tensorboard));
    set("log_learning_rate_to_tensorboard", boolean(a.logging.log_learning_rate_to_tensorboard));
    set("log_loss_scale_to_tensorboard", boolean(a.logging.log_loss_scale_to_tensorboard));
    set("log_validation_ppl_to_tensorboard", boolean(a.logging.log_validation_ppl_to_tensorboard));
    set("zero_stage", integer(a.parallel.zero_stage));
    set("zero_reduce_scatter", boolean(false));
    set("zero_contigious_gradients", boolean(false));
    set("zero_reduce_bucket_size", floating(0.0));
    set("zero_allgather_bucket_size", floating(0.0));
    set("remote_device", str("none"));
    set("use_pin_memory", boolean(false));
    set("scattered_embeddings", boolean(false));
    set("split_transformers", boolean(false));
    set("memory_centric_tiled_linear", boolean(false));
    set("tile_factor", integer(1));
    set("deepspeed_activation_checkpointing", boolean(md.deepspeed_activation_checkpointing));
    set("partition_activations", boolean(false));
    set("contigious_checkpointing", boolean(false));
    set("checkpoint_in_cpu", boolean(false));
    set("synchronize_each_layer", boolean(false));
    set("profile_backward", boolean(false));
    set("deepspeed", boolean(a.parallel.deepspeed));
    set("deepspeed_config", text_or_none(a.parallel.deepspeed_config));
    set("deepscale", boolean(false));
    set("deepscale_config", PyValue::none());
    set("rank", integer(rank));
    set("world_size", integer(a.parallel.world_size.value_or(1)));
    set("data_parallel_size", integer(a.parallel.data_parallel_size));
    // Mode 1 sets the valid_/test_ ones to None; in Mode 2 those of the flags given exist, as lists.
    static const char* const split_prefix[3] = {"train_weighted_split_", "valid_weighted_split_", "test_weighted_split_"};
    for (int k = 0; k < 3; ++k) {
        const auto& g = split_groups[static_cast<std::size_t>(k)];
        const std::string pre = split_prefix[k];
        if (g) {
            std::vector<PyValue> names;
            for (const auto& group : *g) names.push_back(str(group.name));
            m.set(pre + "names", PyValue::list(std::move(names)));
            m.set(pre + "weights", group_lists(k, &data::WeightedSplitGroup::weights));
            m.set(pre + "splits", group_lists(k, &data::WeightedSplitGroup::splits));
        } else if (k > 0 && !a.data.data_path.empty()) {
            m.set(pre + "names", PyValue::none());
            m.set(pre + "weights", PyValue::none());
            m.set(pre + "splits", PyValue::none());
        }
    }
    set("virtual_pipeline_model_parallel_size", PyValue::none());
    set("params_dtype", PyValue::global("torch", o.fp16 ? "float16" : o.bf16 ? "bfloat16" : "float32"));
    set("consumed_train_samples", integer(p.consumed_train_samples));
    set("consumed_valid_samples", integer(p.consumed_valid_samples));
    set("consumed_train_tokens", integer(p.consumed_train_tokens));
    set("gigaflos_no_embeds", floating(p.gigaflos_no_embeds));
    set("curriculum_learning", boolean(a.curriculum && a.curriculum->enabled));  // the DeepSpeed config's "enabled"
    set("padded_vocab_size", integer(padded_vocab));
    if (a.parallel.deepspeed) set("deepspeed_configuration", ds_config(a));
    set("pretrain_causal_attention", boolean(true));
    set("iteration", integer(p.iteration));
    set("parameters_in_billions_no_embedding", floating(billions_no_embedding));
    set("do_train", integer(1));
    set("do_valid", boolean(p.do_valid));
    set("do_test", boolean(p.do_test));
    // training.py: the blended training datasets' prefixes and normalized weights (analyze_data_prefix).
    std::optional<data::DataPath> blended;
    if (a.data.data_path.size() > 1)
        blended = data::parse_data_path(a.data.data_path);
    else if (split_groups[0] && split_groups[0]->size() == 1 && split_groups[0]->front().paths.size() > 1)
        blended = data::weighted_split_data_path(split_groups[0]->front(), "--train-weighted-split-paths");
    if (blended) {
        std::vector<PyValue> weights;
        for (double w : blended->weights) weights.push_back(floating(w));
        set("data_prefixes", text_list(blended->prefixes));
        set("data_weights", PyValue::list(std::move(weights)));
    } else {
        set("data_prefixes", PyValue::none());
        set("data_weights", PyValue::none());
    }
    set("mds_version", str(mds_version()));
    return instance("argparse", "Namespace", d);
}

PyValue ds_config(const train::TrainArgs& a) {
    if (!a.parallel.deepspeed_config.empty()) {
        try {
            return from_json(nlohmann::json::parse(read_file(a.parallel.deepspeed_config)));
        } catch (const nlohmann::json::exception&) {
            // Validated when the run started; a file changed since is recorded as its path.
            return str(a.parallel.deepspeed_config);
        }
    }
    const auto& o = a.optimizer;
    nlohmann::json j = {{"train_micro_batch_size_per_gpu", o.micro_batch_size},
                        {"train_batch_size", o.global_batch_size.value_or(o.micro_batch_size)},
                        {"gradient_clipping", o.clip_grad},
                        {"zero_optimization", {{"stage", a.parallel.zero_stage}}},
                        {"fp16", {{"enabled", o.fp16}}},
                        {"bf16", {{"enabled", o.bf16}}}};
    return from_json(j);
}

at::Tensor generator_state(at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
}

// torch.cuda.manual_seed(seed)'s Philox state (seed, offset 0), for CPU runs: Megatron restores a
// cuda_rng_state unconditionally.
at::Tensor philox_seed_state(std::uint64_t seed) {
    auto t = at::zeros({16}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr(), &seed, sizeof seed);
    return t;
}

PyValue numpy_state(std::uint32_t seed) {
    const auto mt = numpy_random_seed_state(seed);
    std::string raw(624 * 4, '\0');
    std::memcpy(raw.data(), mt.data(), raw.size());  // little-endian hosts only (checked at build)
    auto dtype = PyValue::object("numpy", "dtype", PyValue::tuple({str("u4"), PyValue::boolean(false), PyValue::boolean(true)}));
    dtype.as_object().has_state = true;
    dtype.as_object().state = PyValue::tuple({integer(3), str("<"), PyValue::none(), PyValue::none(), PyValue::none(),
                                              integer(-1), integer(-1), integer(0)});
    auto array = PyValue::object("numpy.core.multiarray", "_reconstruct",
                                 PyValue::tuple({PyValue::global("numpy", "ndarray"), PyValue::tuple({integer(0)}),
                                                 PyValue::bytes("b")}));
    array.as_object().has_state = true;
    array.as_object().state = PyValue::tuple({integer(1), PyValue::tuple({integer(624)}), dtype, PyValue::boolean(false),
                                              PyValue::bytes(std::move(raw))});
    return PyValue::tuple({str("MT19937"), array, integer(624), integer(0), floating(0.0)});
}

PyValue deepspeed_loss_scaler(const train::TrainArgs& a, const TrainingProgress& p) {
    auto d = PyValue::dict();
    auto& m = d.as_dict();
    if (p.deepspeed_scaler || p.megatron_scaler) {
        const auto cfg = optim::deepspeed_loss_scaler_config(a.optimizer);
        const double scale = p.deepspeed_scaler ? p.deepspeed_scaler->cur_scale : static_cast<double>(p.megatron_scaler->scale);
        m.set("cur_scale", floating(scale));
        m.set("dynamic", PyValue::boolean(cfg.dynamic));
        if (cfg.dynamic) {
            m.set("cur_iter", integer(p.deepspeed_scaler ? p.deepspeed_scaler->cur_iter : 0));
            m.set("last_overflow_iter", integer(p.deepspeed_scaler ? p.deepspeed_scaler->last_overflow_iter : -1));
            m.set("scale_factor", floating(cfg.scale_factor));
            m.set("scale_window", integer(cfg.scale_window));
            m.set("min_scale", floating(cfg.min_scale));
            m.set("delayed_shift", integer(cfg.hysteresis));
            m.set("cur_hysteresis", integer(p.deepspeed_scaler ? p.deepspeed_scaler->cur_hysteresis : cfg.hysteresis));
            m.set("consecutive_hysteresis", PyValue::boolean(cfg.consecutive_hysteresis));
            m.set("raise_error_at_min_scale", PyValue::boolean(cfg.raise_error_at_min_scale));
            m.set("dtype", PyValue::global("torch", "float16"));
            return instance("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler", d);
        }
        return instance("deepspeed.runtime.fp16.loss_scaler", "LossScaler", d);
    }
    m.set("cur_scale", floating(1.0));
    m.set("dynamic", PyValue::boolean(false));
    return instance("deepspeed.runtime.fp16.loss_scaler", "LossScaler", d);
}

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

// The embedding module's parameters other than the word embeddings, in the model's order.
std::vector<model::Parameter> tied_extras(const model::GptModel& model) {
    const auto& c = model.config();
    std::vector<model::Parameter> out;
    // On the model's device: the pipeline all-reduce below runs there (NCCL wants GPU tensors).
    auto f32 = at::TensorOptions().dtype(at::kFloat).device(model.device());
    if (c.embed_layernorm) {
        out.push_back({model::kEmbeddingLayer, "word_embeddings.norm.weight", at::zeros({c.hidden_size}, f32),
                       model::TpSplit::Replicated, false, true});
        out.push_back({model::kEmbeddingLayer, "word_embeddings.norm.bias", at::zeros({c.hidden_size}, f32),
                       model::TpSplit::Replicated, false, true});
    }
    if (c.position_embedding == model::PositionEmbedding::Absolute)
        out.push_back({model::kEmbeddingLayer, "position_embeddings.weight",
                       at::zeros({c.max_position_embeddings, c.hidden_size}, f32), model::TpSplit::Replicated, true, true});
    return out;
}

// A collective over the pipeline group (every stage calls it when PP > 1): the first stage's values
// of the extra tied parameters, for the last stage. Empty on other stages and without PP.
TiedModule tied_module(const model::GptModel& model, Communicator* comm) {
    TiedModule t;
    const auto& params = model.parameters();
    const auto stage = model.pipeline_stage();
    if (!comm || stage.first() || !stage.last()) {
        if (comm && stage.size > 1) {
            // Contribute to the sum: the first stage its values, middle stages zeros.
            auto extras = tied_extras(model);
            std::vector<at::Tensor> values;
            for (auto& e : extras) {
                if (stage.first())
                    for (const auto& p : params)
                        if (p.layer == model::kEmbeddingLayer && p.name == e.name) e.tensor.copy_(p.tensor.detach());
                values.push_back(e.tensor);
            }
            if (!values.empty()) comm->all_reduce_sum(values, Group::Pipeline);
        }
        return t;
    }
    auto extras = tied_extras(model);
    std::vector<at::Tensor> values;
    for (auto& e : extras) values.push_back(e.tensor);
    if (!values.empty()) comm->all_reduce_sum(values, Group::Pipeline);
    for (std::size_t i = 0; i < params.size(); ++i) {
        t.params.push_back(params[i]);
        t.origin.push_back(static_cast<int>(i));
        if (params[i].tied_copy)
            for (auto& e : extras) {
                t.params.push_back(e);
                t.origin.push_back(-1);
            }
    }
    return t;
}

// DeepSpeed's partition `rank` of `count` of the last stage's flat groups with the tied module's
// extra parameters (TiedModule). The stage's own elements come from the optimizer's state: all on
// this rank when it is not partitioned; under ZeRO-1 or the BF16 optimizer the extra tensors shift
// DeepSpeed's partition boundaries away from the optimizer's, and the data-parallel ranks exchange
// the pieces each one lacks, point to point (a collective over the data-parallel group: every rank of
// the last stage calls it). The extra parameters carry the first stage's values and zero moments.
StatePartition with_tied_module(const AdamOptimizer& opt, const std::vector<model::Parameter>& params,
                                const TiedModule& tied, int rank, int count, Communicator* comm) {
    StatePartition out;
    out.rank = rank;
    out.count = count;
    out.groups = optimizer_groups(tied.params, count);
    const auto ds = partition_groups(out.groups, tied.params, count);
    const bool partitioned = opt.partitioned() && count > 1;
    const StatePartition mine = partitioned ? opt.state_partition(rank, count) : opt.state_partition(0, 1);

    // Where each parameter's elements are: [param] -> (rank, fragment); all here when not partitioned.
    std::map<std::size_t, std::vector<std::pair<int, Fragment>>> held;
    if (partitioned) {
        const auto layout = partition_groups(optimizer_groups(params, count), params, count);
        for (const auto& group : layout)
            for (int r = 0; r < count; ++r)
                for (const auto& f : group[static_cast<std::size_t>(r)]) held[f.param].emplace_back(r, f);
    } else {
        for (const auto& group : mine.slices)
            for (const auto& sl : group) held[sl.where.param].emplace_back(rank, sl.where);
    }
    std::map<std::size_t, std::vector<const StateSlice*>> local;
    for (const auto& group : mine.slices)
        for (const auto& sl : group) local[sl.where.param].push_back(&sl);
    auto local_piece = [&](std::size_t param, std::int64_t lo, std::int64_t hi, int which) {
        for (const auto* sl : local.at(param))
            if (lo >= sl->where.offset && hi <= sl->where.offset + sl->where.length) {
                const auto& t = which == 0 ? sl->master : which == 1 ? sl->exp_avg : sl->exp_avg_sq;
                return t.reshape({-1}).narrow(0, lo - sl->where.offset, hi - lo);
            }
        throw Error("checkpoint: parameter " + params[param].full_name() + " elements [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + ") are not in this rank's optimizer partition");
    };

    // Every piece any rank needs, in one order all ranks compute alike: (source, target, param, range).
    struct Piece {
        int src = 0, dst = 0;
        std::size_t fragment = 0;  // which of the target's fragments (its own parameters', in order)
        std::size_t param = 0;
        std::int64_t lo = 0, hi = 0;
    };
    std::vector<Piece> pieces;
    const int first_dst = partitioned ? 0 : rank, end_dst = partitioned ? count : rank + 1;
    for (int r = first_dst; r < end_dst; ++r) {
        std::size_t fragment = 0;
        for (const auto& group : ds)
            for (const auto& f : group[static_cast<std::size_t>(r)]) {
                const int origin = tied.origin[f.param];
                if (origin < 0) continue;
                const auto param = static_cast<std::size_t>(origin);
                for (const auto& [src, h] : held[param]) {
                    const std::int64_t lo = std::max(f.offset, h.offset), hi = std::min(f.offset + f.length, h.offset + h.length);
                    if (hi > lo) pieces.push_back({src, r, fragment, param, lo, hi});
                }
                ++fragment;
            }
    }

    // The exchange: one message each way between two ranks, masters then first then second moments.
    std::map<int, at::Tensor> received;
    if (partitioned) {
        const auto members = comm->members(Group::Data);
        const auto f32 = mine.slices.empty() || mine.slices[0].empty()
                             ? at::TensorOptions().dtype(at::kFloat).device(params.at(0).tensor.device())
                             : mine.slices[0][0].master.options();
        std::vector<Communicator::Transfer> transfers;
        for (int peer = 0; peer < count; ++peer) {
            if (peer == rank) continue;
            std::vector<at::Tensor> outgoing[3];
            std::int64_t incoming = 0;
            for (const auto& pc : pieces) {
                if (pc.src == rank && pc.dst == peer)
                    for (int w = 0; w < 3; ++w) outgoing[w].push_back(local_piece(pc.param, pc.lo, pc.hi, w));
                if (pc.src == peer && pc.dst == rank) incoming += pc.hi - pc.lo;
            }
            if (!outgoing[0].empty()) {
                std::vector<at::Tensor> all;
                for (auto& o : outgoing) all.insert(all.end(), o.begin(), o.end());
                transfers.push_back({at::cat(all), members[static_cast<std::size_t>(peer)], true, 0});
            }
            if (incoming > 0) {
                received[peer] = at::empty({3 * incoming}, f32);
                transfers.push_back({received[peer], members[static_cast<std::size_t>(peer)], false, 0});
            }
        }
        comm->exchange(transfers, Group::Data);
    }

    // This rank's partition, fragment by fragment.
    std::map<int, std::int64_t> read, total;  // per source: elements taken so far, and in all
    for (const auto& pc : pieces)
        if (pc.dst == rank && pc.src != rank) total[pc.src] += pc.hi - pc.lo;
    std::size_t next = 0, fragment = 0;
    while (next < pieces.size() && pieces[next].dst != rank) ++next;
    for (std::size_t g = 0; g < out.groups.size(); ++g) {
        out.partition_numel.push_back((out.groups[g].numel + out.groups[g].padding) / count);
        out.slices.emplace_back();
        for (const auto& f : ds[g][static_cast<std::size_t>(rank)]) {
            const int origin = tied.origin[f.param];
            if (origin < 0) {
                const auto v = tied.params[f.param].tensor.reshape({-1}).narrow(0, f.offset, f.length);
                const auto zeros = at::zeros({f.length}, v.options());
                out.slices.back().push_back({f, v, zeros, zeros});
                continue;
            }
            StateSlice sl{f, {}, {}, {}};
            at::Tensor* dst[3] = {&sl.master, &sl.exp_avg, &sl.exp_avg_sq};
            std::vector<at::Tensor> parts[3];
            std::int64_t covered = 0;
            for (; next < pieces.size() && pieces[next].dst == rank && pieces[next].fragment == fragment; ++next) {
                const auto& pc = pieces[next];
                const std::int64_t n = pc.hi - pc.lo;
                for (int w = 0; w < 3; ++w)
                    parts[w].push_back(pc.src == rank ? local_piece(pc.param, pc.lo, pc.hi, w)
                                                      : received.at(pc.src).narrow(0, w * total[pc.src] + read[pc.src], n));
                read[pc.src] += n;
                covered += n;
            }
            if (covered != f.length)
                throw Error("checkpoint: parameter " + params[static_cast<std::size_t>(origin)].full_name() + " has " +
                            std::to_string(covered) + " of " + std::to_string(f.length) + " elements of its DeepSpeed partition");
            for (int w = 0; w < 3; ++w) *dst[w] = parts[w].size() == 1 ? parts[w][0] : at::cat(parts[w]);
            out.slices.back().push_back(sl);
            ++fragment;
        }
    }
    return out;
}

// The optimizer file of one data-parallel rank: BF16_Optimizer.state_dict() (bf16) or
// DeepSpeedZeroOptimizer's (stage 1), holding that rank's partition of each flat group; fragment
// addresses are relative to the partition, and the last partition carries the group's padding.
void write_optimizer_file(const std::string& path, const train::TrainArgs& a, const std::vector<model::Parameter>& params,
                          const AdamOptimizer& opt, const StatePartition& part, const TrainingProgress& p) {
    FileBuilder file(path);
    const bool bf16 = a.optimizer.bf16;
    auto state = PyValue::dict();
    std::vector<PyValue> param_groups, fp32_groups, mappings, paddings, counts;
    for (std::size_t g = 0; g < part.groups.size(); ++g) {
        const auto& grp = part.groups[g];
        std::vector<at::Tensor> master, m1, m2;
        auto mapping = ordered_dict();
        std::int64_t held = 0;
        for (const auto& s : part.slices[g]) {
            master.push_back(s.master);
            m1.push_back(s.exp_avg);
            m2.push_back(s.exp_avg_sq);
            auto address = PyValue::dict();
            address.as_dict().set("numel", integer(s.where.length));
            address.as_dict().set("start", integer(s.where.part_offset));
            od_set(mapping, ds_param_name(params[s.where.param]),
                   instance("deepspeed.runtime.bf16_optimizer", "fragment_address", address));
            held += s.where.length;
        }
        const std::int64_t padding = part.partition_numel[g] - held;
        auto moments = PyValue::dict();
        moments.as_dict().set("exp_avg", file.flat(m1, padding));
        moments.as_dict().set("exp_avg_sq", file.flat(m2, padding));
        state.as_dict().set(integer(static_cast<std::int64_t>(g)), moments);
        auto pg = PyValue::dict();
        auto& pm = pg.as_dict();
        pm.set("lr", floating(p.current_lr));
        pm.set("bias_correction", PyValue::boolean(true));
        pm.set("betas", PyValue::tuple({floating(a.optimizer.adam_beta1), floating(a.optimizer.adam_beta2)}));
        pm.set("eps", floating(a.optimizer.adam_eps));
        pm.set("weight_decay", floating(grp.weight_decay ? p.current_weight_decay : 0.0));
        pm.set("step", integer(opt.steps_taken()));
        pm.set("params", PyValue::list({integer(static_cast<std::int64_t>(g))}));
        param_groups.push_back(pg);
        // The BF16 optimizer keeps the padding in its fp32 partitions; ZeRO 1/2 strips it.
        fp32_groups.push_back(file.flat(master, bf16 ? padding : 0));
        mappings.push_back(mapping);
        paddings.push_back(integer(padding));
        counts.push_back(integer(part.count));
    }
    auto base = PyValue::dict();
    base.as_dict().set("state", state);
    base.as_dict().set("param_groups", PyValue::list(std::move(param_groups)));

    auto osd = PyValue::dict();
    auto& o = osd.as_dict();
    if (!bf16) {
        o.set("loss_scaler", deepspeed_loss_scaler(a, p));
        o.set("dynamic_loss_scale", PyValue::boolean((p.deepspeed_scaler || p.megatron_scaler) &&
                                                     optim::deepspeed_loss_scaler_config(a.optimizer).dynamic));
        o.set("overflow", PyValue::boolean(false));
    }
    o.set("clip_grad", floating(a.optimizer.clip_grad));
    o.set("base_optimizer_state", base);
    o.set("single_partition_of_fp32_groups", PyValue::list(std::move(fp32_groups)));
    if (!bf16) o.set("zero_stage", PyValue::object("deepspeed.runtime.zero.config", "ZeroStageEnum", PyValue::tuple({integer(1)})));
    o.set("group_paddings", PyValue::list(std::move(paddings)));
    o.set("partition_count", PyValue::list(std::move(counts)));
    o.set("ds_version", str(kDeepSpeedFormatVersion));
    o.set("param_slice_mappings", PyValue::list(std::move(mappings)));
    if (p.megatron_scaler) {
        // Megatron's DynamicGradScaler.state_dict(), for an exact resume of a non-DeepSpeed fp16 run.
        auto gs = PyValue::dict();
        gs.as_dict().set("scale", floating(p.megatron_scaler->scale));
        gs.as_dict().set("growth_tracker", integer(p.megatron_scaler->growth_tracker));
        gs.as_dict().set("hysteresis_tracker", integer(p.megatron_scaler->hysteresis_tracker));
        o.set("grad_scaler", gs);
    }
    auto root = PyValue::dict();
    root.as_dict().set("optimizer_state_dict", osd);
    root.as_dict().set("ds_config", ds_config(a));
    root.as_dict().set("ds_version", str(kDeepSpeedFormatVersion));
    file.finish(root);
}

// DeepSpeed's model-parallel rank of a TP x PP grid: the mp_rank_MM of the file names.
int model_parallel_rank(const model::GptModel& model) {
    return model.pipeline_stage().rank * model.tensor_parallel().size + model.tensor_parallel().rank;
}

void write_mp_rank_file(const std::string& path, const train::TrainArgs& a, std::int64_t original_vocab,
                        const model::GptModel& model, const TrainingProgress& p, const TiedModule& tied) {
    const int tp_rank = model.tensor_parallel().rank;
    FileBuilder file(path);
    const auto& params = tied.params.empty() ? model.parameters() : tied.params;
    const std::int64_t padded = model.config().padded_vocab_size;
    auto root = PyValue::dict();
    auto& r = root.as_dict();
    // DeepSpeed's keys (engine._save_checkpoint), pipeline engine: the weights are in the layer files.
    r.set("module", PyValue::none());
    r.set("buffer_names", PyValue::list());
    r.set("optimizer", PyValue::none());
    std::vector<PyValue> shapes;
    for (const auto& g : optimizer_groups(params, 1)) {
        auto od = ordered_dict();
        for (auto i : g.params) od_set(od, ds_param_name(params[i]), torch_size(params[i].tensor.sizes().vec()));
        shapes.push_back(od);
    }
    r.set("param_shapes", PyValue::list(std::move(shapes)));
    r.set("frozen_param_shapes", PyValue::none());
    r.set("shared_params", PyValue::dict());
    r.set("frozen_param_fragments", PyValue::none());
    r.set("lr_scheduler", lr_scheduler_state(p.lr));
    r.set("data_sampler", PyValue::none());
    r.set("random_ltd", PyValue::none());
    r.set("sparse_tensor_module_names", PyValue::object("builtins", "set", PyValue::tuple({PyValue::list()})));
    r.set("skipped_steps", integer(p.skipped_steps));
    r.set("global_steps", integer(p.iteration));
    r.set("global_samples", integer(p.consumed_train_samples));
    r.set("dp_world_size", integer(a.parallel.data_parallel_size));
    r.set("mp_world_size", integer(a.parallel.tensor_model_parallel_size * a.parallel.pipeline_model_parallel_size));
    auto dims = PyValue::dict();
    dims.as_dict().set("pp_degree", integer(a.parallel.pipeline_model_parallel_size));
    dims.as_dict().set("tp_degree", integer(a.parallel.tensor_model_parallel_size));
    r.set("checkpoint_parallel_dimensions", dims);
    r.set("ds_config", ds_config(a));
    r.set("ds_version", str(kDeepSpeedFormatVersion));
    // Megatron's client state (BMD save_checkpoint).
    r.set("args", megatron_args(a, model, p));
    r.set("checkpoint_version", floating(kCheckpointVersion));
    r.set("iteration", integer(p.iteration));
    r.set("tokens", integer(p.consumed_train_tokens));
    auto info = PyValue::dict();
    info.as_dict().set("padded_vocab_size", integer(padded));
    info.as_dict().set("original_vocab_size", integer(original_vocab));
    r.set("checkpoint_info", info);
    if (!a.checkpoint.no_save_rng) {
        const auto seed = static_cast<std::uint64_t>(a.seed);
        r.set("random_rng_state", PyValue::tuple({integer(3), [&] {
                                                      auto words = mt_words(python_random_seed_state(seed)).as_tuple();
                                                      words.push_back(integer(624));
                                                      return PyValue::tuple(std::move(words));
                                                  }(),
                                                  PyValue::none()}));
        r.set("np_rng_state", numpy_state(static_cast<std::uint32_t>(seed)));
        r.set("torch_rng_state", file.tensor(generator_state(at::detail::getDefaultCPUGenerator())));
        // The model's dropout generators (GptModel::dropout_generator): on the CPU, CPU states in
        // both places, as the real program's CPU runs save them; on a GPU the device's state, and
        // for the tracker (not kept apart there) model_parallel_cuda_manual_seed's seed:
        // seed + 100 × pipeline rank + 2718 + tensor-parallel rank.
        r.set("cuda_rng_state", file.tensor(generator_state(model.dropout_generator())));
        auto tracker = PyValue::dict();
        const std::uint64_t tracker_seed = seed + 100 * static_cast<std::uint64_t>(model.pipeline_stage().rank) + 2718 +
                                           static_cast<std::uint64_t>(tp_rank);
        tracker.as_dict().set("model-parallel-rng", file.tensor(model.separate_attention_dropout_generator()
                                                                    ? generator_state(model.attention_dropout_generator())
                                                                    : philox_seed_state(tracker_seed)));
        r.set("rng_tracker_states", tracker);
    }
    r.set("mds_version", str(mds_version()));
    file.finish(root);
}

void write_layer_files(const std::string& dir, const model::GptModel& model) {
    const auto& params = model.parameters();
    std::size_t i = 0;
    while (i < params.size()) {
        const int layer = params[i].layer;
        if (params[i].tied_copy) {  // the first stage saves the tied embeddings (DeepSpeed: layer_01 only)
            ++i;
            continue;
        }
        FileBuilder file((fs::path(dir) / ckpt::ds_layer_file(layer, model.tensor_parallel().rank)).string());
        auto od = ordered_dict();
        for (; i < params.size() && params[i].layer == layer; ++i) od_set(od, params[i].name, file.tensor(params[i].tensor));
        file.finish(od);
    }
}

std::uint64_t folder_bytes(const fs::path& dir) {
    std::uint64_t n = 0;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file()) n += e.file_size();
    return n;
}

// ---- loading -------------------------------------------------------------------------------------

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

double number(const PyValue& v) { return v.type() == ckpt::PyType::Float ? v.as_float() : static_cast<double>(v.as_int()); }

}  // namespace

// ---- seeds ---------------------------------------------------------------------------------------

std::array<std::uint32_t, 624> numpy_random_seed_state(std::uint32_t seed) {
    MtState mt{};
    init_genrand(mt, seed);
    return mt;
}

std::array<std::uint32_t, 624> python_random_seed_state(std::uint64_t seed) {
    // random.seed(n) for an int: init_by_array over the 32-bit words of |n|, least significant first.
    std::vector<std::uint32_t> key;
    for (std::uint64_t v = seed; v != 0; v >>= 32) key.push_back(static_cast<std::uint32_t>(v));
    if (key.empty()) key.push_back(0);
    MtState mt{};
    init_genrand(mt, 19650218u);
    std::uint32_t i = 1, j = 0;
    const auto n = static_cast<std::uint32_t>(key.size());
    for (std::uint32_t k = std::max<std::uint32_t>(624, n); k > 0; --k) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + j;
        ++i;
        ++j;
        if (i >= 624) {
            mt[0] = mt[623];
            i = 1;
        }
        if (j >= n) j = 0;
    }
    for (std::uint32_t k = 623; k > 0; --k) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - i;
        ++i;
        if (i >= 624) {
            mt[0] = mt[623];
            i = 1;
        }
    }
    mt[0] = 0x80000000u;
    return mt;
}

double megatron_parameters_in_billions_no_embedding(const model::GptModel& model, std::int64_t model_parallel_size) {
    std::int64_t n = 0;
    for (const auto& p : model.parameters()) {
        const bool embedding = p.layer == model::kEmbeddingLayer &&
                               (p.name == "word_embeddings.weight" || p.name == "position_embeddings.weight");
        if (!embedding) n += p.tensor.numel();
    }
    const auto stage = model.pipeline_stage();
    if (stage.last() && !stage.first() && model.config().embed_layernorm) n += 2 * model.config().hidden_size;
    return static_cast<double>(n * model_parallel_size) / 1e9;
}

// ---- save ----------------------------------------------------------------------------------------

CheckpointSaveInfo save_checkpoint(const train::TrainArgs& args, std::int64_t original_vocab_size,
                                   const model::GptModel& model, const AdamOptimizer& optimizer,
                                   const TrainingProgress& progress, Communicator* comm) {
    const auto start = std::chrono::steady_clock::now();
    c10::NoGradGuard no_grad;
    const fs::path root = args.checkpoint.save;
    CheckpointSaveInfo info;
    info.tag = ckpt::ds_tag(progress.iteration);
    info.directory = (root / info.tag).string();
    // Several processes: rank 0 prepares and publishes the folder, every data-parallel rank writes its
    // optimizer partition into it. A failure anywhere fails the save everywhere, once every rank is
    // done with its part, and leaves the previous checkpoint and `latest` untouched.
    const bool leader = !comm || comm->rank() == 0;
    const int dp = comm ? static_cast<int>(comm->members(Group::Data).size()) : 1;
    const int dp_rank = comm ? comm->coordinates().dp : 0;
    const int mp_rank = model_parallel_rank(model);
    std::string error;
    auto attempt = [&](const std::function<void()>& work) {
        if (!error.empty()) return;
        try {
            work();
        } catch (const fs::filesystem_error& e) {
            error = "saving the checkpoint to --save " + args.checkpoint.save + ": " + filesystem_error_message(e);
        } catch (const std::exception& e) {
            error = e.what();
        }
    };
    // Returns the maxima of `values` over the ranks after checking that no rank failed so far.
    auto agree = [&](std::vector<double> values, const char* stage) {
        values.push_back(error.empty() ? 0.0 : 1.0);
        if (comm) values = comm->max(std::move(values), Group::World);
        if (values.back() > 0)
            throw Error(!error.empty() ? error : "saving " + info.directory + " failed on another rank while " + stage +
                                                     " (its error says why)");
        values.pop_back();
        return values;
    };

    fs::path tmp;
    double tmp_id = 0;
    if (leader)
        attempt([&] {
            fs::create_directories(root);
            // Leftovers of saves that were killed: only one process prepares a checkpoint folder.
            std::vector<fs::path> stale;
            for (const auto& e : fs::directory_iterator(root)) {
                const auto name = e.path().filename().string();
                if (name.rfind(".global_step", 0) == 0 &&
                    (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos))
                    stale.push_back(e.path());
            }
            for (const auto& p : stale) remove_tree(p.string());
            tmp_id = static_cast<double>(::getpid());
            fs::create_directories(root / ("." + info.tag + ".tmp-" + std::to_string(::getpid())));
        });
    tmp_id = agree({tmp_id}, "preparing the folder")[0];
    tmp = root / ("." + info.tag + ".tmp-" + std::to_string(static_cast<long long>(tmp_id)));
    auto discard = [&] {
        if (!leader) return;
        try {
            remove_tree(tmp.string());
        } catch (const Error&) {
            // The save's own error is the one to report.
        }
    };
    // The last stage's tied module as DeepSpeed saves it, and this rank's optimizer partition in
    // DeepSpeed's groups (collectives: every rank takes part, before any file is written).
    const TiedModule tied = tied_module(model, comm);
    std::optional<StatePartition> tied_part;
    if (!tied.params.empty() && !args.checkpoint.no_save_optim)
        tied_part = with_tied_module(optimizer, model.parameters(), tied, dp_rank, dp, comm);
    if (dp_rank == 0)  // one copy of each model-parallel (TP x PP) shard
        attempt([&] {
            write_layer_files(tmp.string(), model);
            write_mp_rank_file((tmp / ckpt::ds_mp_rank_file(mp_rank)).string(), args, original_vocab_size, model, progress, tied);
        });
    if (!args.checkpoint.no_save_optim)
        attempt([&] {
            const auto part = optimizer.state_partition(dp_rank, dp);
            const std::string file = (tmp / ckpt::ds_optim_file(args.optimizer.bf16, dp_rank, mp_rank)).string();
            if (!tied_part)
                write_optimizer_file(file, args, model.parameters(), optimizer, part, progress);
            else
                write_optimizer_file(file, args, tied.params, optimizer, *tied_part, progress);
        });
    try {
        agree({}, "writing its files");
    } catch (...) {
        discard();
        throw;
    }
    if (leader)
        attempt([&] {
            sync_directory(tmp.string());
            info.bytes = folder_bytes(tmp);
            const fs::path final_dir = root / info.tag;
            if (fs::exists(final_dir)) {
                // Saving the same step again (e.g. a rerun): the old copy goes aside until the new one is in place.
                const fs::path old = root / ("." + info.tag + ".old-" + std::to_string(::getpid()));
                remove_tree(old.string());
                fs::rename(final_dir, old);
                fs::rename(tmp, final_dir);
                remove_tree(old.string());
            } else {
                fs::rename(tmp, final_dir);
            }
            sync_directory(root.string());
            ckpt::write_latest_tag(root.string(), info.tag);
        });
    try {
        agree({}, "publishing the folder");
    } catch (...) {
        discard();
        throw;
    }
    info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return info;
}

// ---- load ----------------------------------------------------------------------------------------

struct CheckpointLoader::Impl {
    const train::TrainArgs* args = nullptr;
    fs::path dir;
    std::string dir_text;
    std::unique_ptr<ckpt::TorchFile> mp_rank;  // this model-parallel rank's
    std::vector<int> layers;  // on-disk layer indices of every stage, sorted
    int tp_rank = 0, mp = 0;  // this process's tensor-parallel rank and DeepSpeed model-parallel rank
};

CheckpointLoader::CheckpointLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointLoader::~CheckpointLoader() = default;

std::unique_ptr<CheckpointLoader> CheckpointLoader::open(const train::TrainArgs& args, int tp_rank, int pp_rank) {
    const std::string& root = args.checkpoint.load;
    // Megatron-DeepSpeed (DeepSpeed's load_checkpoint) warns and starts from scratch when there is no
    // `latest` file, a missing folder included: the first launch of a job chain.
    if (!fs::is_directory(root)) return nullptr;
    const auto tag = ckpt::read_latest_tag(root);
    if (!tag) return nullptr;
    auto impl = std::make_unique<Impl>();
    impl->args = &args;
    impl->dir = fs::path(root) / *tag;
    impl->dir_text = impl->dir.string();
    const std::string where = impl->dir.string();
    if (tag->empty() || !fs::is_directory(impl->dir))
        throw Error((fs::path(root) / "latest").string() + " names tag '" + *tag + "', but " + where + " is not a folder");
    int mp_files = 0, ckpt_tp = 0;
    for (const auto& e : fs::directory_iterator(impl->dir)) {
        const auto name = e.path().filename().string();
        if (const auto l = ckpt::parse_ds_layer_file(name)) {
            ckpt_tp = std::max(ckpt_tp, l->tp_rank + 1);
            if (l->tp_rank == tp_rank) impl->layers.push_back(l->layer);
        } else if (ckpt::parse_ds_mp_rank_file(name)) {
            ++mp_files;
        }
    }
    std::sort(impl->layers.begin(), impl->layers.end());
    const std::int64_t flags_tp = args.parallel.tensor_model_parallel_size, flags_pp = args.parallel.pipeline_model_parallel_size;
    const std::string reshape = "; make a copy at that shape with mds-ckpt-reshape --target-tp " + std::to_string(flags_tp) +
                                " --target-pp " + std::to_string(flags_pp) + " --with-optimizer";
    if (mp_files == 0) throw Error(where + ": no " + ckpt::ds_mp_rank_file(0) + " (not a DeepSpeed checkpoint?)");
    if (ckpt_tp != flags_tp)
        throw Error(where + " holds " + std::to_string(ckpt_tp) + " tensor-parallel shard" + (ckpt_tp == 1 ? "" : "s") +
                    ", the flags say --tensor-model-parallel-size " + std::to_string(flags_tp) + reshape);
    if (mp_files != ckpt_tp * flags_pp)
        throw Error(where + " has " + std::to_string(mp_files) + " mp_rank files for " + std::to_string(ckpt_tp) +
                    " tensor-parallel shards: " + (mp_files % ckpt_tp == 0 ? std::to_string(mp_files / ckpt_tp) : std::string("?")) +
                    " pipeline stages, the flags say --pipeline-model-parallel-size " + std::to_string(flags_pp) + reshape);
    impl->tp_rank = tp_rank;
    impl->mp = pp_rank * static_cast<int>(flags_tp) + tp_rank;
    impl->mp_rank = std::make_unique<ckpt::TorchFile>((impl->dir / ckpt::ds_mp_rank_file(impl->mp)).string());
    const auto& r = impl->mp_rank->root();
    const std::string file = impl->mp_rank->path();
    if (r.type() != ckpt::PyType::Dict) throw Error(file + ": expected a dict at the top");
    if (const auto* a = r.find("args"); a && a->is_object("argparse", "Namespace")) {
        // Megatron's check_checkpoint_args, for the values mds-train's flags set.
        auto check = [&](const char* name, std::int64_t flags) {
            const auto* v = a->namespace_attributes().find(name);
            if (v && v->type() == ckpt::PyType::Int && v->as_int() != flags)
                throw Error(file + ": the checkpoint has " + name + " " + std::to_string(v->as_int()) + ", the flags say " +
                            std::to_string(flags));
        };
        check("num_layers", args.model.num_layers);
        check("hidden_size", args.model.hidden_size);
        check("num_attention_heads", args.model.num_attention_heads);
    }
    return std::unique_ptr<CheckpointLoader>(new CheckpointLoader(std::move(impl)));
}

const std::string& CheckpointLoader::directory() const { return impl_->dir_text; }

std::int64_t CheckpointLoader::iteration() const {
    const auto* it = impl_->mp_rank->root().find("iteration");
    return it && it->type() == ckpt::PyType::Int ? it->as_int() : 0;
}

void CheckpointLoader::load_weights(model::GptModel& model) const {
    c10::NoGradGuard no_grad;
    auto& params = model.parameters();
    const std::int64_t blocks = model.config().num_layers;
    const auto& layers = impl_->layers;
    const std::string where = impl_->dir.string();
    if (static_cast<std::int64_t>(layers.size()) != blocks + 2)
        throw Error(where + " has " + std::to_string(layers.size()) + " layer files per TP rank, a model of " +
                    std::to_string(blocks) + " layers needs " + std::to_string(blocks + 2) +
                    " (embedding, blocks, final norm)");
    // On-disk order decides (first = embedding, last = final norm): BMD numbers blocks from 3,
    // microsoft's fork after mid-2023 from 2.
    auto disk_layer = [&](int model_layer) {
        if (model_layer == model::kEmbeddingLayer) return layers.front();
        if (model_layer == model::final_norm_layer_index(blocks)) return layers.back();
        return layers[static_cast<std::size_t>(model_layer - model::transformer_layer_index(0) + 1)];
    };
    std::size_t i = 0;
    while (i < params.size()) {
        const int layer = params[i].layer;
        ckpt::TorchFile file((impl_->dir / ckpt::ds_layer_file(disk_layer(layer), impl_->tp_rank)).string());
        const auto& items = file.root().ordered_dict_items();
        std::size_t used = 0;
        bool tied_copy = false;  // the last stage's copy of the embeddings: the file holds more than it
        for (; i < params.size() && params[i].layer == layer; ++i) {
            auto& p = params[i];
            const auto* v = items.find(p.name);
            if (!v) throw Error(file.path() + ": no tensor " + p.name);
            const auto t = file.tensor(*v, p.name);
            if (t.shape != p.tensor.sizes().vec())
                throw Error(file.path() + ": " + p.name + " has shape " + shape_text(t.shape) + ", the model's is " +
                            shape_text(p.tensor.sizes().vec()) + " (check the model flags and --make-vocab-size-divisible-by)");
            p.tensor.detach().copy_(to_tensor(t));
            tied_copy = tied_copy || p.tied_copy;
            ++used;
        }
        if (used != items.size() && !tied_copy) {
            for (const auto& [k, v] : items.items()) {
                const bool known = std::any_of(params.begin(), params.end(), [&](const model::Parameter& p) {
                    return p.layer == layer && k.type() == ckpt::PyType::Str && p.name == k.as_str();
                });
                if (!known)
                    throw Error(file.path() + ": tensor " + k.repr(80) + " is not a parameter of this model (check "
                                "--embed-layernorm, --position-embedding-type)");
            }
        }
    }
}

void CheckpointLoader::load_optimizer(AdamOptimizer& optimizer, const model::GptModel& model, TrainingProgress& progress) const {
    const bool bf16 = impl_->args->optimizer.bf16;
    const int mp = impl_->mp;
    fs::path path = impl_->dir / ckpt::ds_optim_file(bf16, 0, mp);
    if (!fs::exists(path)) path = impl_->dir / ckpt::ds_optim_file(!bf16, 0, mp);  // DeepSpeed tries both names too
    if (!fs::exists(path)) {
        bool other_dp = false;
        for (const auto& e : fs::directory_iterator(impl_->dir))
            if (const auto o = ckpt::parse_ds_optim_file(e.path().filename().string())) other_dp = other_dp || o->dp_rank != 0;
        throw Error(impl_->dir.string() + " has no optimizer states (" + ckpt::ds_optim_file(bf16, 0, mp) + ")" +
                    (other_dp ? "" : ": a weights-only checkpoint (mds-ckpt-shrink, --no-save-optim)?") +
                    "; resume with --no-load-optim to rebuild the fp32 masters from the weights and restart Adam");
    }
    // The states of a run on N data-parallel ranks are in N files, each with its partition of every
    // flat group (fragment addresses relative to it). Each parameter is put back together from its
    // fragments, in rank order, so a checkpoint of any data-parallel size resumes at any other.
    const bool bf16_name = path.filename().string().rfind("bf16_", 0) == 0;
    std::vector<std::unique_ptr<ckpt::TorchFile>> files;
    files.push_back(std::make_unique<ckpt::TorchFile>(path.string()));
    const auto& osd = files[0]->root().get("optimizer_state_dict");
    std::int64_t count = 0;
    for (const auto& c : osd.get("partition_count").as_list()) {
        if (c.as_int() < 1 || (count && c.as_int() != count))
            throw Error(files[0]->path() + ": partition_count " + osd.get("partition_count").repr(80) +
                        " (expected one positive count for every group)");
        count = c.as_int();
    }
    for (std::int64_t k = 1; k < count; ++k) {
        const fs::path other = impl_->dir / ckpt::ds_optim_file(bf16_name, static_cast<int>(k), mp);
        if (!fs::exists(other))
            throw Error(files[0]->path() + " says the optimizer states are partitioned over " + std::to_string(count) +
                        " data-parallel ranks, but " + other.string() + " is missing");
        files.push_back(std::make_unique<ckpt::TorchFile>(other.string()));
    }
    struct Piece {
        std::size_t file = 0, group = 0;
        std::int64_t start = 0, numel = 0;
    };
    std::map<std::string, std::vector<Piece>> pieces;
    std::optional<std::int64_t> steps;
    std::vector<std::vector<at::Tensor>> flat_master(files.size()), flat_m1(files.size()), flat_m2(files.size());
    std::optional<std::size_t> num_groups;
    for (std::size_t k = 0; k < files.size(); ++k) {
        const auto& file = *files[k];
        const std::string where = file.path();
        const auto& fosd = file.root().get("optimizer_state_dict");
        const auto& fp32 = fosd.get("single_partition_of_fp32_groups").as_list();
        const auto& base = fosd.get("base_optimizer_state");
        const auto& state = base.get("state").as_dict();
        const auto& groups = base.get("param_groups").as_list();
        const auto& mappings = fosd.get("param_slice_mappings").as_list();
        if (fp32.size() != mappings.size() || groups.size() != mappings.size())
            throw Error(where + ": " + std::to_string(mappings.size()) + " param_slice_mappings for " +
                        std::to_string(fp32.size()) + " fp32 groups and " + std::to_string(groups.size()) + " param groups");
        if (num_groups && *num_groups != mappings.size())
            throw Error(where + ": " + std::to_string(mappings.size()) + " parameter groups, " + files[0]->path() + " has " +
                        std::to_string(*num_groups));
        num_groups = mappings.size();
        for (std::size_t g = 0; g < mappings.size(); ++g) {
            for (const auto& [key, v] : mappings[g].ordered_dict_items().items()) {
                const auto& st = v.as_object().state.as_dict();
                pieces[key.as_str()].push_back({k, g, st.find("start")->as_int(), st.find("numel")->as_int()});
            }
            const auto* step = groups[g].find("step");
            std::int64_t sv = 0;
            if (step && step->type() == ckpt::PyType::Int) sv = step->as_int();
            else if (step && step->type() == ckpt::PyType::Float) sv = static_cast<std::int64_t>(step->as_float());
            else throw Error(where + ": param group " + std::to_string(g) + " has no step count");
            if (steps && *steps != sv) throw Error(where + ": param groups have different step counts");
            steps = sv;
            const std::string what = "group " + std::to_string(g);
            flat_master[k].push_back(to_tensor(file.tensor(fp32[g], what + " fp32")).to(at::kFloat));
            const auto* s = state.find(integer(static_cast<std::int64_t>(g)));
            if (!s) throw Error(where + ": no Adam state for param group " + std::to_string(g));
            flat_m1[k].push_back(to_tensor(file.tensor(s->get("exp_avg"), what + " exp_avg")).to(at::kFloat));
            flat_m2[k].push_back(to_tensor(file.tensor(s->get("exp_avg_sq"), what + " exp_avg_sq")).to(at::kFloat));
        }
    }
    std::vector<at::Tensor> master, m1, m2;
    for (const auto& p : model.parameters()) {
        const auto name = ds_param_name(p);
        const auto it = pieces.find(name);
        if (it == pieces.end()) throw Error(path.string() + ": no optimizer state for parameter " + name);
        std::int64_t total = 0;
        for (const auto& pc : it->second) total += pc.numel;
        if (total != p.tensor.numel())
            throw Error(path.string() + ": optimizer state of " + name + " has " + std::to_string(total) +
                        " elements, the parameter " + std::to_string(p.tensor.numel()));
        auto whole = [&](const std::vector<std::vector<at::Tensor>>& flats, const char* what) {
            std::vector<at::Tensor> parts;
            for (const auto& pc : it->second) {
                const auto& flat = flats[pc.file][pc.group];
                if (pc.start < 0 || pc.numel < 0 || pc.start + pc.numel > flat.numel())
                    throw Error(files[pc.file]->path() + ": " + what + " fragment of " + name +
                                " lies outside its group's partition");
                parts.push_back(flat.narrow(0, pc.start, pc.numel));
            }
            return (parts.size() == 1 ? parts[0] : at::cat(parts)).view(p.tensor.sizes()).to(p.tensor.device());
        };
        master.push_back(whole(flat_master, "fp32"));
        m1.push_back(whole(flat_m1, "exp_avg"));
        m2.push_back(whole(flat_m2, "exp_avg_sq"));
    }
    optimizer.load_state(master, m1, m2, steps.value_or(0));

    // fp16 loss scaler: Megatron's own state when mds wrote it, else DeepSpeed's scaler object.
    const auto& a = *impl_->args;
    if (!a.optimizer.fp16) return;
    if (const auto* gs = osd.find("grad_scaler"); gs && !a.parallel.deepspeed) {
        optim::MegatronGradScaler::State st;
        st.scale = static_cast<float>(number(gs->get("scale")));
        st.growth_tracker = gs->get("growth_tracker").as_int();
        st.hysteresis_tracker = gs->get("hysteresis_tracker").as_int();
        st.skipped_iterations = progress.skipped_steps;
        progress.megatron_scaler = st;
        return;
    }
    const auto* ls = osd.find("loss_scaler");
    if (!ls || ls->type() != ckpt::PyType::Object || !ls->as_object().has_state || ls->as_object().state.type() != ckpt::PyType::Dict)
        throw Error(files[0]->path() + ": no loss_scaler state for this fp16 run");
    const auto& st = ls->as_object().state;
    auto get = [&](const char* k, double fallback) {
        const auto* v = st.find(k);
        return v && (v->type() == ckpt::PyType::Int || v->type() == ckpt::PyType::Float) ? number(*v) : fallback;
    };
    if (a.parallel.deepspeed) {
        optim::DeepSpeedLossScaler::State ds;
        ds.cur_scale = get("cur_scale", 1.0);
        ds.cur_iter = static_cast<std::int64_t>(get("cur_iter", 0));
        ds.last_overflow_iter = static_cast<std::int64_t>(get("last_overflow_iter", -1));
        ds.cur_hysteresis = static_cast<std::int64_t>(get("cur_hysteresis", static_cast<double>(a.optimizer.hysteresis)));
        ds.skipped_iterations = progress.skipped_steps;
        progress.deepspeed_scaler = ds;
    } else {
        // A DeepSpeed run resumed without --deepspeed: Megatron's scaler starts from the saved scale.
        optim::MegatronGradScaler::State mg;
        mg.scale = static_cast<float>(get("cur_scale", 1.0));
        mg.hysteresis_tracker = a.optimizer.hysteresis;
        mg.skipped_iterations = progress.skipped_steps;
        progress.megatron_scaler = mg;
    }
}

std::vector<std::string> CheckpointLoader::load_rng(const model::GptModel& model) const {
    const auto& r = impl_->mp_rank->root();
    const std::string where = impl_->mp_rank->path();
    std::vector<std::string> warnings;
    auto saved = [&](const PyValue* v, const std::string& key) {
        if (!v || v->is_none())
            throw Error(where + " has no " + key + " (saved with --no-save-rng?); resume with --no-load-rng");
        return to_tensor(impl_->mp_rank->tensor(*v, key));
    };
    // A state of another kind of generator than `gen` (a GPU run's 16-byte Philox state on the CPU,
    // or a CPU state on a GPU): Philox at offset 0 is its seed, which a CPU generator takes; anything
    // else cannot continue the same stream, and the generator keeps its seeding (a warning).
    auto restore = [&](const at::Tensor& state, at::Generator gen, const std::string& key) {
        std::lock_guard<std::mutex> lock(gen.mutex());
        const at::Tensor mine = gen.get_state();
        if (state.numel() == mine.numel() && state.scalar_type() == mine.scalar_type()) {
            gen.set_state(state);
            return;
        }
        if (state.numel() == 16 && state.scalar_type() == at::kByte && gen.device().is_cpu()) {
            std::uint64_t philox[2];
            std::memcpy(philox, state.contiguous().data_ptr(), sizeof philox);
            if (philox[1] == 0) {
                gen.set_current_seed(philox[0]);
                return;
            }
        }
        warnings.push_back(where + ": " + key + " is the state of a " + (state.numel() == 16 ? "GPU (Philox)" : "CPU") +
                           " generator, which this " + (gen.device().is_cpu() ? "CPU" : "GPU") +
                           " run cannot continue; dropout draws from this run's own seeding instead");
    };
    {
        auto cpu = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(cpu.mutex());
        cpu.set_state(saved(r.find("torch_rng_state"), "torch_rng_state"));
    }
    restore(saved(r.find("cuda_rng_state"), "cuda_rng_state"), model.dropout_generator(), "cuda_rng_state");
    if (model.separate_attention_dropout_generator()) {
        const auto* tracker = r.find("rng_tracker_states");
        const PyValue* state = tracker && tracker->type() == ckpt::PyType::Dict ? tracker->find("model-parallel-rng") : nullptr;
        restore(saved(state, "rng_tracker_states['model-parallel-rng']"), model.attention_dropout_generator(),
                "rng_tracker_states['model-parallel-rng']");
    }
    return warnings;
}

TrainingProgress CheckpointLoader::progress() const {
    const auto& r = impl_->mp_rank->root();
    const std::string where = impl_->mp_rank->path();
    TrainingProgress p;
    p.iteration = iteration();
    if (const auto* a = r.find("args"); a && a->is_object("argparse", "Namespace")) {
        const auto& ns = a->namespace_attributes();
        auto get_int = [&](const char* k) {
            const auto* v = ns.find(k);
            return v && v->type() == ckpt::PyType::Int ? v->as_int() : 0;
        };
        p.consumed_train_samples = get_int("consumed_train_samples");
        p.consumed_valid_samples = get_int("consumed_valid_samples");
        p.consumed_train_tokens = get_int("consumed_train_tokens");
        if (const auto* g = ns.find("gigaflos_no_embeds"); g && (g->type() == ckpt::PyType::Float || g->type() == ckpt::PyType::Int))
            p.gigaflos_no_embeds = number(*g);
    }
    if (p.consumed_train_tokens == 0)
        if (const auto* t = r.find("tokens"); t && t->type() == ckpt::PyType::Int) p.consumed_train_tokens = t->as_int();
    if (const auto* s = r.find("skipped_steps"); s && s->type() == ckpt::PyType::Int) p.skipped_steps = s->as_int();
    // The schedule: BMD's AnnealingLR keys, megatron-core's extras where mds wrote them.
    const auto* lr = r.find("lr_scheduler");
    if (!lr || lr->type() != ckpt::PyType::Dict) throw Error(where + ": no lr_scheduler state");
    auto& s = p.lr;
    auto f = [&](const char* k, double& dst) {
        if (const auto* v = lr->find(k); v && (v->type() == ckpt::PyType::Float || v->type() == ckpt::PyType::Int)) dst = number(*v);
    };
    auto i = [&](const char* k, std::int64_t& dst) {
        if (const auto* v = lr->find(k); v && (v->type() == ckpt::PyType::Int || v->type() == ckpt::PyType::Float))
            dst = static_cast<std::int64_t>(number(*v));
    };
    s.params.max_lr = impl_->args->optimizer.lr;
    f("max_lr", s.params.max_lr);
    f("min_lr", s.params.min_lr);
    f("warmup_steps", s.params.lr_warmup_steps);
    i("decay_steps", s.params.lr_decay_steps);
    i("num_steps", s.num_steps);
    i("num_tokens", s.num_tokens);
    i("warmup_tokens", s.warmup_tokens);
    f("init_lr", s.params.init_lr);
    s.has_wd_schedule = lr->find("start_wd") != nullptr;
    f("start_wd", s.params.start_wd);
    f("end_wd", s.params.end_wd);
    i("wd_incr_steps", s.params.wd_incr_steps);
    if (const auto* v = lr->find("decay_style"); v && v->type() == ckpt::PyType::Str)
        s.params.lr_decay_style = optim::parse_lr_decay_style(v->as_str());
    if (const auto* v = lr->find("wd_incr_style"); v && v->type() == ckpt::PyType::Str)
        s.params.wd_incr_style = optim::parse_wd_incr_style(v->as_str());
    if (const auto* v = lr->find("decay_tokens"); v && v->type() == ckpt::PyType::Int) s.params.lr_decay_tokens = v->as_int();
    return p;
}

}  // namespace mds::trainer
