// The mp_rank files of mds-hf-to-ckpt (specs/checkpoints.md §3): DeepSpeed's engine keys of a
// weights-only pipeline checkpoint at step 0 and Megatron-DeepSpeed's client keys, with the args
// Namespace Megatron would have had for this model: what mds-train's and BMD's loaders read and
// check (num_layers, hidden_size, num_attention_heads, position_embedding_type,
// max_position_embeddings, make_vocab_size_divisible_by, padded_vocab_size, tokenizer_type, the
// parallel sizes, consumed_* through getattr) and what mds-ckpt-to-hf and mds-ckpt-reshape read back
// (GeLU kind, embed_layernorm, residual order, epsilon, dropouts, init std, dtype, tokenizer files).
#include <filesystem>

#include "ckpt/hf_to_ckpt_plan.h"
#include "mds/util/cli.h"  // mds_version

namespace mds::ckpt::hf2ck_detail {
namespace fs = std::filesystem;
namespace {

PyValue str(std::string s) { return PyValue::str(std::move(s)); }
PyValue integer(std::int64_t v) { return PyValue::integer(v); }
PyValue floating(double v) { return PyValue::floating(v); }
PyValue boolean(bool b) { return PyValue::boolean(b); }

// BMD pickles megatron.enums.PositionEmbeddingType(n): rotary 1, absolute 2, alibi 3.
PyValue position_embedding_type(bool alibi) {
    return PyValue::object("megatron.enums", "PositionEmbeddingType", PyValue::tuple({integer(alibi ? 3 : 2)}));
}

const char* torch_dtype(DType t) { return t == DType::BF16 ? "bfloat16" : t == DType::F16 ? "float16" : "float32"; }

// The args Namespace, in BMD's attribute order (trainer/megatron_args.cpp) for the keys it has.
PyValue megatron_args(const Plan& plan) {
    const HfConfig& c = plan.folder->config();
    const TokenizerFiles& tok = plan.tokenizer;
    const std::string dir = kHfTokenizerFolder;
    auto d = PyValue::dict();
    auto& a = d.as_dict();
    a.set("num_layers", integer(plan.num_layers));
    a.set("hidden_size", integer(plan.sizes.hidden));
    a.set("ffn_hidden_size", integer(plan.sizes.ffn));
    a.set("num_attention_heads", integer(plan.sizes.heads));
    a.set("kv_channels", integer(plan.sizes.hidden / plan.sizes.heads));
    a.set("max_position_embeddings", integer(plan.max_positions));
    a.set("make_vocab_size_divisible_by", integer(plan.padded_vocab_divisible_by));
    a.set("pad_vocab_size_to", PyValue::none());
    a.set("layernorm_epsilon", floating(c.layer_norm_epsilon));
    a.set("apply_residual_connection_post_layernorm", boolean(plan.post_ln));
    a.set("embed_layernorm", boolean(plan.embed_layernorm));
    a.set("openai_gelu", boolean(plan.gelu.openai_gelu));
    a.set("onnx_safe", PyValue::none());
    a.set("position_embedding_type", position_embedding_type(plan.alibi));
    a.set("glu_activation", PyValue::none());
    a.set("attention_dropout", floating(c.attention_dropout));
    a.set("hidden_dropout", floating(c.hidden_dropout));
    a.set("masked_softmax_fusion", boolean(true));
    a.set("bias_gelu_fusion", boolean(plan.gelu.bias_gelu_fusion));
    a.set("bias_dropout_fusion", boolean(true));
    a.set("pp_partition_method", str(plan.partition_method));
    a.set("init_method_std", floating(c.initializer_range));
    a.set("fp16", boolean(plan.dtype == DType::F16));
    a.set("bf16", boolean(plan.dtype == DType::BF16));
    a.set("fp32_residual_connection", boolean(false));
    a.set("apply_query_key_layer_scaling", boolean(true));
    a.set("attention_softmax_in_fp32", boolean(false));
    a.set("tensor_model_parallel_size", integer(plan.tp));
    a.set("pipeline_model_parallel_size", integer(plan.pp));
    a.set("vocab_file", tok.gpt2_bpe_files ? str(dir + "/vocab.json") : PyValue::none());
    a.set("merge_file", tok.gpt2_bpe_files ? str(dir + "/merges.txt") : PyValue::none());
    a.set("seq_length", integer(plan.seq_length));
    a.set("encoder_seq_length", integer(plan.seq_length));
    a.set("tokenizer_type", str(tok.tokenizer_type));
    a.set("tokenizer_name_or_path", tok.tokenizer_type == "PretrainedFromHF" && !tok.files.empty() ? str(dir) : PyValue::none());
    a.set("rank", integer(0));
    a.set("world_size", integer(static_cast<std::int64_t>(plan.tp) * plan.pp));
    a.set("data_parallel_size", integer(1));
    a.set("params_dtype", PyValue::global("torch", torch_dtype(plan.dtype)));
    a.set("consumed_train_samples", integer(0));
    a.set("consumed_valid_samples", integer(0));
    a.set("consumed_train_tokens", integer(0));
    a.set("gigaflos_no_embeds", floating(0.0));
    a.set("padded_vocab_size", integer(plan.padded_vocab));
    a.set("iteration", integer(0));
    a.set("mds_version", str(mds_version()));
    auto ns = PyValue::object("argparse", "Namespace", PyValue::tuple({}), /*newobj=*/true);
    ns.as_object().has_state = true;
    ns.as_object().state = d;
    return ns;
}

// BMD's AnnealingLR.state_dict() keys at step 0. A placeholder: the checkpoint carries no schedule,
// and both loaders compare it with the flags' unless --override-lr-scheduler.
PyValue lr_scheduler_placeholder() {
    auto d = PyValue::dict();
    auto& m = d.as_dict();
    m.set("max_lr", floating(0.0));
    m.set("warmup_steps", integer(0));
    m.set("num_steps", integer(0));
    m.set("warmup_tokens", integer(0));
    m.set("num_tokens", integer(0));
    m.set("decay_style", str("constant"));
    m.set("decay_steps", integer(1));
    m.set("min_lr", floating(0.0));
    return d;
}

PyValue torch_size(const std::vector<std::int64_t>& shape) {
    std::vector<PyValue> dims;
    for (auto x : shape) dims.push_back(integer(x));
    return PyValue::object("torch", "Size", PyValue::tuple({PyValue::tuple(std::move(dims))}));
}

// One OrderedDict per optimizer group: DeepSpeed name -> torch.Size of the TP shard (what
// reshape_plan.cpp's stage_param_shapes writes).
PyValue param_shapes(const Plan& plan, const Stage& st) {
    std::vector<PyValue> groups;
    for (const auto& g : st.groups) {
        auto od = PyValue::object("collections", "OrderedDict", PyValue::tuple({}));
        for (auto i : g.params) od.as_object().dict_items.set(plan.params[i].ds_name, torch_size(plan.params[i].shard));
        groups.push_back(od);
    }
    return PyValue::list(std::move(groups));
}

}  // namespace

PyValue mp_rank_root(const Plan& plan, int stage) {
    auto root = PyValue::dict();
    auto& r = root.as_dict();
    // DeepSpeed's engine keys (engine._save_checkpoint, pipeline engine: the weights are in the layer files).
    r.set("module", PyValue::none());
    r.set("buffer_names", PyValue::list());
    r.set("optimizer", PyValue::none());
    r.set("param_shapes", param_shapes(plan, plan.stages[static_cast<std::size_t>(stage)]));
    r.set("lr_scheduler", lr_scheduler_placeholder());
    r.set("sparse_tensor_module_names", PyValue::object("builtins", "set", PyValue::tuple({PyValue::list()})));
    r.set("skipped_steps", integer(0));
    r.set("global_steps", integer(0));
    r.set("global_samples", integer(0));
    r.set("dp_world_size", integer(1));
    r.set("mp_world_size", integer(static_cast<std::int64_t>(plan.tp) * plan.pp));
    // Megatron's client keys (BMD save_checkpoint), without RNG states.
    r.set("args", megatron_args(plan));
    r.set("checkpoint_version", floating(3.0));
    r.set("iteration", integer(0));
    r.set("tokens", integer(0));
    auto info = PyValue::dict();
    info.as_dict().set("padded_vocab_size", integer(plan.padded_vocab));
    info.as_dict().set("original_vocab_size", integer(plan.sizes.vocab));
    r.set("checkpoint_info", info);
    r.set("mds_version", str(mds_version()));
    r.set(kHfVocabSizeKey, integer(plan.sizes.vocab));
    return root;
}

std::vector<std::string> train_flags(const Plan& plan, const std::string& out) {
    const HfConfig& c = plan.folder->config();
    std::vector<std::string> f = {"--num-layers", std::to_string(plan.num_layers), "--hidden-size", std::to_string(plan.sizes.hidden),
                                  "--num-attention-heads", std::to_string(plan.sizes.heads)};
    if (plan.sizes.ffn != 4 * plan.sizes.hidden) f.insert(f.end(), {"--ffn-hidden-size", std::to_string(plan.sizes.ffn)});
    f.insert(f.end(), {"--seq-length", std::to_string(plan.seq_length), "--max-position-embeddings", std::to_string(plan.max_positions)});
    if (plan.alibi) f.insert(f.end(), {"--position-embedding-type", "alibi"});
    if (plan.embed_layernorm) f.push_back("--embed-layernorm");
    if (c.layer_norm_epsilon != 1e-5) f.insert(f.end(), {"--layernorm-epsilon", format_number(c.layer_norm_epsilon)});
    if (!plan.gelu.bias_gelu_fusion) f.push_back("--no-bias-gelu-fusion");
    if (plan.gelu.openai_gelu) f.push_back("--openai-gelu");
    if (plan.post_ln) f.push_back("--apply-residual-connection-post-layernorm");
    f.insert(f.end(), {"--tensor-model-parallel-size", std::to_string(plan.tp), "--pipeline-model-parallel-size", std::to_string(plan.pp)});
    if (plan.padded_vocab_divisible_by != 128) f.insert(f.end(), {"--make-vocab-size-divisible-by", std::to_string(plan.padded_vocab_divisible_by)});
    if (plan.dtype == DType::BF16) f.push_back("--bf16");
    if (plan.dtype == DType::F16) f.push_back("--fp16");
    const std::string tok = (fs::path(out) / kHfTokenizerFolder).string();
    if (plan.tokenizer.gpt2_bpe_files)
        f.insert(f.end(), {"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", tok + "/vocab.json", "--merge-file", tok + "/merges.txt"});
    else if (!plan.tokenizer.files.empty())
        f.insert(f.end(), {"--tokenizer-type", "PretrainedFromHF", "--tokenizer-name-or-path", tok});
    f.insert(f.end(), {"--load", out, "--finetune"});
    return f;
}

}  // namespace mds::ckpt::hf2ck_detail
