#include "ckpt/hf_to_ckpt_plan.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "mds/ckpt/partition.h"
#include "mds/ckpt/universal.h"  // ds_param_name
#include "mds/util/error.h"
#include "mds/util/safe_paths.h"  // in_quotes

namespace mds::ckpt::hf2ck_detail {
namespace fs = std::filesystem;

std::uint64_t Param::shard_bytes(DType dtype) const {
    std::uint64_t n = dtype_size(dtype);
    for (auto d : shard) n *= static_cast<std::uint64_t>(d);
    return n;
}

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

bool float_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// What the Hugging Face model computes, as Megatron-DeepSpeed's flags; every variant Megatron
// cannot compute is one reason, naming the config key (all reported together).
void model_variant(Plan& plan, const HfConfig& c) {
    std::vector<std::string> why;
    plan.alibi = plan.embed_layernorm = c.arch == HfArchitecture::Bloom;
    if (c.arch == HfArchitecture::Gpt2) {
        const std::string& act = c.activation_function;
        // transformers' ACT2FN: gelu_fast is the fused bias-GeLU's tanh form (0.7978845608), gelu_new
        // and gelu_pytorch_tanh the tanh form with sqrt(2 / pi) (--openai-gelu), gelu / gelu_python F.gelu.
        if (act == "gelu_fast") plan.gelu = {true, false};
        else if (act == "gelu_new" || act == "gelu_pytorch_tanh") plan.gelu = {false, true};
        else if (act == "gelu" || act == "gelu_python") plan.gelu = {false, false};
        else
            why.push_back("activation_function " + in_quotes(act) + ": Megatron's MLP computes a GeLU (gelu_fast: the default fused "
                          "bias-GeLU, gelu_new: --openai-gelu, gelu: --no-bias-gelu-fusion)");
        if (act == "gelu_pytorch_tanh")
            plan.notes.push_back("activation_function \"gelu_pytorch_tanh\" is the function of \"gelu_new\" (--openai-gelu); "
                                 "mds-ckpt-to-hf writes it back as \"gelu_new\"");
        if (act == "gelu_python")
            plan.notes.push_back("activation_function \"gelu_python\" is F.gelu (--no-bias-gelu-fusion); mds-ckpt-to-hf writes it back as \"gelu\"");
        if (!c.tie_word_embeddings)
            why.push_back("tie_word_embeddings false: Megatron's output layer multiplies by the word embedding itself; an untied "
                          "lm_head has no place in the checkpoint (mds-ckpt-to-hf's untied form, with the embedding LayerNorm of "
                          "--embed-layernorm folded into transformer.wte, cannot be unfolded: convert the original checkpoint)");
        if (!c.scale_attn_weights) why.push_back("scale_attn_weights false: Megatron always divides the attention scores by sqrt(head_dim)");
        if (c.scale_attn_by_inverse_layer_idx)
            why.push_back("scale_attn_by_inverse_layer_idx true: Megatron's attention scores are not divided by the layer number "
                          "(apply_query_key_layer_scaling multiplies it back)");
        if (c.add_cross_attention) why.push_back("add_cross_attention true: Megatron's GPT has no cross-attention");
        if (c.embedding_dropout != c.hidden_dropout)
            plan.notes.push_back("embd_pdrop " + std::to_string(c.embedding_dropout) + " differs from resid_pdrop " +
                                 std::to_string(c.hidden_dropout) + "; Megatron's one --hidden-dropout is resid_pdrop");
    } else {
        plan.gelu = {true, false};  // bloom_gelu_forward: the fused kernel's tanh GeLU
        plan.post_ln = c.apply_residual_connection_post_layernorm;
        if (!c.tie_word_embeddings)
            why.push_back("tie_word_embeddings false: Megatron's output layer multiplies by the word embedding itself; an untied "
                          "lm_head has no place in the checkpoint");
    }
    if (!why.empty()) {
        std::string all;
        for (const auto& w : why) all += (all.empty() ? "" : "; ") + w;
        throw Error(c.path + ": cannot convert this model to Megatron-DeepSpeed without changing what it computes: " + all);
    }
}

// The sizes and the parallel layout the request asks for, checked against the model.
void model_sizes(Plan& plan, const HfConfig& c, const HfToCkptOptions& o) {
    if (o.target_tp < 1) throw UsageError("--target-tp " + std::to_string(o.target_tp) + ": expected at least 1");
    if (o.target_pp < 1) throw UsageError("--target-pp " + std::to_string(o.target_pp) + ": expected at least 1");
    if (o.seq_length < 0) throw UsageError("--seq-length " + std::to_string(o.seq_length) + ": expected at least 1");
    plan.tp = o.target_tp;
    plan.pp = o.target_pp;
    plan.num_layers = c.num_layers;
    plan.sizes = {c.hidden_size, c.num_heads, c.ffn_hidden_size, c.vocab_size, c.n_positions};
    plan.padded_vocab_divisible_by = o.make_vocab_size_divisible_by;
    plan.padded_vocab = megatron_padded_vocab(c.vocab_size, o.make_vocab_size_divisible_by, plan.tp);
    if (c.arch == HfArchitecture::Gpt2) {
        plan.max_positions = c.n_positions;
        plan.seq_length = o.seq_length ? o.seq_length : c.n_positions;
        if (plan.seq_length > c.n_positions)
            throw UsageError("--seq-length " + std::to_string(plan.seq_length) + " is longer than the model's " + std::to_string(c.n_positions) +
                             " learned positions (n_positions in " + c.path + ")");
    } else {
        // ALiBi has no position table: BLOOM was trained at 2048, and Megatron skips the check of
        // max_position_embeddings for ALiBi models.
        plan.seq_length = o.seq_length ? o.seq_length : 2048;
        plan.max_positions = plan.seq_length;
    }
    if (c.num_heads % plan.tp != 0)
        throw Error(c.path + ": " + std::to_string(c.num_heads) + " attention heads do not split over --target-tp " + std::to_string(plan.tp) +
                    " (Megatron splits the fused QKV on head boundaries)");
    if (c.ffn_hidden_size % plan.tp != 0)
        throw Error(c.path + ": the MLP's " + std::to_string(c.ffn_hidden_size) + " units (" +
                    (c.arch == HfArchitecture::Gpt2 ? "n_inner" : "4 × hidden_size") + ") do not split over --target-tp " + std::to_string(plan.tp));
    if (plan.pp > c.num_layers)
        throw Error(c.path + ": " + std::to_string(c.num_layers) + " transformer layers cannot fill --target-pp " + std::to_string(plan.pp) +
                    " pipeline stages (every stage needs at least one)");
}

// Every tensor of the folder: a parameter of the model (its Megatron place), a buffer or tied head
// to ignore, or an error. Parameters are matched against megatron_parameters(), their shapes checked.
void match_tensors(Plan& plan, const HfFolder& folder) {
    const HfConfig& c = folder.config();
    const std::string arch = c.arch == HfArchitecture::Gpt2 ? "GPT2LMHeadModel" : "BloomForCausalLM";
    std::map<std::string, const HfFolder::Tensor*> by_place;  // megatron layer/name -> tensor
    auto key = [&](const MegatronPlace& p) { return std::to_string(megatron_layer_index(p, plan.num_layers)) + "/" + p.name; };
    std::vector<std::string> unknown;
    std::size_t buffers = 0;
    const HfFolder::Tensor* lm_head = nullptr;
    for (const auto& t : folder.tensors()) {
        if (hf_is_buffer(c.arch, t.name)) {
            ++buffers;
            continue;
        }
        if (t.name == "lm_head.weight") {
            lm_head = &t;
            continue;
        }
        const auto place = megatron_place(c.arch, t.name);
        if (!place || (place->part == MegatronPart::Block && place->block >= plan.num_layers)) {
            unknown.push_back(t.name);
            continue;
        }
        const auto [it, fresh] = by_place.emplace(key(*place), &t);
        if (!fresh) throw Error(folder.where(t) + " and " + in_quotes(it->second->name) + " are the same parameter (with and without the \"transformer.\" prefix)");
    }
    if (!unknown.empty()) {
        std::string list;
        for (std::size_t i = 0; i < unknown.size() && i < 5; ++i) list += (i ? ", " : "") + in_quotes(unknown[i]);
        if (unknown.size() > 5) list += " and " + std::to_string(unknown.size() - 5) + " more";
        throw Error(folder.weight_files()[folder.find(unknown.front())->file] + ": " + std::to_string(unknown.size()) + " tensor(s) with no place in a " + arch +
                    " of " + std::to_string(c.num_layers) + " layers (config.json): " + list);
    }
    if (buffers) plan.notes.push_back("ignored " + std::to_string(buffers) + " attention-mask buffers (attn.bias / attn.masked_bias), as transformers does");
    if (lm_head) plan.notes.push_back("ignored " + lm_head->name + ": tied to the word embedding (tie_word_embeddings), as transformers ties it");

    std::vector<std::string> missing;
    for (const auto& place : megatron_parameters(c.arch, plan.num_layers)) {
        const auto it = by_place.find(key(place));
        if (it == by_place.end()) {
            missing.push_back(hf_name_of(c.arch, place));
            continue;
        }
        const HfFolder::Tensor& t = *it->second;
        const auto want = hf_shape(place, plan.sizes);
        if (t.shape != want)
            throw Error(folder.where(t) + " has shape " + shape_text(t.shape) + "; config.json (" + std::to_string(c.num_layers) + " layers, hidden " +
                        std::to_string(c.hidden_size) + ", " + std::to_string(c.num_heads) + " heads, MLP " + std::to_string(c.ffn_hidden_size) +
                        ", vocabulary " + std::to_string(c.vocab_size) + (c.n_positions ? ", positions " + std::to_string(c.n_positions) : std::string()) +
                        ") says " + shape_text(want));
        if (!float_dtype(t.dtype))
            throw Error(folder.where(t) + " is " + dtype_name(t.dtype) + "; expected floating-point weights (F32, BF16 or F16)");
        Param p;
        p.place = place;
        p.layer = megatron_layer_index(place, plan.num_layers);
        p.source = &t;
        plan.params.push_back(std::move(p));
    }
    if (!missing.empty()) {
        std::string list;
        for (std::size_t i = 0; i < missing.size() && i < 5; ++i) list += (i ? ", " : "") + in_quotes(missing[i]);
        if (missing.size() > 5) list += " and " + std::to_string(missing.size() - 5) + " more";
        const std::string files = folder.index_file().empty() ? folder.weight_files().front() : folder.index_file();
        throw Error(files + ": " + std::to_string(missing.size()) + " tensor(s) of a " + arch + " of " + std::to_string(c.num_layers) +
                    " layers (config.json) missing: " + list);
    }
}

// The dtype of the output: the flag's, else the stored weights' (all alike), else config.json's
// torch_dtype, else the word embedding's; tensors of another dtype are converted.
void settle_dtype(Plan& plan, const HfConfig& c, const HfToCkptOptions& o) {
    std::set<DType> seen;
    for (const auto& p : plan.params) seen.insert(p.source->dtype);
    if (o.dtype) plan.dtype = *o.dtype;
    else if (seen.size() == 1) plan.dtype = *seen.begin();
    else if (c.dtype) plan.dtype = *c.dtype;
    else plan.dtype = plan.params.front().source->dtype;
    std::size_t converted = 0;
    std::set<std::string> from;
    for (const auto& p : plan.params)
        if (p.source->dtype != plan.dtype) {
            ++converted;
            from.insert(dtype_name(p.source->dtype));
        }
    if (converted) {
        std::string names;
        for (const auto& f : from) names += (names.empty() ? "" : "/") + f;
        plan.notes.push_back(std::to_string(converted) + " tensor(s) converted from " + names + " to " + dtype_name(plan.dtype) +
                             (o.dtype ? " (--dtype)" : " (the dtype of most weights; --dtype chooses)"));
    }
}

// Megatron's weight-decay rule (BMD _get_params_for_weight_decay_optimization, specs §5.1):
// LayerNorms' parameters and every bias go without.
bool megatron_weight_decay(const Param& p) {
    const std::string& n = p.place.name;
    if (p.place.part == MegatronPart::FinalNorm || n.ends_with("bias")) return false;
    return n.find("layernorm.") == std::string::npos && !n.starts_with("word_embeddings.norm.");
}

// Shapes, TP layouts and DeepSpeed names of every parameter.
void shard_params(Plan& plan) {
    for (auto& p : plan.params) {
        p.shape = megatron_shape(p.place, plan.sizes);
        p.vocab = p.place.part == MegatronPart::Embedding && p.place.name == "word_embeddings.weight";
        if (p.vocab) p.shape[0] = plan.padded_vocab;
        p.layout = tp_layout(p.place.name, false);
        p.shard = tp_shard_shape(p.layout, p.shape, plan.tp, hf_name_of(plan.arch, p.place));
        p.weight_decay = megatron_weight_decay(p);
        p.ds_name = ds_param_name(p.layer, p.place.name, 1);
    }
    plan.layers.clear();
    for (const auto& p : plan.params)
        if (plan.layers.empty() || plan.layers.back() != p.layer) plan.layers.push_back(p.layer);
}

// The stages DeepSpeed's PipelineModule cuts Megatron-DeepSpeed's GPTModelPipe into, with each
// stage's parameters in traversal order (the tied embedding first, its LayerNorm only on the first
// stage, §9) and Megatron's three optimizer groups: what mds-ckpt-reshape lays out (reshape_plan.cpp).
void plan_stages(Plan& plan, const HfToCkptOptions& o) {
    auto specs = gpt_pipe_specs(plan.layers, plan.dtype != DType::F32);
    std::map<int, std::int64_t> layer_numel;
    for (const auto& p : plan.params) {
        std::int64_t n = 1;
        for (auto d : p.shard) n *= d;
        layer_numel[p.layer] += n;
    }
    for (auto& s : specs) {
        if (s.layer >= 0) s.parameters = layer_numel[s.layer];
        else if (s.tied_embedding) s.parameters = layer_numel[1];
    }
    plan.partition_method = o.partition_method.empty() ? "type:transformer" : o.partition_method;
    const auto parts = partition_pipe_specs(specs, plan.partition_method, plan.pp, o.partition_algorithm);
    for (int s = 0; s < plan.pp; ++s) {
        Stage st;
        int blocks = 0;
        for (int i = parts[static_cast<std::size_t>(s)]; i < parts[static_cast<std::size_t>(s) + 1]; ++i) {
            const auto& spec = specs[static_cast<std::size_t>(i)];
            if (spec.layer >= 0) st.layers.push_back(spec.layer);
            st.tied_embedding |= spec.tied_embedding;
            blocks += spec.type_name == "ParallelTransformerLayerPipe";
        }
        if (blocks == 0)
            throw Error("pipeline stage " + std::to_string(s) + " of " + std::to_string(plan.pp) + " gets no transformer layer with partition method '" +
                        plan.partition_method + "'; Megatron-DeepSpeed cannot run such a stage: use fewer stages or another --partition-method");
        for (std::size_t i = 0; i < plan.params.size(); ++i)
            if (plan.params[i].layer == 1 && st.tied_embedding && (s == 0 || !plan.params[i].place.name.starts_with("word_embeddings.norm.")))
                st.params.push_back(i);
        for (int layer : st.layers)
            for (std::size_t i = 0; i < plan.params.size(); ++i)
                if (layer != 1 && plan.params[i].layer == layer) st.params.push_back(i);
        std::vector<bool> decay;
        for (auto i : st.params) decay.push_back(plan.params[i].weight_decay);
        st.groups = megatron_param_groups(st.params, decay, 3);
        plan.stages.push_back(std::move(st));
    }
}

// The tokenizer files of the folder that go into hf_tokenizer/, and the Megatron tokenizer they make.
void plan_tokenizer(Plan& plan, const HfFolder& folder, const HfToCkptOptions& o) {
    plan.tokenizer.tokenizer_type = plan.arch == HfArchitecture::Gpt2 ? "GPT2BPETokenizer" : "PretrainedFromHF";
    if (!o.copy_tokenizer) return;
    static const char* const kFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                                         "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja"};
    for (const char* f : kFiles) {
        std::error_code ec;
        if (fs::is_regular_file(fs::path(folder.directory()) / f, ec)) plan.tokenizer.files.push_back(f);
    }
    const auto has = [&](const char* f) { return std::find(plan.tokenizer.files.begin(), plan.tokenizer.files.end(), f) != plan.tokenizer.files.end(); };
    plan.tokenizer.gpt2_bpe_files = has("vocab.json") && has("merges.txt");
    if (plan.tokenizer.gpt2_bpe_files) plan.tokenizer.tokenizer_type = "GPT2BPETokenizer";
    else if (has("tokenizer.json")) plan.tokenizer.tokenizer_type = "PretrainedFromHF";
    if (plan.tokenizer.files.empty())
        plan.notes.push_back(folder.directory() + " holds no tokenizer files (tokenizer.json, vocab.json + merges.txt); the checkpoint names none");
}

}  // namespace

Plan make_plan(const HfFolder& folder, const HfToCkptOptions& o) {
    Plan plan;
    plan.folder = &folder;
    const HfConfig& c = folder.config();
    plan.arch = c.arch;
    model_variant(plan, c);
    model_sizes(plan, c, o);
    match_tensors(plan, folder);
    settle_dtype(plan, c, o);
    shard_params(plan);
    plan_stages(plan, o);
    plan_tokenizer(plan, folder, o);
    return plan;
}

}  // namespace mds::ckpt::hf2ck_detail
