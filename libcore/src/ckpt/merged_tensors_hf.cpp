// MergedTensors of a Hugging Face GPT2 / BLOOM folder, read back into Megatron's names and layouts:
// the inverse of mds-ckpt-to-hf's mapping (specs/checkpoints.md §7). GPT2's Conv1D weights are
// transposed back and its fused QKV rows reordered from [3, heads, head_dim] to Megatron's
// [heads, 3, head_dim]; BLOOM keeps Megatron's layout. Also MergedTensors::open, which tells the
// two kinds of folders apart.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>  // memcpy
#include <filesystem>
#include <map>
#include <set>

#include "ckpt/merged_tensors_internal.h"
#include "mds/ckpt/safetensors.h"
#include "mds/ckpt/torch_file.h"
#include "mds/util/error.h"
#include "mds/util/files.h"        // read_file
#include "mds/util/json_limits.h"  // check_json_depth
#include "mds/util/safe_paths.h"   // printable

namespace mds::ckpt {
namespace merged_detail {
namespace fs = std::filesystem;
namespace {

enum class Layout { Plain, Transpose, Qkv, QkvTranspose };

struct HfEntry {
    std::size_t file = 0;      // index into files_
    std::string hf_name;       // as stored
    Layout layout = Layout::Plain;
};

// Megatron's block parameter of a GPT2 block key ("attn.c_attn.weight"), with the layout change.
bool gpt2_block(const std::string& key, std::string& name, Layout& layout) {
    static const std::map<std::string, std::pair<std::string, Layout>> kMap = {
        {"ln_1.weight", {"input_layernorm.weight", Layout::Plain}},
        {"ln_1.bias", {"input_layernorm.bias", Layout::Plain}},
        {"attn.c_attn.weight", {"self_attention.query_key_value.weight", Layout::QkvTranspose}},
        {"attn.c_attn.bias", {"self_attention.query_key_value.bias", Layout::Qkv}},
        {"attn.c_proj.weight", {"self_attention.dense.weight", Layout::Transpose}},
        {"attn.c_proj.bias", {"self_attention.dense.bias", Layout::Plain}},
        {"ln_2.weight", {"post_attention_layernorm.weight", Layout::Plain}},
        {"ln_2.bias", {"post_attention_layernorm.bias", Layout::Plain}},
        {"mlp.c_fc.weight", {"mlp.dense_h_to_4h.weight", Layout::Transpose}},
        {"mlp.c_fc.bias", {"mlp.dense_h_to_4h.bias", Layout::Plain}},
        {"mlp.c_proj.weight", {"mlp.dense_4h_to_h.weight", Layout::Transpose}},
        {"mlp.c_proj.bias", {"mlp.dense_4h_to_h.bias", Layout::Plain}},
    };
    const auto it = kMap.find(key);
    if (it == kMap.end()) return false;
    name = it->second.first;
    layout = it->second.second;
    return true;
}

bool bloom_block(const std::string& key) {
    static const std::set<std::string> kKeys = {
        "input_layernorm.weight", "input_layernorm.bias", "self_attention.query_key_value.weight",
        "self_attention.query_key_value.bias", "self_attention.dense.weight", "self_attention.dense.bias",
        "post_attention_layernorm.weight", "post_attention_layernorm.bias", "mlp.dense_h_to_4h.weight",
        "mlp.dense_h_to_4h.bias", "mlp.dense_4h_to_h.weight", "mlp.dense_4h_to_h.bias"};
    return kKeys.count(key) > 0;
}

std::vector<std::byte> transpose(const std::vector<std::byte>& in, std::int64_t rows, std::int64_t cols, std::size_t esize) {
    std::vector<std::byte> out(in.size());
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
            std::memcpy(out.data() + static_cast<std::size_t>(j * rows + i) * esize, in.data() + static_cast<std::size_t>(i * cols + j) * esize, esize);
    return out;
}

// GPT2's fused QKV rows [3, n, d] to Megatron's [n, 3, d].
std::vector<std::byte> qkv_to_megatron(const std::vector<std::byte>& in, std::int64_t n, std::int64_t d, std::size_t row_bytes) {
    std::vector<std::byte> out(in.size());
    for (std::int64_t head = 0; head < n; ++head)
        for (std::int64_t c = 0; c < 3; ++c)
            for (std::int64_t e = 0; e < d; ++e)
                std::memcpy(out.data() + static_cast<std::size_t>((head * 3 + c) * d + e) * row_bytes,
                            in.data() + static_cast<std::size_t>((c * n + head) * d + e) * row_bytes, row_bytes);
    return out;
}

std::int64_t config_int(const nlohmann::json& c, std::initializer_list<const char*> keys, const std::string& where) {
    for (const char* k : keys)
        if (c.contains(k) && c[k].is_number_integer()) return c[k].get<std::int64_t>();
    throw Error(where + ": no " + *keys.begin() + " (an integer) in config.json");
}

class HfTensors final : public MergedTensors {
public:
    HfTensors(const std::string& dir, bool verify) : dir_(dir), verify_(verify) {
        const std::string config_path = (fs::path(dir) / "config.json").string();
        const std::string text = read_file(config_path, 1 << 20, "config.json");
        check_json_depth(text, config_path);
        nlohmann::json config = nlohmann::json::parse(text, nullptr, false);
        if (!config.is_object()) throw Error(config_path + ": not a JSON object");
        const std::string type = config.contains("model_type") && config["model_type"].is_string() ? config["model_type"].get<std::string>() : "";
        if (type != "gpt2" && type != "bloom")
            throw Error(config_path + ": model_type " + (type.empty() ? std::string("missing or not a string") : in_quotes(type)) + "; expected \"gpt2\" or \"bloom\" (what mds-ckpt-to-hf writes)");
        bloom_ = type == "bloom";
        heads_ = config_int(config, {"n_head", "num_attention_heads"}, config_path);
        if (config.contains("tie_word_embeddings") && !config["tie_word_embeddings"].is_boolean())
            throw Error(config_path + ": tie_word_embeddings is not true or false");
        tied_ = !config.contains("tie_word_embeddings") || config["tie_word_embeddings"].get<bool>();
        open_files();
        for (std::size_t f = 0; f < names_.size(); ++f)
            for (const auto& [hf_name, meta] : names_[f]) add(f, hf_name, meta.first, meta.second);
        // Stable order: embedding, blocks by number, final norm, the rest.
        std::vector<std::size_t> order(infos_.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rank(infos_[a].name) < rank(infos_[b].name); });
        std::vector<MergedTensorInfo> infos;
        std::vector<HfEntry> entries;
        for (auto i : order) {
            infos.push_back(infos_[i]);
            entries.push_back(entries_[i]);
        }
        infos_ = std::move(infos);
        entries_ = std::move(entries);
    }

    std::string kind() const override { return "huggingface"; }
    std::string directory() const override { return dir_; }
    const std::vector<MergedTensorInfo>& tensors() const override { return infos_; }
    std::vector<std::string> notes() const override { return notes_; }

    GlobalTensor load(std::size_t index) override {
        const HfEntry& e = entries_.at(index);
        GlobalTensor g;
        g.dtype = infos_[index].dtype;
        g.shape = infos_[index].shape;
        if (safetensors_[e.file]) {
            const auto& v = safetensors_[e.file]->at(e.hf_name);
            g.data.assign(v.bytes.begin(), v.bytes.end());
        } else {
            const auto* v = torch_[e.file]->root().ordered_dict_items().find(e.hf_name);
            g.data = torch_[e.file]->tensor(*v, e.hf_name).gather();
        }
        const std::size_t esize = dtype_size(g.dtype);
        const std::string where = files_[e.file] + ": " + e.hf_name;
        if (e.layout == Layout::Transpose || e.layout == Layout::QkvTranspose)  // stored [in, out]: g.shape is [out, in]
            g.data = transpose(g.data, g.shape[1], g.shape[0], esize);
        if (e.layout == Layout::Qkv || e.layout == Layout::QkvTranspose) {
            std::size_t row = esize;
            for (std::size_t k = 1; k < g.shape.size(); ++k) row *= static_cast<std::size_t>(g.shape[k]);
            if (heads_ <= 0 || g.shape[0] % (3 * heads_) != 0)
                throw Error(where + ": " + std::to_string(g.shape[0]) + " QKV rows do not split into 3 x " + std::to_string(heads_) + " heads");
            g.data = qkv_to_megatron(g.data, heads_, g.shape[0] / (3 * heads_), row);
        }
        return g;
    }

private:
    std::string dir_;
    bool verify_ = true, bloom_ = false, tied_ = true;
    std::int64_t heads_ = 0;
    std::vector<std::string> files_;
    std::vector<std::unique_ptr<SafetensorsFile>> safetensors_;  // null for a pytorch_model.bin file
    std::vector<std::unique_ptr<TorchFile>> torch_;
    // Per file, in file order: name -> (dtype, shape).
    std::vector<std::vector<std::pair<std::string, std::pair<DType, std::vector<std::int64_t>>>>> names_;
    std::vector<MergedTensorInfo> infos_;
    std::vector<HfEntry> entries_;
    std::vector<std::string> notes_;

    // The weight files: those an index names, else model.safetensors / *.safetensors, else
    // pytorch_model.bin (sharded by an index, or one file).
    void open_files() {
        std::vector<std::string> files;
        for (const char* index : {"model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
            const fs::path p = fs::path(dir_) / index;
            if (!fs::exists(p)) continue;
            const std::string text = read_file(p.string(), 64 << 20, index);
            check_json_depth(text, p.string());
            const auto j = nlohmann::json::parse(text, nullptr, false);
            if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
                throw Error(p.string() + ": expected a JSON object with a \"weight_map\" object");
            std::set<std::string> unique;
            for (const auto& [k, v] : j["weight_map"].items()) {
                if (!v.is_string()) throw Error(p.string() + ": weight_map[" + printable(k) + "] is not a file name");
                unique.insert(checked_entry_name(v.get<std::string>(), p.string()));
            }
            files.assign(unique.begin(), unique.end());
            break;
        }
        if (files.empty()) {
            if (fs::exists(fs::path(dir_) / "model.safetensors")) files.push_back("model.safetensors");
            else {
                for (const auto& e : fs::directory_iterator(dir_))
                    if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
                std::sort(files.begin(), files.end());
            }
            if (files.empty() && fs::exists(fs::path(dir_) / "pytorch_model.bin")) files.push_back("pytorch_model.bin");
        }
        if (files.empty())
            throw Error(dir_ + ": no model.safetensors, *.safetensors, pytorch_model.bin or index of them (expected a Hugging Face model folder)");
        for (const auto& f : files) {
            const std::string path = (fs::path(dir_) / f).string();
            files_.push_back(path);
            names_.emplace_back();
            if (f.ends_with(".safetensors")) {
                safetensors_.push_back(std::make_unique<SafetensorsFile>(path));
                torch_.push_back(nullptr);
                for (const auto& t : safetensors_.back()->tensors()) names_.back().push_back({t.name, {t.dtype, t.shape}});
            } else {
                torch_.push_back(std::make_unique<TorchFile>(path, verify_));
                safetensors_.push_back(nullptr);
                for (const auto& [k, v] : torch_.back()->root().ordered_dict_items().items()) {
                    if (k.type() != PyType::Str || !TorchFile::is_tensor(v)) continue;
                    const auto t = torch_.back()->tensor(v, k.as_str());
                    names_.back().push_back({k.as_str(), {t.dtype, t.shape}});
                }
            }
        }
    }

    // Megatron's name of a Hugging Face tensor; empty for buffers and the tied LM head.
    std::string megatron_name(const std::string& hf_name, Layout& layout) {
        layout = Layout::Plain;
        std::string n = hf_name;
        if (n.starts_with("transformer.")) n = n.substr(12);
        if (n == "lm_head.weight") {
            if (tied_) {
                notes_.push_back(hf_name + " is tied to the word embedding; not compared on its own");
                return "-";
            }
            if (bloom_) return "";
            // mds-ckpt-to-hf's GPT2 with a folded embedding LayerNorm: lm_head holds the embedding itself.
            return embedding_name("word_embeddings.weight");
        }
        if (n.starts_with("h.")) {
            const auto dot = n.find('.', 2);
            if (dot == std::string::npos) return "";
            std::size_t block = 0;
            try {
                block = std::stoul(n.substr(2, dot - 2));
            } catch (const std::exception&) {
                return "";
            }
            const std::string key = n.substr(dot + 1);
            std::string name;
            if (bloom_ ? (name = key, bloom_block(key)) : gpt2_block(key, name, layout)) return block_name(block, name);
            if (!bloom_ && (key == "attn.bias" || key == "attn.masked_bias")) return "-";  // GPT2's causal-mask buffers
            return "";
        }
        if (n.starts_with("ln_f.")) return final_name(n.substr(5));
        if (bloom_) {
            if (n == "word_embeddings.weight") return embedding_name(n);
            if (n.starts_with("word_embeddings_layernorm.")) return embedding_name("word_embeddings.norm." + n.substr(26));
        } else {
            if (n == "wte.weight") {
                if (!tied_) {
                    notes_.push_back(hf_name + " holds the word embedding with the embedding LayerNorm folded in (untied lm_head); "
                                               "it is not compared, lm_head.weight is");
                    return "-";
                }
                return embedding_name("word_embeddings.weight");
            }
            if (n == "wpe.weight") return embedding_name("position_embeddings.weight");
        }
        return "";
    }

    void add(std::size_t file, const std::string& hf_name, DType dtype, std::vector<std::int64_t> shape) {
        Layout layout = Layout::Plain;
        std::string name = megatron_name(hf_name, layout);
        if (name == "-") return;
        if (name.empty()) name = "hf:" + hf_name;  // no Megatron counterpart: shown as on one side only
        if (layout == Layout::Transpose || layout == Layout::QkvTranspose) {
            if (shape.size() != 2) throw Error(files_[file] + ": " + hf_name + " is not a matrix");
            std::swap(shape[0], shape[1]);
        }
        if ((layout == Layout::Qkv || layout == Layout::QkvTranspose) && shape.empty())
            throw Error(files_[file] + ": " + hf_name + " has no rows");
        infos_.push_back({name, dtype, std::move(shape), files_[file]});
        entries_.push_back({file, hf_name, layout});
    }

    // Sort key: embedding first, then blocks by number, the final norm, anything else.
    static std::pair<std::int64_t, std::string> rank(const std::string& name) {
        if (name.starts_with("embedding.")) return {-1, name};
        if (name.starts_with("layers.")) {
            const auto dot = name.find('.', 7);
            return {std::stoll(name.substr(7, dot - 7)), name.substr(dot)};
        }
        if (name.starts_with("final_layernorm.")) return {std::int64_t{1} << 60, name};
        return {(std::int64_t{1} << 60) + 1, name};
    }
};

}  // namespace

std::unique_ptr<MergedTensors> open_huggingface(const std::string& dir, bool verify) { return std::make_unique<HfTensors>(dir, verify); }

}  // namespace merged_detail

std::unique_ptr<MergedTensors> MergedTensors::open(const std::string& path, bool optimizer, bool verify) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw Error(printable(path, 200) + ": no such folder");
    if (!fs::is_directory(path, ec))
        throw Error(printable(path, 200) + ": not a folder (expected a checkpoint root with `latest`, a global_step folder or a Hugging Face folder)");
    if (fs::exists(fs::path(path) / "config.json", ec)) {
        if (optimizer) throw UsageError(printable(path, 200) + " is a Hugging Face folder: it has no optimizer states (--optimizer needs two DeepSpeed checkpoints)");
        return merged_detail::open_huggingface(path, verify);
    }
    return merged_detail::open_deepspeed(path, optimizer, verify);
}

}  // namespace mds::ckpt
