#include "mds/ckpt/to_hf.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sys/stat.h>  // lstat
#include <thread>

#include "ckpt/hf_tokenizer.h"
#include "ckpt/transpose_rows.h"
#include "mds/ckpt/ds_checkpoint.h"
#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/safetensors.h"
#include "mds/util/error.h"
#include "mds/util/parallel.h"  // workers_or_cores
#include "mds/util/files.h"
#include "mds/util/safe_paths.h"  // refuse_overlap, prepare_output_dir, temp_path_for, printable

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

// What may stand at the output's place: nothing, or with --overwrite an earlier export (a folder
// holding config.json, or an empty one). A file, a symbolic link or any other folder is refused:
// `mds-ckpt-to-hf ckpt ~ --overwrite` must not empty a home folder.
void check_destination(const fs::path& dir, bool overwrite) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) return;
    if (S_ISLNK(st.st_mode))
        throw Error("the destination " + in_quotes(dir.string()) + " is a symbolic link; refusing to replace it (name the folder it points to)");
    if (!S_ISDIR(st.st_mode)) throw Error("the destination " + in_quotes(dir.string()) + " exists and is not a folder; refusing to replace it");
    if (!overwrite) throw Error(printable(dir.string(), 200) + " exists; pass --overwrite to replace it");
    bool empty = true, config = false;
    for (const auto& e : fs::directory_iterator(dir)) {
        empty = false;
        config = config || e.path().filename() == "config.json";
    }
    if (!empty && !config)
        throw Error("the destination " + in_quotes(dir.string()) + " is a folder without config.json, not an earlier export; --overwrite "
                    "replaces only those (choose another destination, or remove the folder yourself)");
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

// The layer files the workers convert from, each opened (mapped, its pickles read) once while its
// tensors are in flight. Tensors come in layer order (the untied lm_head, last, reopens the first).
class LayerCache {
public:
    explicit LayerCache(const DsCheckpoint& ck) : ck_(ck) {}
    std::shared_ptr<const DsCheckpoint::Layer> get(int layer) {
        std::lock_guard lock(mu_);
        auto& slot = open_[layer];
        if (!slot) slot = std::make_shared<const DsCheckpoint::Layer>(ck_.open_layer(layer));
        return slot;
    }
    // Unmaps the layers before `layer`: every tensor from them was converted.
    void drop_before(int layer) {
        std::lock_guard lock(mu_);
        open_.erase(open_.begin(), open_.lower_bound(layer));
    }

private:
    const DsCheckpoint& ck_;
    std::mutex mu_;
    std::map<int, std::shared_ptr<const DsCheckpoint::Layer>> open_;
};

// A converted tensor's bytes: the merged tensor itself, or a transposed copy in a buffer that goes
// back to the pool once written (reused buffers cost no page faults and no zeroing).
struct Converted {
    std::vector<std::byte> merged;
    std::unique_ptr<std::byte[]> buffer;
    std::size_t buffer_capacity = 0;
    std::span<const std::byte> bytes;
};

class BufferPool {
public:
    explicit BufferPool(std::size_t keep) : keep_(keep) {}
    void take(Converted& c, std::size_t bytes) {
        {
            std::lock_guard lock(mu_);
            // The smallest free buffer that fits (free_ is sorted largest first), else a new one below.
            auto best = free_.end();
            for (auto it = free_.begin(); it != free_.end() && it->second >= bytes; ++it) best = it;
            if (best != free_.end()) {
                c.buffer = std::move(best->first);
                c.buffer_capacity = best->second;
                free_.erase(best);
            }
        }
        if (!c.buffer) {
            c.buffer.reset(new std::byte[bytes]);  // not value-initialised: every byte is written by the converter
            c.buffer_capacity = bytes;
        }
    }
    void give_back(Converted& c) {
        if (!c.buffer) return;
        std::lock_guard lock(mu_);
        free_.emplace_back(std::move(c.buffer), c.buffer_capacity);
        // Keep the largest few: they fit every later tensor.
        std::sort(free_.begin(), free_.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        if (free_.size() > keep_) free_.resize(keep_);
    }

private:
    std::size_t keep_;
    std::mutex mu_;
    std::vector<std::pair<std::unique_ptr<std::byte[]>, std::size_t>> free_;
};

// The merged tensor of `e` in its Hugging Face layout. Matrices are transposed straight from the
// merged rows (through the QKV reorder for c_attn) into a pooled buffer: one pass, no second copy.
Converted convert_tensor(const DsCheckpoint& ck, const DsCheckpoint::Layer& layer, const Entry& e, const ModelArgs& m, BufferPool& pool) {
    const std::int64_t n = m.num_heads, d = m.hidden_size / m.num_heads;
    auto g = layer.merge(e.name);
    const std::size_t esize = dtype_size(g.dtype);
    if (e.transform == Transform::EmbedNorm)
        layer_norm_rows(g, layer.merge("word_embeddings.norm.weight"), layer.merge("word_embeddings.norm.bias"), ck.layer_file(e.layer, 0));
    const bool qkv = e.transform == Transform::QkvReorder || e.transform == Transform::QkvReorderTranspose;
    if (qkv && g.shape[0] != 3 * n * d) throw Error(ck.layer_file(e.layer, 0) + ": " + e.name + " does not have 3 × hidden rows");
    std::size_t row_bytes = esize;
    for (std::size_t j = 1; j < g.shape.size(); ++j) row_bytes *= static_cast<std::size_t>(g.shape[j]);
    const std::int64_t rows = g.shape.empty() ? 1 : g.shape[0];
    Converted c;
    if (e.transform == Transform::Transpose || e.transform == Transform::QkvReorderTranspose) {
        std::vector<const std::byte*> row(static_cast<std::size_t>(rows));
        for (std::int64_t i = 0; i < rows; ++i)
            row[static_cast<std::size_t>(i)] = g.data.data() + static_cast<std::size_t>(qkv ? qkv_source_row(i, n, d) : i) * row_bytes;
        pool.take(c, g.data.size());
        transpose_rows(row.data(), c.buffer.get(), rows, g.shape[1], esize);
        c.bytes = {c.buffer.get(), g.data.size()};
        return c;
    }
    if (qkv) {  // the bias: rows of one element
        pool.take(c, g.data.size());
        for (std::int64_t i = 0; i < rows; ++i)
            std::memcpy(c.buffer.get() + static_cast<std::size_t>(i) * row_bytes,
                        g.data.data() + static_cast<std::size_t>(qkv_source_row(i, n, d)) * row_bytes, row_bytes);
        c.bytes = {c.buffer.get(), g.data.size()};
        return c;
    }
    c.merged = std::move(g.data);
    c.bytes = c.merged;
    return c;
}

// Converts entries[0..n) on `workers` threads, each taking the next index, while consume(i, bytes)
// runs on the calling thread in index order. At most `window` converted tensors wait to be written,
// so memory stays near (window + workers) x the largest tensor. An error stops the hand-out; the
// error of the lowest failing index is rethrown (the one a sequential run would have met first),
// and a failing consume stops and joins the workers before it propagates.
class ConvertPipeline {
public:
    using Convert = std::function<Converted(std::size_t)>;
    ConvertPipeline(std::size_t n, int workers, const Convert& convert)
        : slots_(n), window_(static_cast<std::size_t>(workers) + 2), convert_(convert) {
        for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
    }
    ~ConvertPipeline() { stop(); }
    ConvertPipeline(const ConvertPipeline&) = delete;
    ConvertPipeline& operator=(const ConvertPipeline&) = delete;

    // Tensor i (called with i = 0, 1, 2, ...), waiting for it; release(i) once written.
    Converted& next(std::size_t i) {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return slots_[i].has_value() || (error_ && error_index_ <= i); });
        if (!slots_[i]) std::rethrow_exception(error_);
        return *slots_[i];
    }
    void release(std::size_t i) {
        std::lock_guard lock(mu_);
        slots_[i].reset();
        written_ = i + 1;
        cv_.notify_all();
    }

private:
    void work() {
        for (;;) {
            std::size_t i = 0;
            {
                std::unique_lock lock(mu_);
                cv_.wait(lock, [&] { return stop_ || error_ || next_ >= slots_.size() || next_ < written_ + window_; });
                if (stop_ || error_ || next_ >= slots_.size()) return;
                i = next_++;
            }
            try {
                Converted c = convert_(i);
                std::lock_guard lock(mu_);
                slots_[i] = std::move(c);
            } catch (...) {
                std::lock_guard lock(mu_);
                if (!error_ || i < error_index_) {
                    error_ = std::current_exception();
                    error_index_ = i;
                }
            }
            cv_.notify_all();
        }
    }
    void stop() {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::optional<Converted>> slots_;
    std::size_t window_, next_ = 0, written_ = 0, error_index_ = 0;
    std::exception_ptr error_;
    bool stop_ = false;
    Convert convert_;
    std::vector<std::thread> threads_;
};

// The safetensors files (and the index when there are several); tensors are converted by the
// pipeline's workers and streamed in order into each file as they are ready.
void write_weights(const DsCheckpoint& ck, const ModelArgs& m, const std::vector<Entry>& entries, const fs::path& tmp,
                   const ToHfOptions& options, ToHfReport& report) {
    const auto shards = plan_shards(entries, options.max_shard_bytes);
    report.shards = shards.size();
    nlohmann::ordered_json index = {{"metadata", {{"total_size", report.bytes}}}, {"weight_map", nlohmann::ordered_json::object()}};
    const int workers = workers_or_cores(options.workers);
    LayerCache layers(ck);
    BufferPool pool(static_cast<std::size_t>(workers) + 2);
    ConvertPipeline pipeline(entries.size(), workers, [&](std::size_t i) {
        const auto layer = layers.get(entries[i].layer);
        return convert_tensor(ck, *layer, entries[i], m, pool);
    });
    std::size_t done = 0;
    std::uint64_t bytes_done = 0;
    for (std::size_t s = 0; s < shards.size(); ++s) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
        const std::string file = shards.size() == 1 ? "model.safetensors" : buf;
        std::vector<TensorEntry> te;
        for (auto i : shards[s]) {
            te.push_back({entries[i].hf_name, entries[i].dtype, entries[i].shape});
            index["weight_map"][entries[i].hf_name] = file;
        }
        write_safetensors_streamed((tmp / file).string(), te, {{"format", "pt"}}, [&](std::size_t k, AtomicOutput& o) {
            const std::size_t i = shards[s][k];  // shards hold consecutive entries: i == done
            Converted& c = pipeline.next(i);
            o.write(c.bytes.data(), c.bytes.size());
            bytes_done += c.bytes.size();
            pool.give_back(c);
            pipeline.release(i);
            if (i + 1 < entries.size()) layers.drop_before(entries[i + 1].layer);
            if (options.progress) options.progress(++done, entries.size(), bytes_done, report.bytes);
        });
        report.files.push_back(file);
    }
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
                {"vocab_size", m.padded_vocab_size},
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
            {"vocab_size", m.padded_vocab_size},
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

// Writes everything into `tmp` and renames it to `final_dir`; `tmp` is removed on any error.
void write_export(const DsCheckpoint& ck, const ModelArgs& m, const std::vector<Entry>& entries,
                  const hf_detail::TokenizerFiles& tokenizer, const fs::path& tmp, const fs::path& final_dir,
                  const ToHfOptions& options, ToHfReport& report) {
    const fs::path parent = final_dir.has_parent_path() ? final_dir.parent_path() : fs::path(".");
    try {
        write_weights(ck, m, entries, tmp, options, report);
        const auto config = make_config(ck, m, entries.front().dtype, tokenizer);
        write_file_atomic((tmp / "config.json").string(), config.dump(2) + "\n");
        report.files.push_back("config.json");
        write_tokenizer(tokenizer, m.max_positions, tmp, report);
        sync_directory(tmp.string());
        check_destination(final_dir, options.overwrite);  // still what was checked before the long work
        remove_tree(final_dir.string());
        fs::rename(tmp, final_dir);
        sync_directory(parent.string());
    } catch (...) {
        try {
            remove_tree(tmp.string());
        } catch (const Error&) {
            // The conversion's own error is the one to report.
        }
        throw;
    }
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
    const ModelArgs m = read_model_args(ck, options.model_type);
    if (m.gelu == Gelu::OnnxErf)
        note("--onnx-safe: BMD's erf_gelu divides by 1.41421 where F.gelu uses sqrt(2); exported as \"gelu\" (outputs differ by "
             "about 1e-6 relative)");
    const std::vector<Entry> entries = plan_tensors(ck, m, note);
    const std::int64_t rows = embedding_rows(ck, m, entries);
    const auto tokenizer = hf_detail::find_tokenizer(ck, options, note);
    hf_detail::check_tokenizer_fits(tokenizer, rows);

    const fs::path parent = final_dir.has_parent_path() ? final_dir.parent_path() : fs::path(".");
    for (const auto& removed : prepare_output_dir(parent.string(), "destination's folder"))
        note("removed " + printable(removed) + ", the unfinished output of an interrupted earlier run");
    const fs::path tmp = temp_path_for(final_dir.string());
    remove_tree(tmp.string());
    fs::create_directories(tmp);
    ToHfReport report;
    report.model_type = m.bloom ? "bloom" : "gpt2";
    report.output = final_dir.string();
    report.tensors = entries.size();
    for (const auto& e : entries) report.bytes += e.bytes();
    write_export(ck, m, entries, tokenizer, tmp, final_dir, options, report);
    return report;
}

}  // namespace mds::ckpt
