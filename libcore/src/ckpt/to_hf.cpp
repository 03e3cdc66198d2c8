#include "mds/ckpt/to_hf.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "ckpt/hf_tokenizer.h"
#include "ckpt/transpose_rows.h"
#include "mds/ckpt/ds_checkpoint.h"
#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/hf_to_ckpt.h"  // kHfVocabSizeKey
#include "mds/ckpt/safetensors.h"
#include "mds/util/error.h"
#include "mds/util/parallel.h"  // parallel_for_with_worker, workers_or_cores
#include "mds/util/files.h"
#include "mds/util/safe_paths.h"  // refuse_overlap, check_replaceable_output, write_output_folder

namespace mds::ckpt {
namespace fs = std::filesystem;
namespace {

// EmbedNorm: the word embedding with Megatron-DeepSpeed's --embed-layernorm applied to every row
// (LayerNorm(word_embeddings.weight[token]) is a function of the token alone; see convert_to_hf).
enum class Transform { None, Transpose, QkvReorder, QkvReorderTranspose, EmbedNorm };

// BMD's embedding LayerNorm is MixedFusedLayerNorm(hidden) at its default eps, whatever
// --layernorm-epsilon says (megatron/mpu/layers.py, VocabParallelEmbedding).
constexpr double kEmbedLayerNormEps = 1e-5;

struct Entry {
    std::string hf_name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;  // the output shape
    int layer = 0;                    // on-disk layer index
    std::string name;                 // inside the layer file
    Transform transform = Transform::None;
    std::uint64_t bytes() const {
        std::uint64_t n = dtype_size(dtype);
        for (auto d : shape) n *= static_cast<std::uint64_t>(d);
        return n;
    }
};

// Megatron's fused QKV rows [n, 3, d] to GPT2's [3, n, d]: the source row of output row
// (c * n + head) * d + e is (head * 3 + c) * d + e.
std::int64_t qkv_source_row(std::int64_t out_row, std::int64_t n, std::int64_t d) {
    const std::int64_t c = out_row / (n * d), head = out_row / d % n, e = out_row % d;
    return (head * 3 + c) * d + e;
}

// Each row of `table` [rows, h] through LayerNorm(weight, bias, eps), in double, rounded to the
// table's dtype: what Megatron's fused LayerNorm (fp32 statistics, output in the input's dtype)
// computes for that token at every position.
void layer_norm_rows(GlobalTensor& table, const GlobalTensor& weight, const GlobalTensor& bias,
                     const std::string& where) {
    if (table.shape.size() != 2 || weight.shape.size() != 1 || bias.shape.size() != 1 || weight.shape[0] != table.shape[1] ||
        bias.shape[0] != table.shape[1])
        throw Error(where + ": word_embeddings.norm.weight / bias do not match the embedding's width");
    const std::int64_t rows = table.shape[0], h = table.shape[1];
    const std::size_t es = dtype_size(table.dtype), ws = dtype_size(weight.dtype), bs = dtype_size(bias.dtype);
    std::vector<double> w(static_cast<std::size_t>(h)), b(static_cast<std::size_t>(h)), x(static_cast<std::size_t>(h));
    for (std::int64_t j = 0; j < h; ++j) {
        w[static_cast<std::size_t>(j)] = load_float(weight.dtype, weight.data.data() + static_cast<std::size_t>(j) * ws);
        b[static_cast<std::size_t>(j)] = load_float(bias.dtype, bias.data.data() + static_cast<std::size_t>(j) * bs);
    }
    for (std::int64_t i = 0; i < rows; ++i) {
        std::byte* row = table.data.data() + static_cast<std::size_t>(i * h) * es;
        double mean = 0;
        for (std::int64_t j = 0; j < h; ++j) mean += x[static_cast<std::size_t>(j)] = load_float(table.dtype, row + static_cast<std::size_t>(j) * es);
        mean /= static_cast<double>(h);
        double var = 0;
        for (double v : x) var += (v - mean) * (v - mean);
        const double inv = 1.0 / std::sqrt(var / static_cast<double>(h) + kEmbedLayerNormEps);
        for (std::int64_t j = 0; j < h; ++j) {
            const auto k = static_cast<std::size_t>(j);
            store_float(table.dtype, static_cast<float>((x[k] - mean) * inv * w[k] + b[k]), row + k * es);
        }
    }
}

const char* torch_dtype_name(DType t) {
    switch (t) {
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::F32: return "float32";
    default: return "float32";
    }
}

double float_arg(const DsCheckpoint& ck, const char* name, double fallback) {
    const auto* v = ck.arg(name);
    if (!v) return fallback;
    if (v->type() == PyType::Float) return v->as_float();
    if (v->type() == PyType::Int) return static_cast<double>(v->as_int());
    return fallback;
}

bool bool_arg(const DsCheckpoint& ck, const char* name, bool fallback) {
    const auto* v = ck.arg(name);
    return v && v->type() == PyType::Bool ? v->as_bool() : fallback;
}

// "absolute", "alibi" or "rotary": BMD pickles megatron.enums.PositionEmbeddingType(n).
std::string position_embedding_type(const DsCheckpoint& ck) {
    const auto* v = ck.arg("position_embedding_type");
    if (!v || v->is_none()) return "absolute";
    if (v->type() == PyType::Str) return v->as_str();
    if (v->type() == PyType::Object && v->as_object().args.type() == PyType::Tuple && !v->as_object().args.as_tuple().empty()) {
        const auto& a = v->as_object().args.as_tuple()[0];
        if (a.type() == PyType::Int) return a.as_int() == 1 ? "rotary" : a.as_int() == 3 ? "alibi" : "absolute";
    }
    throw Error(ck.directory() + ": cannot read args.position_embedding_type " + v->repr(80));
}

std::string gpt2_block_name(const std::string& name, Transform& tr) {
    static const std::map<std::string, std::pair<std::string, Transform>> kMap = {
        {"input_layernorm.weight", {"ln_1.weight", Transform::None}},
        {"input_layernorm.bias", {"ln_1.bias", Transform::None}},
        {"self_attention.query_key_value.weight", {"attn.c_attn.weight", Transform::QkvReorderTranspose}},
        {"self_attention.query_key_value.bias", {"attn.c_attn.bias", Transform::QkvReorder}},
        {"self_attention.dense.weight", {"attn.c_proj.weight", Transform::Transpose}},
        {"self_attention.dense.bias", {"attn.c_proj.bias", Transform::None}},
        {"post_attention_layernorm.weight", {"ln_2.weight", Transform::None}},
        {"post_attention_layernorm.bias", {"ln_2.bias", Transform::None}},
        {"mlp.dense_h_to_4h.weight", {"mlp.c_fc.weight", Transform::Transpose}},
        {"mlp.dense_h_to_4h.bias", {"mlp.c_fc.bias", Transform::None}},
        {"mlp.dense_4h_to_h.weight", {"mlp.c_proj.weight", Transform::Transpose}},
        {"mlp.dense_4h_to_h.bias", {"mlp.c_proj.bias", Transform::None}},
    };
    const auto it = kMap.find(name);
    if (it == kMap.end()) return "";
    tr = it->second.second;
    return it->second.first;
}

bool bloom_block_key(const std::string& name) {
    static const char* kKeys[] = {"input_layernorm.weight", "input_layernorm.bias", "self_attention.query_key_value.weight",
                                  "self_attention.query_key_value.bias", "self_attention.dense.weight",
                                  "self_attention.dense.bias", "post_attention_layernorm.weight", "post_attention_layernorm.bias",
                                  "mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias", "mlp.dense_4h_to_h.weight",
                                  "mlp.dense_4h_to_h.bias"};
    for (const char* k : kKeys)
        if (name == k) return true;
    return false;
}

void copy_file(const std::string& from, const std::string& to) {
    AtomicOutput out(to);
    out.append_file(from);
    out.commit();
}

// Nothing, or with --overwrite an earlier export (config.json) or an empty folder, stands at the output's place.
void check_destination(const fs::path& dir, bool overwrite) {
    check_replaceable_output(dir, overwrite, "config.json", "config.json", "export");
}

using Note = std::function<void(const std::string&)>;

// The GeLU of BMD's ParallelMLP (megatron/model/transformer.py), by its precedence: the fused
// bias-GeLU whenever args.bias_gelu_fusion is on (its default; the tanh approximation, 0.79788456),
// else --openai-gelu (tanh, sqrt(2/pi) to 16 digits), else --onnx-safe's erf_gelu (erf of x / 1.41421),
// else F.gelu (exact erf). GLU models are refused before this matters.
enum class Gelu { FusedTanh, OpenaiTanh, OnnxErf, Erf };

Gelu gelu_kind(const DsCheckpoint& ck) {
    if (bool_arg(ck, "bias_gelu_fusion", true)) return Gelu::FusedTanh;
    if (bool_arg(ck, "openai_gelu", false)) return Gelu::OpenaiTanh;
    if (bool_arg(ck, "onnx_safe", false)) return Gelu::OnnxErf;
    return Gelu::Erf;
}

// transformers' ACT2FN name computing the same function: gelu_fast is x * 0.7978845608 * (1 + 0.044715 x^2)
// inside the tanh (the fused kernel's form), gelu_new the same with sqrt(2/pi) (OpenAI's), gelu is F.gelu.
const char* gpt2_activation(Gelu g) {
    switch (g) {
    case Gelu::FusedTanh: return "gelu_fast";
    case Gelu::OpenaiTanh: return "gelu_new";
    default: return "gelu";
    }
}

// What the checkpoint's args say of the model, and the Hugging Face architecture it becomes.
struct ModelArgs {
    std::int64_t num_layers = 0, hidden_size = 0, num_heads = 0;
    std::int64_t padded_vocab_size = 0, ffn_hidden_size = 0, max_positions = 0;
    std::int64_t vocab_size = 0;  // rows exported (exported_vocab_size): config.json's vocab_size
    std::string position_embedding;  // "absolute", "alibi" or "rotary"
    bool embed_layernorm = false;
    bool bloom = false;  // BloomForCausalLM, else GPT2LMHeadModel
    // GPT with absolute positions AND --embed-layernorm (tr8-104B): Megatron-DeepSpeed normalises the
    // word embedding alone, before the position embedding is added (VocabParallelEmbedding.forward),
    // so LayerNorm(W[token]) depends on the token only: GPT2's wte holds the normalised rows and an
    // untied lm_head holds W itself, which the output layer multiplies by (tied in Megatron).
    bool fold_embed_ln = false;
    Gelu gelu = Gelu::FusedTanh;
    bool post_ln = false;  // --apply-residual-connection-post-layernorm
};

// One layer file per index: the embedding, num_layers blocks, the final norm.
void check_layer_files(const DsCheckpoint& ck, std::int64_t num_layers) {
    const auto& layers = ck.layers();
    if (static_cast<std::int64_t>(layers.size()) == num_layers + 2) return;
    std::string present, gap;
    for (std::size_t i = 0; i < layers.size(); ++i) {
        present += (i ? ", " : "") + std::to_string(layers[i]);
        // Blocks are numbered consecutively: a hole between two of them is a missing file.
        if (gap.empty() && i >= 2 && i + 1 < layers.size() && layers[i] - layers[i - 1] > 1)
            gap = "; " + ds_layer_file(layers[i - 1] + 1, 0) + " looks missing";
    }
    throw Error(ck.directory() + ": layer files for indices " + present + " (" + std::to_string(layers.size()) + "), args.num_layers " +
                std::to_string(num_layers) + " needs " + std::to_string(num_layers + 2) + " (embedding, blocks, final norm)" + gap);
}

// The model variants of the args (megatron/arguments.py) that the target architecture cannot compute,
// one reason each naming the flag; empty when the export is faithful.
std::vector<std::string> unsupported_variants(const DsCheckpoint& ck, const ModelArgs& m) {
    std::vector<std::string> why;
    const std::string arch = m.bloom ? "BLOOM" : "GPT2";
    if (const auto* glu = ck.arg("glu_activation"); glu && !glu->is_none())
        why.push_back("--glu-activation " + (glu->type() == PyType::Str ? glu->as_str() : glu->repr(40)) +
                      " (args.glu_activation): the MLP gates one half of dense_h_to_4h with the other; GPT2 and BLOOM have a plain "
                      "MLP, and the transformers models with a gated MLP (Llama, Gemma, ...) have RMSNorm and rotary positions, "
                      "not LayerNorm with biases and learned or ALiBi positions");
    if (const auto* kv = ck.arg("kv_channels"); kv && kv->type() == PyType::Int && kv->as_int() * m.num_heads != m.hidden_size)
        why.push_back("--kv-channels " + std::to_string(kv->as_int()) + " (args.kv_channels): heads of " + std::to_string(kv->as_int()) +
                      " channels (" + std::to_string(kv->as_int() * m.num_heads) + " in all), but " + arch +
                      " makes every head hidden_size / num_attention_heads = " + std::to_string(m.hidden_size / m.num_heads) + " wide");
    if (!m.bloom && bool_arg(ck, "apply_residual_connection_post_layernorm", false))
        why.push_back("--apply-residual-connection-post-layernorm (args.apply_residual_connection_post_layernorm): the residual "
                      "branches start from the LayerNorms' outputs; GPT2 has no such option (BLOOM's config has, for ALiBi models)");
    if (m.bloom && (m.gelu == Gelu::Erf || m.gelu == Gelu::OnnxErf))
        why.push_back(std::string("--no-bias-gelu-fusion") + (m.gelu == Gelu::OnnxErf ? " with --onnx-safe" : "") +
                      " (args.bias_gelu_fusion false): the MLP computes the exact erf GeLU; transformers' BLOOM always computes "
                      "the tanh approximation");
    return why;
}

// Reads Megatron's args, checks the layer files against them and settles the architecture.
ModelArgs read_model_args(const DsCheckpoint& ck, HfModelType requested) {
    const std::string& where = ck.directory();
    ModelArgs m;
    m.num_layers = ck.int_arg("num_layers");
    m.hidden_size = ck.int_arg("hidden_size");
    m.num_heads = ck.int_arg("num_attention_heads");
    m.padded_vocab_size = ck.int_arg("padded_vocab_size");
    const auto is_int = [&](const char* name) { return ck.arg(name) && ck.arg(name)->type() == PyType::Int; };
    m.ffn_hidden_size = is_int("ffn_hidden_size") ? ck.int_arg("ffn_hidden_size") : 4 * m.hidden_size;
    m.max_positions = is_int("max_position_embeddings") ? ck.int_arg("max_position_embeddings") : ck.int_arg("seq_length");
    check_layer_files(ck, m.num_layers);
    if (m.hidden_size % m.num_heads != 0)
        throw Error(where + ": hidden_size " + std::to_string(m.hidden_size) + " is not a multiple of num_attention_heads");
    m.position_embedding = position_embedding_type(ck);
    m.embed_layernorm = bool_arg(ck, "embed_layernorm", false);
    const std::string& pos = m.position_embedding;
    const bool embed_ln = m.embed_layernorm;
    if (requested == HfModelType::Auto) requested = pos == "alibi" ? HfModelType::Bloom : HfModelType::Gpt2;
    m.bloom = requested == HfModelType::Bloom;
    if (m.bloom && (pos != "alibi" || !embed_ln || m.ffn_hidden_size != 4 * m.hidden_size))
        throw Error(where + ": BLOOM needs ALiBi, the embedding LayerNorm and ffn_hidden_size = 4 × hidden_size (position "
                    "embeddings: " + pos + ", embed_layernorm " + (embed_ln ? "on" : "off") + ", ffn " +
                    std::to_string(m.ffn_hidden_size) + ")");
    if (!m.bloom && pos != "absolute")
        throw Error(where + ": GPT2 needs learned absolute position embeddings, the checkpoint has " + pos +
                    (pos == "alibi" && embed_ln ? std::string(" (use --model-type bloom)") : std::string(" (no GPT2 or BLOOM equivalent)")));
    m.fold_embed_ln = !m.bloom && embed_ln;
    m.gelu = gelu_kind(ck);
    m.post_ln = bool_arg(ck, "apply_residual_connection_post_layernorm", false);
    if (const auto why = unsupported_variants(ck, m); !why.empty()) {
        std::string all;
        for (const auto& w : why) all += (all.empty() ? "" : "; ") + w;
        throw Error(where + ": cannot export this model as " + (m.bloom ? "BLOOM" : "GPT2") + " without changing what it computes: " + all);
    }
    return m;
}

// Names tensor `e.name` of the embedding's layer file. False when it is left out (the embedding
// LayerNorm folded into the rows); `lm_head` gets the untied output layer when folding.
bool name_embedding_tensor(const ModelArgs& m, Entry& e, std::optional<Entry>& lm_head) {
    const std::string& name = e.name;
    if (m.fold_embed_ln && (name == "word_embeddings.norm.weight" || name == "word_embeddings.norm.bias")) return false;
    if (name == "word_embeddings.weight") e.hf_name = m.bloom ? "transformer.word_embeddings.weight" : "transformer.wte.weight";
    if (m.fold_embed_ln && name == "word_embeddings.weight") {
        e.transform = Transform::EmbedNorm;
        Entry head = e;
        head.hf_name = "lm_head.weight";
        head.transform = Transform::None;
        lm_head = head;
    } else if (m.bloom && name == "word_embeddings.norm.weight") {
        e.hf_name = "transformer.word_embeddings_layernorm.weight";
    } else if (m.bloom && name == "word_embeddings.norm.bias") {
        e.hf_name = "transformer.word_embeddings_layernorm.bias";
    } else if (!m.bloom && name == "position_embeddings.weight") {
        e.hf_name = "transformer.wpe.weight";
    }
    return true;
}

// Names tensor `e.name` of block `block` (0-based): BLOOM keeps Megatron's names, GPT2 renames and
// lays out (Conv1D weights are transposed, fused QKV reordered).
void name_block_tensor(const ModelArgs& m, std::size_t block, Entry& e) {
    const std::string prefix = "transformer.h." + std::to_string(block) + ".";
    if (m.bloom) {
        if (bloom_block_key(e.name)) e.hf_name = prefix + e.name;
    } else {
        const auto hf = gpt2_block_name(e.name, e.transform);
        if (!hf.empty()) e.hf_name = prefix + hf;
    }
}

// The folded embedding LayerNorm needs its weight and bias, and the untied lm_head goes last.
void add_untied_lm_head(const DsCheckpoint& ck, const std::optional<Entry>& lm_head, std::vector<Entry>& entries, const Note& note) {
    const auto& layers = ck.layers();
    if (!lm_head) throw Error(ck.layer_file(layers.front(), 0) + ": no word_embeddings.weight (expected the embedding in the first layer file)");
    const auto l0 = ck.open_layer(layers.front());
    const auto names = l0.names();
    for (const char* norm : {"word_embeddings.norm.weight", "word_embeddings.norm.bias"})
        if (std::find(names.begin(), names.end(), norm) == names.end())
            throw Error(ck.layer_file(layers.front(), 0) + ": args.embed_layernorm is on but " + in_quotes(norm) + " is missing");
    entries.push_back(*lm_head);
    note("the embedding LayerNorm (--embed-layernorm) is folded into transformer.wte.weight; lm_head.weight holds the "
         "unnormalised embedding (config.json: tie_word_embeddings false)");
}

// The tensors to write, in order, with their Hugging Face names and output shapes (from the
// shards' headers only).
std::vector<Entry> plan_tensors(const DsCheckpoint& ck, const ModelArgs& m, const Note& note) {
    const auto& layers = ck.layers();
    std::vector<Entry> entries;
    std::optional<Entry> lm_head;  // fold_embed_ln: the untied output layer, written last
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const auto layer = ck.open_layer(layers[i]);
        for (const auto& name : layer.names()) {
            Entry e;
            e.layer = layers[i];
            e.name = name;
            e.dtype = layer.dtype(name);
            e.shape = layer.shape(name);
            if (i == 0) {
                if (!name_embedding_tensor(m, e, lm_head)) continue;
            } else if (i + 1 == layers.size()) {
                if (name == "weight" || name == "bias") e.hf_name = "transformer.ln_f." + name;
            } else {
                name_block_tensor(m, i - 1, e);
            }
            if (e.hf_name.empty())
                throw Error(ck.layer_file(layers[i], 0) + ": tensor " + in_quotes(name) + " has no place in a " + (m.bloom ? "BLOOM" : "GPT2") + " model");
            if (e.transform == Transform::Transpose || e.transform == Transform::QkvReorderTranspose) {
                if (e.shape.size() != 2) throw Error(ck.layer_file(layers[i], 0) + ": " + in_quotes(name) + " is not a matrix");
                std::swap(e.shape[0], e.shape[1]);
            }
            entries.push_back(std::move(e));
        }
    }
    if (m.fold_embed_ln) add_untied_lm_head(ck, lm_head, entries, note);
    if (entries.empty()) throw Error(ck.directory() + ": no tensors");
    return entries;
}

// The embedding decides which token ids exist: config.json's vocab_size and every tokenizer id
// must fit it, or transformers fails at the first forward (IndexError) instead of here.
std::int64_t embedding_rows(const DsCheckpoint& ck, const ModelArgs& m, const std::vector<Entry>& entries) {
    const auto embedding = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) {
        return e.hf_name == (m.bloom ? "transformer.word_embeddings.weight" : "transformer.wte.weight");
    });
    if (embedding == entries.end() || embedding->shape.size() != 2)
        throw Error(ck.layer_file(ck.layers().front(), 0) + ": no word_embeddings.weight matrix (expected the embedding in the first layer file)");
    const std::int64_t rows = embedding->shape[0];
    if (rows != m.padded_vocab_size)
        throw Error(ck.directory() + ": args.padded_vocab_size " + std::to_string(m.padded_vocab_size) + " but the embedding has " +
                    std::to_string(rows) + " rows; config.json's vocab_size would not match the weights");
    return rows;
}

// The vocabulary rows to export: --vocab-size, else the Hugging Face size that mds-hf-to-ckpt
// recorded (mp_rank_00's mds_hf_vocab_size), else all of the embedding's rows (the padded
// vocabulary, as trained). Megatron's padding rows past it are dropped.
std::int64_t exported_vocab_size(const DsCheckpoint& ck, std::int64_t rows, const ToHfOptions& options) {
    std::int64_t n = options.vocab_size;
    std::string from = "--vocab-size";
    if (n == 0) {
        const std::string mp0 = (fs::path(ck.directory()) / ds_mp_rank_file(0)).string();
        const TorchFile f(mp0, options.verify);
        const PyValue* v = f.root().type() == PyType::Dict ? f.root().find(kHfVocabSizeKey) : nullptr;
        if (!v || v->is_none()) return rows;
        if (v->type() != PyType::Int) throw Error(mp0 + ": " + kHfVocabSizeKey + " is " + v->repr(60) + ", not an int");
        n = v->as_int();
        from = mp0 + ": " + kHfVocabSizeKey;
    }
    if (n < 1 || n > rows)
        throw Error(from + " " + std::to_string(n) + ": expected 1 to the embedding's " + std::to_string(rows) + " rows");
    return n;
}

// The word embedding (and the untied lm_head, the same rows) cut to `vocab_size` rows: write_tensor
// writes the first Entry::bytes() of them.
void cut_vocabulary(std::vector<Entry>& entries, std::int64_t vocab_size) {
    for (auto& e : entries)
        if (e.name == "word_embeddings.weight") e.shape[0] = vocab_size;
}

// Shards of at most max_shard_bytes (a larger tensor gets a shard of its own): entry indices.
std::vector<std::vector<std::size_t>> plan_shards(const std::vector<Entry>& entries, std::uint64_t max_shard_bytes) {
    std::vector<std::vector<std::size_t>> shards(1);
    std::uint64_t in_shard = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const auto b = entries[i].bytes();
        if (!shards.back().empty() && in_shard + b > max_shard_bytes) {
            shards.emplace_back();
            in_shard = 0;
        }
        shards.back().push_back(i);
        in_shard += b;
    }
    return shards;
}

// The layer files the workers read from, each opened (mapped, its pickles read) on first use and
// unmapped when its last tensor is written. The untied lm_head, last, keeps the first one open.
class LayerCache {
public:
    LayerCache(const DsCheckpoint& ck, const std::vector<Entry>& entries) : ck_(ck) {
        for (const auto& e : entries) ++left_[e.layer];
    }
    std::shared_ptr<const DsCheckpoint::Layer> get(int layer) {
        std::lock_guard lock(mu_);
        auto& slot = open_[layer];
        if (!slot) slot = std::make_shared<const DsCheckpoint::Layer>(ck_.open_layer(layer));
        return slot;
    }
    // One tensor of `layer` is written.
    void done(int layer) {
        std::lock_guard lock(mu_);
        if (--left_[layer] == 0) open_.erase(layer);
    }

private:
    const DsCheckpoint& ck_;
    std::mutex mu_;
    std::map<int, std::size_t> left_;
    std::map<int, std::shared_ptr<const DsCheckpoint::Layer>> open_;
};

// Consecutive bytes of one output file from a tensor's offset on, written with pwrite by the worker
// that converts the tensor; the kernel is asked to start writing each piece to disk at once, so that
// the final fsync has little left to wait for.
class TensorSink {
public:
    TensorSink(AtomicOutput& out, std::uint64_t offset) : out_(out), start_(offset), pos_(offset) {}
    void put(std::span<const std::byte> bytes) {
        constexpr std::size_t kPiece = std::size_t{8} << 20;
        while (!bytes.empty()) {
            const std::size_t n = std::min(kPiece, bytes.size());
            out_.write_at(pos_, bytes.data(), n);
            out_.start_writeback(pos_, n);
            pos_ += n;
            bytes = bytes.subspan(n);
        }
    }
    std::uint64_t written() const { return pos_ - start_; }

private:
    AtomicOutput& out_;
    std::uint64_t start_, pos_;
};

// A tensor's bytes as they lie on disk: its TP shards, contiguous and row-major, joined along dim 0
// (ColumnParallel) or dim 1 (RowParallel) -- or one piece holding the whole tensor (Replicated): a
// shard of TP 1, or the tensor merged in memory where the shards cannot be used as they are
// (replicas to average, strided views, fused QKV rows of checkpoint_version < 2).
struct Pieces {
    TpRule join = TpRule::Replicated;
    std::vector<std::span<const std::byte>> bytes;
    std::vector<std::vector<std::int64_t>> shapes;
    GlobalTensor merged;  // owns the bytes of the merged form
};

Pieces tensor_pieces(const DsCheckpoint::Layer& layer, const std::string& name, bool need_merged) {
    Pieces p;
    const auto shards = layer.tp_shards(name);
    const auto rule = tp_rule(name);
    const bool qkv = name.find("query_key_value.") != std::string::npos;
    bool direct = !need_merged && (rule != TpRule::Replicated || shards.size() == 1) && !(qkv && layer.checkpoint_version() < 2.0);
    for (const auto& s : shards) direct = direct && s.contiguous();
    if (!direct) {
        p.merged = layer.merge(name);
        p.bytes = {p.merged.data};
        p.shapes = {p.merged.shape};
        return p;
    }
    p.join = shards.size() == 1 ? TpRule::Replicated : rule;
    for (const auto& s : shards) {
        p.bytes.push_back(s.bytes());  // checks the storage's CRC-32 once
        p.shapes.push_back(s.shape);
    }
    return p;
}

std::size_t row_bytes_of(const std::vector<std::int64_t>& shape, std::size_t esize) {
    std::size_t n = esize;
    for (std::size_t j = 1; j < shape.size(); ++j) n *= static_cast<std::size_t>(shape[j]);
    return n;
}

// The rows of the pieces one after the other (not for RowParallel pieces, whose rows are split).
std::vector<const std::byte*> stacked_rows(const Pieces& p, std::size_t esize) {
    std::vector<const std::byte*> rows;
    for (std::size_t k = 0; k < p.bytes.size(); ++k) {
        const std::size_t rb = row_bytes_of(p.shapes[k], esize);
        const std::int64_t n = p.shapes[k].empty() ? 1 : p.shapes[k][0];
        for (std::int64_t i = 0; i < n; ++i) rows.push_back(p.bytes[k].data() + static_cast<std::size_t>(i) * rb);
    }
    return rows;
}

// Output pieces are formed in `scratch` about this much at a time: they stay in the cache between
// the converting pass and write()'s copy into the page cache.
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

// Writes rows (each `row_bytes`) given by pointers, gathered a chunk at a time.
void put_rows(const std::vector<const std::byte*>& rows, std::size_t row_bytes, TensorSink& sink, std::vector<std::byte>& scratch) {
    const std::size_t per_chunk = std::max<std::size_t>(1, kChunkBytes / row_bytes);
    scratch.resize(std::max(scratch.size(), per_chunk * row_bytes));
    for (std::size_t i0 = 0; i0 < rows.size(); i0 += per_chunk) {
        const std::size_t n = std::min(per_chunk, rows.size() - i0);
        for (std::size_t i = 0; i < n; ++i) std::memcpy(scratch.data() + i * row_bytes, rows[i0 + i], row_bytes);
        sink.put({scratch.data(), n * row_bytes});
    }
}

// Writes the transpose of the matrix whose rows `rows` points at (`cols` elements each), a chunk of
// output rows (= source columns) at a time.
void put_transposed(const std::vector<const std::byte*>& rows, std::int64_t cols, std::size_t esize, TensorSink& sink,
                    std::vector<std::byte>& scratch) {
    const auto n = static_cast<std::int64_t>(rows.size());
    const std::size_t out_row = static_cast<std::size_t>(n) * esize;
    const auto per_chunk = static_cast<std::int64_t>(std::max<std::size_t>(8, kChunkBytes / out_row / 8 * 8));
    scratch.resize(std::max(scratch.size(), static_cast<std::size_t>(per_chunk) * out_row));
    for (std::int64_t c0 = 0; c0 < cols; c0 += per_chunk) {
        const std::int64_t c1 = std::min(cols, c0 + per_chunk);
        transpose_rows(rows.data(), scratch.data(), n, c0, c1, esize);
        sink.put({scratch.data(), static_cast<std::size_t>(c1 - c0) * out_row});
    }
}

// Writes tensor `e` of `layer` in its Hugging Face layout at the sink, straight from the mapped
// shards where it can: TP shards are joined, Conv1D weights transposed and fused QKV rows reordered
// in one pass through a chunk of `scratch`; tensors that need none of it are written from the
// mapping as they are.
void write_tensor(const DsCheckpoint& ck, const DsCheckpoint::Layer& layer, const Entry& e, const ModelArgs& m, TensorSink& sink,
                  std::vector<std::byte>& scratch) {
    Pieces p = tensor_pieces(layer, e.name, e.transform == Transform::EmbedNorm);
    const std::size_t esize = dtype_size(e.dtype);
    if (e.transform == Transform::EmbedNorm) {
        layer_norm_rows(p.merged, layer.merge("word_embeddings.norm.weight"), layer.merge("word_embeddings.norm.bias"), ck.layer_file(e.layer, 0));
        sink.put(std::span<const std::byte>(p.merged.data).first(static_cast<std::size_t>(e.bytes())));  // cut_vocabulary's rows
        return;
    }
    const bool qkv = e.transform == Transform::QkvReorder || e.transform == Transform::QkvReorderTranspose;
    const bool transpose = e.transform == Transform::Transpose || e.transform == Transform::QkvReorderTranspose;
    if (!qkv && !transpose) {
        if (p.join != TpRule::RowParallel) {
            std::uint64_t left = e.bytes();  // less than the pieces for a vocabulary cut (cut_vocabulary)
            for (const auto& b : p.bytes) {
                const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, b.size()));
                sink.put(b.first(n));
                left -= n;
            }
            return;
        }
        // Row-parallel weights kept as rows (BLOOM): each row is the pieces' rows side by side.
        const auto rows = p.shapes[0][0];
        std::vector<std::size_t> piece(p.bytes.size());
        std::size_t row_bytes = 0;
        for (std::size_t k = 0; k < piece.size(); ++k) row_bytes += piece[k] = row_bytes_of(p.shapes[k], esize) ;
        const std::size_t per_chunk = std::max<std::size_t>(1, kChunkBytes / row_bytes);
        scratch.resize(std::max(scratch.size(), per_chunk * row_bytes));
        for (std::int64_t i0 = 0; i0 < rows; i0 += static_cast<std::int64_t>(per_chunk)) {
            const auto n = static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(per_chunk), rows - i0));
            std::byte* out = scratch.data();
            for (std::size_t i = 0; i < n; ++i)
                for (std::size_t k = 0; k < piece.size(); ++k) {
                    std::memcpy(out, p.bytes[k].data() + (static_cast<std::size_t>(i0) + i) * piece[k], piece[k]);
                    out += piece[k];
                }
            sink.put({scratch.data(), n * row_bytes});
        }
        return;
    }
    if (p.join == TpRule::RowParallel) {  // transposed row-parallel weights: each piece gives a block of output rows
        for (std::size_t k = 0; k < p.bytes.size(); ++k) {
            Pieces one;
            one.bytes = {p.bytes[k]};
            one.shapes = {p.shapes[k]};
            put_transposed(stacked_rows(one, esize), p.shapes[k][1], esize, sink, scratch);
        }
        return;
    }
    auto rows = stacked_rows(p, esize);
    if (qkv) {
        const std::int64_t n = m.num_heads, d = m.hidden_size / m.num_heads;
        if (static_cast<std::int64_t>(rows.size()) != 3 * n * d)
            throw Error(ck.layer_file(e.layer, 0) + ": " + e.name + " does not have 3 × hidden rows");
        std::vector<const std::byte*> reordered(rows.size());
        for (std::size_t i = 0; i < rows.size(); ++i) reordered[i] = rows[static_cast<std::size_t>(qkv_source_row(static_cast<std::int64_t>(i), n, d))];
        rows = std::move(reordered);
    }
    if (transpose) put_transposed(rows, p.shapes[0][1], esize, sink, scratch);
    else put_rows(rows, row_bytes_of(p.shapes[0], esize), sink, scratch);
}

// The safetensors files (and the index when there are several). The headers are known up front, so
// `workers` threads each take the next tensor, convert it and write it at its offset in its file:
// reading, converting and writing overlap across tensors and files, and each worker holds one chunk
// of output at a time. Then every file is fsync'd and renamed, in parallel.
void write_weights(const DsCheckpoint& ck, const ModelArgs& m, const std::vector<Entry>& entries, const fs::path& tmp,
                   const ToHfOptions& options, ToHfReport& report) {
    const auto shards = plan_shards(entries, options.max_shard_bytes);
    report.shards = shards.size();
    nlohmann::ordered_json index = {{"metadata", {{"total_size", report.bytes}}}, {"weight_map", nlohmann::ordered_json::object()}};
    std::vector<std::unique_ptr<AtomicOutput>> files;
    std::vector<std::pair<std::size_t, std::uint64_t>> place(entries.size());  // file, offset
    for (std::size_t s = 0; s < shards.size(); ++s) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
        const std::string file = shards.size() == 1 ? "model.safetensors" : buf;
        std::vector<TensorEntry> te;
        for (auto i : shards[s]) {
            te.push_back({entries[i].hf_name, entries[i].dtype, entries[i].shape});
            index["weight_map"][entries[i].hf_name] = file;
        }
        const auto layout = safetensors_layout((tmp / file).string(), te, {{"format", "pt"}});
        files.push_back(std::make_unique<AtomicOutput>((tmp / file).string()));
        files.back()->write(layout.header);
        files.back()->flush();
        for (std::size_t k = 0; k < shards[s].size(); ++k) place[shards[s][k]] = {s, layout.offsets[k]};
        report.files.push_back(file);
    }
    const int workers = workers_or_cores(options.workers);
    LayerCache layers(ck, entries);
    std::vector<std::vector<std::byte>> scratch(parallel_workers(entries.size(), workers));
    std::mutex progress_mu;
    std::size_t done = 0;
    std::uint64_t bytes_done = 0;
    parallel_for_with_worker(entries.size(), workers, [&](std::size_t i, std::size_t w) {
        const Entry& e = entries[i];
        TensorSink sink(*files[place[i].first], place[i].second);
        write_tensor(ck, *layers.get(e.layer), e, m, sink, scratch[w]);
        if (sink.written() != e.bytes())
            throw Error("internal: " + e.hf_name + ": " + std::to_string(sink.written()) + " bytes written, the header says " +
                        std::to_string(e.bytes()));
        layers.done(e.layer);
        if (options.progress) {
            std::lock_guard lock(progress_mu);
            bytes_done += e.bytes();
            options.progress(++done, entries.size(), bytes_done, report.bytes);
        }
    });
    parallel_for(files.size(), workers, [&](std::size_t f) { files[f]->commit(); });
    if (shards.size() > 1) {
        write_file_atomic((tmp / "model.safetensors.index.json").string(), index.dump(2) + "\n");
        report.files.push_back("model.safetensors.index.json");
    }
}

// config.json: Megatron's sizes under transformers' names for the architecture.
nlohmann::ordered_json make_config(const DsCheckpoint& ck, const ModelArgs& m, DType dtype, const hf_detail::TokenizerFiles& tokenizer) {
    const double eps = float_arg(ck, "layernorm_epsilon", 1e-5);
    if (m.bloom)
        return {{"architectures", {"BloomForCausalLM"}},
                {"model_type", "bloom"},
                {"vocab_size", m.vocab_size},
                {"hidden_size", m.hidden_size},
                {"n_layer", m.num_layers},
                {"n_head", m.num_heads},
                {"layer_norm_epsilon", eps},
                {"initializer_range", float_arg(ck, "init_method_std", 0.02)},
                {"hidden_dropout", float_arg(ck, "hidden_dropout", 0.0)},
                {"attention_dropout", float_arg(ck, "attention_dropout", 0.0)},
                {"apply_residual_connection_post_layernorm", m.post_ln},
                {"pretraining_tp", ck.tp()},
                {"slow_but_exact", false},
                {"bos_token_id", 1},
                {"eos_token_id", 2},
                {"use_cache", true},
                {"torch_dtype", torch_dtype_name(dtype)}};
    const char* act = gpt2_activation(m.gelu);
    // GPT-2 BPE files with <|endoftext|>: that token begins and ends texts.
    const bool eos = tokenizer.kind == hf_detail::TokenizerFiles::Kind::Gpt2Bpe && tokenizer.eos_id;
    const nlohmann::ordered_json eos_id = eos ? nlohmann::ordered_json(*tokenizer.eos_id) : nlohmann::ordered_json(nullptr);
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", m.vocab_size},
            {"n_positions", m.max_positions},
            {"n_embd", m.hidden_size},
            {"n_layer", m.num_layers},
            {"n_head", m.num_heads},
            {"n_inner", m.ffn_hidden_size},
            {"activation_function", act},
            {"layer_norm_epsilon", eps},
            {"initializer_range", float_arg(ck, "init_method_std", 0.02)},
            {"resid_pdrop", float_arg(ck, "hidden_dropout", 0.1)},
            {"embd_pdrop", float_arg(ck, "hidden_dropout", 0.1)},
            {"attn_pdrop", float_arg(ck, "attention_dropout", 0.1)},
            {"scale_attn_weights", true},
            {"bos_token_id", eos_id},
            {"eos_token_id", eos_id},
            {"tie_word_embeddings", !m.fold_embed_ln},
            {"use_cache", true},
            {"torch_dtype", torch_dtype_name(dtype)}};
}

// Tokenizer: a folder copied as is, or GPT-2 BPE files with their tokenizer_config.json and
// special_tokens_map.json (settled and checked before any weight was written).
void write_tokenizer(const hf_detail::TokenizerFiles& tokenizer, std::int64_t max_positions, const fs::path& tmp, ToHfReport& report) {
    if (tokenizer.kind == hf_detail::TokenizerFiles::Kind::Folder) {
        for (const auto& e : fs::directory_iterator(tokenizer.folder)) {
            std::error_code ec;
            if (!e.is_regular_file(ec)) continue;
            if (!tokenizer.files.empty() &&
                std::find(tokenizer.files.begin(), tokenizer.files.end(), e.path().filename().string()) == tokenizer.files.end())
                continue;
            copy_file(e.path().string(), (tmp / e.path().filename()).string());
            report.files.push_back(e.path().filename().string());
        }
    } else if (tokenizer.kind == hf_detail::TokenizerFiles::Kind::Gpt2Bpe) {
        copy_file(tokenizer.vocab, (tmp / "vocab.json").string());
        copy_file(tokenizer.merges, (tmp / "merges.txt").string());
        const std::string special = tokenizer.eos_id ? "<|endoftext|>" : "";
        nlohmann::ordered_json tc = {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", max_positions}, {"add_prefix_space", false}};
        nlohmann::ordered_json sm = nlohmann::ordered_json::object();
        if (!special.empty())
            for (const char* k : {"bos_token", "eos_token", "unk_token"}) tc[k] = sm[k] = special;
        write_file_atomic((tmp / "tokenizer_config.json").string(), tc.dump(2) + "\n");
        write_file_atomic((tmp / "special_tokens_map.json").string(), sm.dump(2) + "\n");
        for (const char* name : {"vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"})
            report.files.push_back(name);
    }
}

// Writes the whole export into the folder `tmp`.
void write_export(const DsCheckpoint& ck, const ModelArgs& m, const std::vector<Entry>& entries,
                  const hf_detail::TokenizerFiles& tokenizer, const fs::path& tmp, const ToHfOptions& options,
                  ToHfReport& report) {
    write_weights(ck, m, entries, tmp, options, report);
    const auto config = make_config(ck, m, entries.front().dtype, tokenizer);
    write_file_atomic((tmp / "config.json").string(), config.dump(2) + "\n");
    report.files.push_back("config.json");
    write_tokenizer(tokenizer, m.max_positions, tmp, report);
}

}  // namespace

ToHfReport convert_to_hf(const std::string& path, const std::string& tag, const std::string& out, const ToHfOptions& options) {
    const Note note = [&](const std::string& m) {
        if (options.note) options.note(m);
    };
    // "hf/", "." and "run/.." name the folder itself, never a part of it or its parent.
    const fs::path final_dir = plain_folder_path(out);
    if (final_dir.filename().empty()) throw UsageError("destination " + in_quotes(out) + ": not a folder that can be written and renamed");
    refuse_overlap(path, "source", final_dir.string(), "destination");
    const DsCheckpoint ck(path, tag, options.verify);
    // The tag folder may be a symbolic link: where it really lives must not be the destination.
    refuse_overlap(ck.directory(), "source tag", final_dir.string(), "destination");
    check_destination(final_dir, options.overwrite);

    // Everything is read and checked before anything is written: args, tensors, tokenizer.
    ModelArgs m = read_model_args(ck, options.model_type);
    if (m.gelu == Gelu::OnnxErf)
        note("--onnx-safe: BMD's erf_gelu divides by 1.41421 where F.gelu uses sqrt(2); exported as \"gelu\" (outputs differ by "
             "about 1e-6 relative)");
    std::vector<Entry> entries = plan_tensors(ck, m, note);
    const std::int64_t rows = embedding_rows(ck, m, entries);
    m.vocab_size = exported_vocab_size(ck, rows, options);
    cut_vocabulary(entries, m.vocab_size);
    const auto tokenizer = hf_detail::find_tokenizer(ck, options, note);
    hf_detail::check_tokenizer_fits(tokenizer, m.vocab_size);

    ToHfReport report;
    report.model_type = m.bloom ? "bloom" : "gpt2";
    report.output = final_dir.string();
    report.tensors = entries.size();
    for (const auto& e : entries) report.bytes += e.bytes();
    write_output_folder(
        final_dir, [&](const fs::path& tmp) { write_export(ck, m, entries, tokenizer, tmp, options, report); },
        [&] { check_destination(final_dir, options.overwrite); }, note);
    return report;
}

}  // namespace mds::ckpt
