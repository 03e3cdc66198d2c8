#include "megatron_args.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "mds/data/blending.h"        // data_prefixes, data_weights
#include "mds/data/weighted_split.h"  // the weighted split paths args
#include "mds/flags/flag_table.h"     // find_namespace_key, namespace_value
#include "mds/util/cli.h"             // mds_version
#include "mds/util/files.h"
#include "py_values.h"

namespace mds::trainer {
using ckpt::PyValue;
using namespace py;

namespace {

// BMD's args Namespace in its order: every attribute its parse_args and pretrain() leave on it,
// then mds_version. An attribute takes its value from the flag table (mds/flags/flag_table.h: the
// flag's value, or BMD's value for a flag mds does not take) unless it is derived below; one that
// is neither (a Mode 2 group name list of a run without it) is left out, as BMD leaves it out.
constexpr const char* kNamespaceOrder[] = {
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels", "max_position_embeddings",
    "make_vocab_size_divisible_by", "pad_vocab_size_to", "layernorm_epsilon", "sync_tp_duplicated_parameters",
    "apply_residual_connection_post_layernorm", "embed_layernorm", "openai_gelu", "onnx_safe", "bert_binary_head",
    "position_embedding_type", "glu_activation", "kill_switch_path", "log_level", "log_level_replica",
    "attention_dropout", "hidden_dropout", "weight_decay", "clip_grad", "adam_beta1", "adam_beta2", "adam_eps",
    "sgd_momentum", "micro_batch_size", "global_batch_size", "rampup_batch_size", "checkpoint_activations",
    "distribute_checkpointed_activations", "checkpoint_num_layers", "train_iters", "train_samples", "train_tokens",
    "log_interval", "exit_interval", "exit_duration_in_mins", "tensorboard_dir", "masked_softmax_fusion",
    "bias_gelu_fusion", "bias_dropout_fusion", "optimizer", "use_bnb_optimizer", "dataloader_type", "cpu_optimizer",
    "cpu_torch_adam", "codecarbon_dir", "eval_only", "skip_train_iteration_range", "inference",
    "abort_on_unmet_fused_kernel_constraints", "pp_partition_method", "seed", "init_method_std",
    "init_method_xavier_uniform", "lr", "lr_decay_style", "lr_decay_iters", "lr_decay_samples", "lr_decay_tokens",
    "lr_warmup_fraction", "lr_warmup_iters", "lr_warmup_samples", "min_lr", "override_lr_scheduler",
    "use_checkpoint_lr_scheduler", "universal_checkpoint", "save", "save_interval", "no_save_optim", "no_save_rng",
    "load", "no_load_optim", "no_load_rng", "finetune", "fp16", "bf16", "loss_scale", "initial_loss_scale",
    "min_loss_scale", "loss_scale_window", "hysteresis", "fp32_residual_connection", "apply_query_key_layer_scaling",
    "attention_softmax_in_fp32", "accumulate_allreduce_grads_in_fp32", "fp16_lm_cross_entropy",
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "num_layers_per_virtual_pipeline_stage",
    "distributed_backend", "DDP_impl", "use_contiguous_buffers_in_ddp", "scatter_gather_tensors_in_pipeline",
    "local_rank", "lazy_mpu_init", "use_cpu_initialization", "eval_iters", "eval_interval", "data_path", "split",
    "train_weighted_split_paths", "valid_weighted_split_paths", "test_weighted_split_paths",
    "train_weighted_split_paths_path", "valid_weighted_split_paths_path", "test_weighted_split_paths_path",
    "log_path", "vocab_file", "merge_file", "vocab_extra_ids", "seq_length", "encoder_seq_length",
    "decoder_seq_length", "retriever_seq_length", "sample_rate", "mask_prob", "short_seq_prob", "mmap_warmup",
    "num_workers", "valid_num_workers", "tokenizer_type", "tokenizer_name_or_path", "data_impl",
    "reset_position_ids", "reset_attention_mask", "eod_mask_loss", "loss_on_targets_only",
    "reweight_loss_based_on_position_frequency", "noise_density", "mean_noise_span_length", "adlr_autoresume",
    "adlr_autoresume_interval", "ict_head_size", "biencoder_projection_dim", "biencoder_shared_query_context_model",
    "ict_load", "bert_load", "titles_data_path", "query_in_block_prob", "use_one_sent_docs", "evidence_data_path",
    "retriever_report_topk_accuracies", "retriever_score_scaling", "block_data_path", "embedding_path",
    "indexer_batch_size", "indexer_log_interval", "num_classes", "img_dim", "num_channels", "patch_dim",
    "log_params_norm", "log_num_zeros_in_grad", "tensorboard_log_interval", "tensorboard_queue_size",
    "log_timers_to_tensorboard", "log_batch_size_to_tensorboard", "log_learning_rate_to_tensorboard",
    "log_loss_scale_to_tensorboard", "log_validation_ppl_to_tensorboard", "zero_stage", "zero_reduce_scatter",
    "zero_contigious_gradients", "zero_reduce_bucket_size", "zero_allgather_bucket_size", "remote_device",
    "use_pin_memory", "scattered_embeddings", "split_transformers", "memory_centric_tiled_linear", "tile_factor",
    "deepspeed_activation_checkpointing", "partition_activations", "contigious_checkpointing", "checkpoint_in_cpu",
    "synchronize_each_layer", "profile_backward", "deepspeed", "deepspeed_config", "deepscale", "deepscale_config",
    "rank", "world_size", "data_parallel_size", "train_weighted_split_names", "train_weighted_split_weights",
    "train_weighted_split_splits", "valid_weighted_split_names", "valid_weighted_split_weights",
    "valid_weighted_split_splits", "test_weighted_split_names", "test_weighted_split_weights",
    "test_weighted_split_splits", "virtual_pipeline_model_parallel_size", "params_dtype", "consumed_train_samples",
    "consumed_valid_samples", "consumed_train_tokens", "gigaflos_no_embeds", "curriculum_learning",
    "padded_vocab_size", "deepspeed_configuration", "pretrain_causal_attention", "iteration",
    "parameters_in_billions_no_embedding", "do_train", "do_valid", "do_test", "data_prefixes", "data_weights",
    "mds_version",
};

using Derived = std::unordered_map<std::string, PyValue>;

// megatron.enums.PositionEmbeddingType's members by value.
constexpr const char* kPositionEmbeddingTypes[] = {nullptr, "rotary", "absolute", "alibi"};

PyValue position_embedding_enum(const std::string& type) {
    std::int64_t v = 2;  // absolute: what any other name trains with (model_config refuses the ones mds lacks)
    for (std::int64_t k = 1; k < std::int64_t{std::size(kPositionEmbeddingTypes)}; ++k)
        if (type == kPositionEmbeddingTypes[k]) v = k;
    return PyValue::object("megatron.enums", "PositionEmbeddingType", PyValue::tuple({integer(v)}));
}

// --rampup-batch-size: argparse keeps its three values as strings (nargs='*', no type).
PyValue rampup_list(const optim::OptimizerConfig& o) {
    if (!o.rampup_batch_size) return PyValue::none();
    const auto& r = *o.rampup_batch_size;
    return PyValue::list({str(std::to_string(r.start_global_batch_size)), str(std::to_string(r.batch_size_increment)),
                          str(std::to_string(r.ramp_up_samples))});
}

// The shape values parse_args fills in (ffn = 4h, kv_channels = h / heads, encoder_seq_length).
void model_values(Derived& d, const flags::TrainArgs& a) {
    const auto& md = a.model;
    d["ffn_hidden_size"] = integer(md.ffn_hidden());
    d["kv_channels"] = integer(md.kv());
    // --onnx-safe is argparse type=bool: None when absent, else bool(value).
    d["onnx_safe"] = md.onnx_safe ? boolean(md.onnx_safe_on()) : PyValue::none();
    d["max_position_embeddings"] = integer(md.max_positions());
    d["position_embedding_type"] = position_embedding_enum(md.position_embedding_type);
    d["encoder_seq_length"] = integer(md.seq_length);
}

// Batch sizes, the iterations of a --train-samples run and the decay lengths, as parse_args and
// update_train_iters leave them.
void schedule_values(Derived& d, const flags::TrainArgs& a, const TrainingProgress& p) {
    const auto& o = a.optimizer;
    d["global_batch_size"] = integer(a.global_batch_size());
    d["rampup_batch_size"] = rampup_list(o);
    // update_train_iters for --train-samples: the iterations the run computes (ramp-up included).
    std::optional<std::int64_t> train_iters = a.length.train_iters;
    if (!train_iters && p.train_iters > 0) train_iters = p.train_iters;
    d["train_iters"] = optional_int(train_iters);
    const auto& len = a.length;
    d["lr_decay_iters"] = optional_int(len.train_iters ? std::optional<std::int64_t>(o.lr_decay_iters.value_or(*len.train_iters))
                                                       : o.lr_decay_iters);
    d["lr_decay_samples"] = optional_int(
        len.train_samples ? std::optional<std::int64_t>(o.lr_decay_samples.value_or(*len.train_samples)) : o.lr_decay_samples);
}

// Megatron's loss-scale flags as given (their defaults otherwise): under --deepspeed the fp16 section
// of the DeepSpeed config sets the scaler, not these args.
void precision_values(Derived& d, const flags::TrainArgs& a) {
    const auto& o = a.optimizer;
    auto given = [&a](const char* flag) { return a.flags_given.count(flag) > 0; };
    d["loss_scale"] = given("--loss-scale") ? optional_float(o.loss_scale) : PyValue::none();
    d["initial_loss_scale"] = given("--initial-loss-scale") ? floating(o.initial_loss_scale) : integer(4294967296);
    d["min_loss_scale"] = given("--min-loss-scale") ? floating(o.min_loss_scale) : floating(1.0);
    d["loss_scale_window"] = given("--loss-scale-window") ? floating(static_cast<double>(o.loss_scale_window)) : integer(1000);
    d["hysteresis"] = given("--hysteresis") ? integer(o.hysteresis) : integer(2);
    d["accumulate_allreduce_grads_in_fp32"] = boolean(o.bf16);  // parse_args: bf16 accumulates and all-reduces in fp32
    // parse_args: fp32 accumulation (forced by bf16) sets use_contiguous_buffers_in_ddp; else the flag as given.
    d["use_contiguous_buffers_in_ddp"] = boolean(o.bf16 || a.flags_given.count("--use-contiguous-buffers-in-ddp") > 0);
    d["params_dtype"] = PyValue::global("torch", o.fp16 ? "float16" : o.bf16 ? "bfloat16" : "float32");
}

// Data loading: the default split, Mode 2's groups, the blended prefixes and weights, the tokenizer.
void data_values(Derived& d, const flags::TrainArgs& a) {
    // parse_args gives --data-path runs BMD's default split when none is given (Mode 2 keeps None).
    d["split"] = a.data.split ? str(*a.data.split) : a.data.data_path.empty() ? PyValue::none() : str("969, 30, 1");
    // Data loading Mode 2: BMD's parse_data_paths keeps each group's paths, weights and ranges as
    // lists of strings (and the names); its -path action never stores the file's name (None: the table's).
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
    // Mode 1 sets the valid_/test_ names, weights and splits to None; in Mode 2 those of the flags
    // given exist, as lists.
    static const char* const split_prefix[3] = {"train_weighted_split_", "valid_weighted_split_", "test_weighted_split_"};
    for (int k = 0; k < 3; ++k) {
        const std::string pre = split_prefix[k];
        d[pre + "paths"] = group_lists(k, &data::WeightedSplitGroup::paths);
        if (const auto& g = split_groups[static_cast<std::size_t>(k)]) {
            std::vector<PyValue> names;
            for (const auto& group : *g) names.push_back(str(group.name));
            d[pre + "names"] = PyValue::list(std::move(names));
            d[pre + "weights"] = group_lists(k, &data::WeightedSplitGroup::weights);
            d[pre + "splits"] = group_lists(k, &data::WeightedSplitGroup::splits);
        } else if (k > 0 && !a.data.data_path.empty()) {
            d[pre + "names"] = d[pre + "weights"] = d[pre + "splits"] = PyValue::none();
        }
    }
    // training.py: the blended training datasets' prefixes and normalized weights (analyze_data_prefix).
    std::optional<data::DataPath> blended;
    if (a.data.data_path.size() > 1)
        blended = data::parse_data_path(a.data.data_path);
    else if (split_groups[0] && split_groups[0]->size() == 1 && split_groups[0]->front().paths.size() > 1)
        blended = data::weighted_split_data_path(split_groups[0]->front(), "--train-weighted-split-paths");
    d["data_prefixes"] = blended ? text_list(blended->prefixes) : PyValue::none();
    std::vector<PyValue> weights;
    if (blended)
        for (double w : blended->weights) weights.push_back(floating(w));
    d["data_weights"] = blended ? PyValue::list(std::move(weights)) : PyValue::none();
    // pretrain_gpt.py's default tokenizer, which BMD's check_checkpoint_args compares.
    d["tokenizer_type"] = str(a.data.tokenizer_type.value_or("GPT2BPETokenizer"));
}

// The run's state: ranks, sizes, progress, the DeepSpeed config, what pretrain() adds.
void run_values(Derived& d, const flags::TrainArgs& a, const model::GptModel& model, const TrainingProgress& p) {
    const std::int64_t tp = a.parallel.tensor_model_parallel_size, pp = a.parallel.pipeline_model_parallel_size;
    // The rank that saves this model-parallel rank's file: data-parallel rank 0 of Megatron's grid
    // (tensor fastest, then data, then pipeline).
    const std::int64_t rank = model.pipeline_stage().rank * a.parallel.data_parallel_size * tp + model.tensor_parallel().rank;
    // The saving process's local rank where mds-train knows it (the launcher's, as BMD's rank % GPUs), else its rank.
    d["local_rank"] = integer(a.parallel.local_rank.value_or(rank));
    d["rank"] = integer(rank);
    // parse_args turns --skip-train-iteration-range into a collections.deque of merged [start, end]
    // lists, and the train loop pops each range it skips: what is left at this save.
    if (!a.data.skip_ranges.empty()) {
        std::vector<PyValue> left;
        for (const auto& [start, end] : p.skip_ranges_left) left.push_back(PyValue::list({integer(start), integer(end)}));
        d["skip_train_iteration_range"] = PyValue::object("collections", "deque", PyValue::tuple({PyValue::list(std::move(left))}));
    }
    d["world_size"] = integer(a.parallel.world_size.value_or(1));
    d["data_parallel_size"] = integer(a.parallel.data_parallel_size);
    d["virtual_pipeline_model_parallel_size"] = PyValue::none();
    d["consumed_train_samples"] = integer(p.consumed_train_samples);
    d["consumed_valid_samples"] = integer(p.consumed_valid_samples);
    d["consumed_train_tokens"] = integer(p.consumed_train_tokens);
    d["gigaflos_no_embeds"] = floating(p.gigaflos_no_embeds);
    d["curriculum_learning"] = boolean(a.curriculum && a.curriculum->enabled);  // the DeepSpeed config's "enabled"
    d["padded_vocab_size"] = integer(model.config().padded_vocab_size);
    if (a.parallel.deepspeed) d["deepspeed_configuration"] = ds_config(a);
    d["pretrain_causal_attention"] = boolean(true);
    d["iteration"] = integer(p.iteration);
    // BMD reads save_interval as an int: a --save-interval schedule writes the interval in effect at
    // the saved iteration (None outside every range); a plain N is N, as BMD keeps it.
    d["save_interval"] = a.checkpoint.save_interval ? optional_int(a.checkpoint.save_interval->interval_at(p.iteration))
                                                    : PyValue::none();
    d["parameters_in_billions_no_embedding"] = floating(megatron_parameters_in_billions_no_embedding(model, tp * pp));
    d["do_train"] = integer(1);
    d["do_valid"] = boolean(p.do_valid);
    d["do_test"] = boolean(p.do_test);
    d["mds_version"] = str(mds_version());
}

}  // namespace

std::string python_str(const PyValue& v, std::size_t max_chars) {
    if (v.type() == ckpt::PyType::Str) return v.as_str();
    if (v.type() == ckpt::PyType::Object) {
        const auto& o = v.as_object();
        const auto* args = o.args.type() == ckpt::PyType::Tuple ? &o.args.as_tuple() : nullptr;
        if (v.is_object("megatron.enums", "PositionEmbeddingType") && args && args->size() == 1 &&
            (*args)[0].type() == ckpt::PyType::Int && (*args)[0].int_fits_int64()) {
            const auto k = (*args)[0].as_int();
            if (k >= 1 && k <= 3) return "PositionEmbeddingType." + std::string(kPositionEmbeddingTypes[k]);
        }
        if (v.is_object("collections", "deque") && args && args->size() == 1)
            return ("deque(" + (*args)[0].repr(max_chars) + ")").substr(0, max_chars);
    }
    return v.repr(max_chars);
}

// Megatron-DeepSpeed's args as an argparse.Namespace: every attribute BMD's parse_args and
// pretrain() leave on it, in its order, with its Python types: the flags mds-train takes from
// their values, the Megatron flags mds does not take at their defaults (giving one fails the
// parse), the derived ones as BMD derives them. The Megatron tools read them; BMD's
// check_checkpoint_args compares some.
PyValue megatron_args(const flags::TrainArgs& a, const model::GptModel& model, const TrainingProgress& p) {
    Derived derived;
    model_values(derived, a);
    schedule_values(derived, a, p);
    precision_values(derived, a);
    data_values(derived, a);
    run_values(derived, a, model, p);
    auto d = PyValue::dict();
    for (const char* key : kNamespaceOrder) {
        if (auto it = derived.find(key); it != derived.end())
            d.as_dict().set(key, it->second);
        else if (const auto* row = flags::find_namespace_key(key))
            d.as_dict().set(key, flags::namespace_value(*row, a));
    }
    return instance("argparse", "Namespace", d);
}

std::vector<std::string> megatron_args_lines(const flags::TrainArgs& a, const model::GptModel& model) {
    // Not yet on the Namespace when parse_args prints it: pretrain()'s (iteration, the parameter estimate, the
    // data's prefixes and weights, the DeepSpeed configuration's JSON, do_train / do_valid / do_test), the
    // tokenizer's padded_vocab_size, pretrain_gpt.py's args_defaults, and mds's own version.
    static const std::set<std::string> kAfterParse = {
        "iteration", "parameters_in_billions_no_embedding", "data_prefixes", "data_weights", "deepspeed_configuration",
        "do_train", "do_valid", "do_test", "padded_vocab_size", "pretrain_causal_attention", "mds_version"};
    // And their values at parse time where later code changes them: --local_rank as given (the launcher's
    // environment is read later), the decay lengths as given (the scheduler fills them from the run's length),
    // gigaflos_no_embeds the int 0 that train() turns into a float.
    const auto& o = a.optimizer;
    const std::unordered_map<std::string, PyValue> at_parse = {
        {"local_rank", a.flags_given.count("--local_rank") > 0 ? optional_int(a.parallel.local_rank) : PyValue::none()},
        {"lr_decay_iters", optional_int(o.lr_decay_iters)},
        {"lr_decay_samples", optional_int(o.lr_decay_samples)},
        {"gigaflos_no_embeds", integer(0)}};
    const auto ns = megatron_args(a, model, TrainingProgress{});
    std::vector<std::string> lines;
    for (const auto& [k, v] : ns.namespace_attributes().items()) {
        if (k.type() != ckpt::PyType::Str || kAfterParse.count(k.as_str()) > 0) continue;
        const auto& key = k.as_str();
        const auto parsed = at_parse.find(key);
        lines.push_back("  " + key + " " + std::string(key.size() < 48 ? 48 - key.size() : 0, '.') + " " +
                        python_str(parsed != at_parse.end() ? parsed->second : v));
    }
    const auto lower = [](std::string s) {
        for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return s;
    };
    std::stable_sort(lines.begin(), lines.end(), [&](const std::string& x, const std::string& y) { return lower(x) < lower(y); });
    lines.insert(lines.begin(), "------------------------ arguments ------------------------");
    lines.push_back("-------------------- end of arguments ---------------------");
    return lines;
}

PyValue ds_config(const flags::TrainArgs& a) {
    if (!a.parallel.deepspeed_config.empty()) {
        try {
            return from_json(nlohmann::ordered_json::parse(read_file(a.parallel.deepspeed_config)));
        } catch (const nlohmann::json::exception&) {
            // Validated when the run started; a file changed since is recorded as its path.
            return str(a.parallel.deepspeed_config);
        }
    }
    const auto& o = a.optimizer;
    nlohmann::ordered_json j = {{"train_micro_batch_size_per_gpu", o.micro_batch_size},
                                {"train_batch_size", o.global_batch_size.value_or(o.micro_batch_size)},
                                {"gradient_clipping", o.clip_grad},
                                {"zero_optimization", {{"stage", a.parallel.zero_stage}}},
                                {"fp16", {{"enabled", o.fp16}}},
                                {"bf16", {{"enabled", o.bf16}}}};
    return from_json(j);
}

}  // namespace mds::trainer
