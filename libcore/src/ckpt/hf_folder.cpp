#include "mds/ckpt/hf_folder.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <set>

#include "mds/ckpt/torch_file.h"
#include "mds/util/error.h"
#include "mds/util/files.h"        // read_file
#include "mds/util/json_limits.h"  // check_json_depth
#include "mds/util/safe_paths.h"   // checked_entry_name, in_quotes, printable

namespace mds::ckpt {
namespace fs = std::filesystem;
namespace {

using json = nlohmann::json;

std::string shown(const json& v) { return printable(v.dump(-1, ' ', false, json::error_handler_t::replace), 60); }

// The first of `keys` that is present: a positive integer (transformers' attribute_map aliases,
// e.g. BLOOM's n_layer / num_hidden_layers); `fallback` (the config class's default) when none is.
std::int64_t positive_int(const json& c, std::initializer_list<const char*> keys, std::int64_t fallback, const std::string& path) {
    for (const char* k : keys) {
        if (!c.contains(k)) continue;
        const auto& v = c[k];
        if ((!v.is_number_integer() && !v.is_number_unsigned()) || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (std::int64_t{1} << 40))
            throw Error(path + ": " + k + " is " + shown(v) + "; expected a positive integer");
        return v.get<std::int64_t>();
    }
    return fallback;
}

double number(const json& c, const char* key, double fallback, const std::string& path) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    if (!c[key].is_number()) throw Error(path + ": " + key + " is " + shown(c[key]) + "; expected a number");
    return c[key].get<double>();
}

bool flag(const json& c, const char* key, bool fallback, const std::string& path) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    if (!c[key].is_boolean()) throw Error(path + ": " + key + " is " + shown(c[key]) + "; expected true or false");
    return c[key].get<bool>();
}

std::optional<DType> config_dtype(const json& c) {
    for (const char* k : {"torch_dtype", "dtype"}) {
        if (!c.contains(k) || !c[k].is_string()) continue;
        const auto s = c[k].get<std::string>();
        if (s == "float32" || s == "float") return DType::F32;
        if (s == "bfloat16") return DType::BF16;
        if (s == "float16" || s == "half") return DType::F16;
    }
    return std::nullopt;
}

bool is_file(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}

// A .bin must be torch.save's zip archive (PyTorch >= 1.6); the older format begins with a pickle
// (a magic number, then the protocol version list), which TorchFile would only call "not a zip".
void check_torch_zip(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw Error(system_error_message("cannot open", path, errno));
    unsigned char head[4] = {0, 0, 0, 0};
    const std::size_t n = std::fread(head, 1, sizeof head, f);
    std::fclose(f);
    if (n == 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4) return;
    if (n >= 1 && head[0] == 0x80)
        throw Error(path + ": the legacy torch.save format (PyTorch before 1.6, or _use_new_zipfile_serialization=False), which "
                           "cannot be read without executing its pickle; re-save it with a current PyTorch: "
                           "torch.save(torch.load(path, weights_only=True), path)");
    throw Error(path + ": not a torch.save zip archive (expected the bytes PK\\x03\\x04 at the start" +
                std::string(n < 4 ? "; the file is shorter than 4 bytes)" : ")"));
}

}  // namespace

std::int64_t HfFolder::Tensor::numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

HfConfig read_hf_config(const std::string& path) {
    if (!is_file(path)) throw Error(path + ": no such file (a Hugging Face model folder has a config.json)");
    const std::string text = read_file(path, 16 << 20, "config.json");
    check_json_depth(text, path);
    const json c = json::parse(text, nullptr, false);
    if (c.is_discarded() || !c.is_object()) throw Error(path + ": not a JSON object");
    HfConfig cfg;
    cfg.path = path;
    const std::string type = c.contains("model_type") && c["model_type"].is_string() ? c["model_type"].get<std::string>() : "";
    if (type == "gpt2") cfg.arch = HfArchitecture::Gpt2;
    else if (type == "bloom") cfg.arch = HfArchitecture::Bloom;
    else
        throw Error(path + ": model_type " + (c.contains("model_type") ? shown(c["model_type"]) : std::string("missing")) +
                    "; mds-hf-to-ckpt converts \"gpt2\" (GPT2LMHeadModel) and \"bloom\" (BloomForCausalLM)");
    if (cfg.arch == HfArchitecture::Gpt2) {
        // GPT2Config's defaults (transformers models/gpt2/configuration_gpt2.py).
        cfg.vocab_size = positive_int(c, {"vocab_size"}, 50257, path);
        cfg.n_positions = positive_int(c, {"n_positions", "max_position_embeddings"}, 1024, path);
        cfg.hidden_size = positive_int(c, {"n_embd", "hidden_size"}, 768, path);
        cfg.num_layers = positive_int(c, {"n_layer", "num_hidden_layers"}, 12, path);
        cfg.num_heads = positive_int(c, {"n_head", "num_attention_heads"}, 12, path);
        cfg.ffn_hidden_size = c.contains("n_inner") && !c["n_inner"].is_null() ? positive_int(c, {"n_inner"}, 0, path) : 4 * cfg.hidden_size;
        cfg.activation_function = "gelu_new";
        if (c.contains("activation_function")) {
            if (!c["activation_function"].is_string()) throw Error(path + ": activation_function is " + shown(c["activation_function"]) + "; expected a name");
            cfg.activation_function = c["activation_function"].get<std::string>();
        }
        cfg.hidden_dropout = number(c, "resid_pdrop", 0.1, path);
        cfg.embedding_dropout = number(c, "embd_pdrop", 0.1, path);
        cfg.attention_dropout = number(c, "attn_pdrop", 0.1, path);
        cfg.scale_attn_weights = flag(c, "scale_attn_weights", true, path);
        cfg.scale_attn_by_inverse_layer_idx = flag(c, "scale_attn_by_inverse_layer_idx", false, path);
        cfg.add_cross_attention = flag(c, "add_cross_attention", false, path);
    } else {
        // BloomConfig's defaults (models/bloom/configuration_bloom.py); n_embed is its old name of hidden_size.
        cfg.vocab_size = positive_int(c, {"vocab_size"}, 250880, path);
        cfg.hidden_size = positive_int(c, {"hidden_size", "n_embed"}, 64, path);
        cfg.num_layers = positive_int(c, {"n_layer", "num_hidden_layers"}, 2, path);
        cfg.num_heads = positive_int(c, {"n_head", "num_attention_heads"}, 8, path);
        cfg.ffn_hidden_size = 4 * cfg.hidden_size;  // BloomMLP hard-codes 4 × hidden
        cfg.activation_function = "bloom_gelu";
        cfg.hidden_dropout = cfg.embedding_dropout = number(c, "hidden_dropout", 0.0, path);
        cfg.attention_dropout = number(c, "attention_dropout", 0.0, path);
        cfg.apply_residual_connection_post_layernorm = flag(c, "apply_residual_connection_post_layernorm", false, path);
    }
    cfg.layer_norm_epsilon = number(c, "layer_norm_epsilon", 1e-5, path);
    cfg.initializer_range = number(c, "initializer_range", 0.02, path);
    cfg.tie_word_embeddings = flag(c, "tie_word_embeddings", true, path);
    cfg.dtype = config_dtype(c);
    if (cfg.hidden_size % cfg.num_heads != 0)
        throw Error(path + ": hidden size " + std::to_string(cfg.hidden_size) + " is not a multiple of the " + std::to_string(cfg.num_heads) +
                    " attention heads");
    return cfg;
}

// The open weight files: one of the two kinds per file, and the resolved .bin tensors.
struct HfFolder::Files {
    std::vector<std::unique_ptr<SafetensorsFile>> safetensors;  // null for a .bin file
    std::vector<std::unique_ptr<TorchFile>> torch;              // null for a .safetensors file
    std::vector<std::optional<TorchTensor>> torch_tensors;      // by tensor index; set for .bin tensors
    std::vector<const TensorView*> views;                       // by tensor index; set for .safetensors tensors
};

HfFolder::HfFolder(const std::string& dir, bool verify) : dir_(dir), open_(std::make_unique<Files>()) {
    std::error_code ec;
    if (!fs::exists(dir, ec)) throw Error(printable(dir, 200) + ": no such folder");
    if (!fs::is_directory(dir, ec)) throw Error(printable(dir, 200) + ": not a folder (expected a Hugging Face model folder)");
    config_ = read_hf_config((fs::path(dir) / "config.json").string());
    open_weights(verify);
}

HfFolder::~HfFolder() = default;

void HfFolder::open_weights(bool verify) {
    const fs::path dir(dir_);
    // transformers' order: safetensors before pickles, one file before an index.
    struct Kind {
        const char* single;
        const char* index;
        const char* ext;
    };
    for (const Kind& k : {Kind{"model.safetensors", "model.safetensors.index.json", ".safetensors"},
                          Kind{"pytorch_model.bin", "pytorch_model.bin.index.json", ".bin"}}) {
        if (is_file(dir / k.single)) {
            add_file((dir / k.single).string(), verify);
            return;
        }
        const fs::path index = dir / k.index;
        if (!is_file(index)) continue;
        index_ = index.string();
        const std::string text = read_file(index_, 64 << 20, k.index);
        check_json_depth(text, index_);
        const json j = json::parse(text, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            throw Error(index_ + ": expected a JSON object with a \"weight_map\" object (tensor name -> shard file)");
        std::set<std::string> shards;
        for (const auto& [name, file] : j["weight_map"].items()) {
            if (!file.is_string()) throw Error(index_ + ": weight_map[" + in_quotes(name) + "] is " + shown(file) + ", not a file name");
            const std::string f = checked_entry_name(file.get<std::string>(), index_ + " weight_map[" + in_quotes(name) + "]");
            if (!f.ends_with(k.ext)) throw Error(index_ + ": weight_map[" + in_quotes(name) + "] names " + in_quotes(f) + ", not a " + k.ext + " file");
            shards.insert(f);
        }
        if (shards.empty()) throw Error(index_ + ": the weight_map is empty");
        for (const auto& f : shards) {
            if (!is_file(dir / f)) throw Error(index_ + ": names the shard " + in_quotes(f) + ", which is not in " + printable(dir_, 200));
            add_file((dir / f).string(), verify);
        }
        // Every tensor the index names must be in the shard it names.
        std::map<std::string, std::size_t> file_of;
        for (std::size_t i = 0; i < files_.size(); ++i) file_of[fs::path(files_[i]).filename().string()] = i;
        for (const auto& [name, file] : j["weight_map"].items()) {
            const Tensor* t = find(name);
            if (!t || t->file != file_of.at(file.get<std::string>()))
                throw Error(index_ + ": names tensor " + in_quotes(name) + " in " + in_quotes(file.get<std::string>()) + ", which does not hold it" +
                            (t ? " (" + fs::path(files_[t->file]).filename().string() + " does)" : std::string()));
        }
        return;
    }
    std::string other;
    for (const char* f : {"tf_model.h5", "flax_model.msgpack", "model.ckpt.index"})
        if (fs::exists(dir / f)) other = std::string("; it has ") + f + ", which mds does not read (load it in transformers and save_pretrained it)";
    throw Error(printable(dir_, 200) + ": no model.safetensors, model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json" +
                (other.empty() ? " (expected a Hugging Face model folder as save_pretrained writes it)" : other));
}

void HfFolder::add_file(const std::string& path, bool verify) {
    const std::size_t file = files_.size();
    files_.push_back(path);
    auto add = [&](const std::string& name, DType dtype, std::vector<std::int64_t> shape) {
        if (by_name_.count(name)) {
            const auto& first = tensors_[by_name_.find(name)->second];
            throw Error(path + ": tensor " + in_quotes(name) + " is also in " + files_[first.file]);
        }
        by_name_.emplace(name, tensors_.size());
        tensors_.push_back({name, dtype, std::move(shape), file});
        open_->torch_tensors.emplace_back();
        open_->views.push_back(nullptr);
    };
    if (path.ends_with(".safetensors")) {
        open_->safetensors.push_back(std::make_unique<SafetensorsFile>(path));
        open_->torch.push_back(nullptr);
        for (const auto& v : open_->safetensors.back()->tensors()) {
            add(v.name, v.dtype, v.shape);
            open_->views.back() = &v;
        }
        return;
    }
    check_torch_zip(path);
    open_->torch.push_back(std::make_unique<TorchFile>(path, verify));
    open_->safetensors.push_back(nullptr);
    const TorchFile& tf = *open_->torch.back();
    const PyValue& root = tf.root();
    if (root.type() != PyType::Dict && !root.is_object("collections", "OrderedDict"))
        throw Error(path + ": expected a state dict (a dict of tensors) at the top, found " + root.repr(80));
    for (const auto& [k, v] : root.ordered_dict_items().items()) {
        if (k.type() != PyType::Str) throw Error(path + ": a state dict key is " + k.repr(60) + ", not a name");
        if (!TorchFile::is_tensor(v)) continue;  // not a weight (transformers' loader skips it too)
        TorchTensor t = tf.tensor(v, k.as_str());
        add(k.as_str(), t.dtype, t.shape);
        open_->torch_tensors.back() = std::move(t);
    }
}

const HfFolder::Tensor* HfFolder::find(std::string_view name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

std::string HfFolder::where(const Tensor& t) const { return files_[t.file] + ": tensor " + in_quotes(t.name); }

std::span<const std::byte> HfFolder::bytes(const Tensor& t, std::vector<std::byte>& scratch) const {
    const std::size_t i = static_cast<std::size_t>(&t - tensors_.data());
    if (i >= tensors_.size()) throw Error("HfFolder::bytes: a tensor of another folder");
    if (const auto* v = open_->views[i]) return v->bytes;
    const TorchTensor& tt = *open_->torch_tensors[i];
    if (tt.contiguous()) return tt.bytes();
    scratch = tt.gather();
    return scratch;
}

}  // namespace mds::ckpt
