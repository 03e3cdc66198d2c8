// A Hugging Face GPT2 / BLOOM model folder as transformers' from_pretrained finds it: config.json
// (the sizes under either spelling transformers accepts, its defaults where a key is absent) and the
// weight files in transformers' order of preference: model.safetensors, model.safetensors.index.json
// with its shards, pytorch_model.bin, pytorch_model.bin.index.json with its shards. .bin files are
// torch.save zip archives read by TorchFile (the pickle is interpreted, never executed); the legacy
// pre-1.6 format is refused by name. Tensors are views into the mapped files. Plain bytes: no LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mds/ckpt/hf_megatron_map.h"  // HfArchitecture
#include "mds/ckpt/safetensors.h"      // DType, SafetensorsFile

namespace mds::ckpt {

// config.json of a GPT2Config (model_type "gpt2") or BloomConfig ("bloom"), with transformers'
// defaults for absent keys.
struct HfConfig {
    std::string path;
    HfArchitecture arch = HfArchitecture::Gpt2;
    std::int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0;
    std::int64_t ffn_hidden_size = 0;   // GPT2 n_inner (null: 4 × n_embd); BLOOM always 4 × hidden
    std::int64_t n_positions = 0;       // GPT2's position embedding rows; 0 for BLOOM (ALiBi)
    std::string activation_function;    // GPT2 (default "gelu_new", GPT2Config's); BLOOM: "bloom_gelu" (its tanh GeLU)
    double layer_norm_epsilon = 1e-5, initializer_range = 0.02;
    double hidden_dropout = 0.0, embedding_dropout = 0.0, attention_dropout = 0.0;  // GPT2 resid_pdrop, embd_pdrop, attn_pdrop
    bool tie_word_embeddings = true;
    bool apply_residual_connection_post_layernorm = false;  // BLOOM
    // GPT2 options that change what the model computes (refused by the converter unless at these values).
    bool scale_attn_weights = true, scale_attn_by_inverse_layer_idx = false, add_cross_attention = false;
    std::optional<DType> dtype;         // "torch_dtype" (or transformers 5's "dtype") when it names a float type
};

// Reads and checks config.json: a JSON object of at most 16 MiB whose model_type is "gpt2" or
// "bloom" and whose sizes are positive integers (hidden a multiple of heads). Errors name the file
// and the key, with what was expected and found.
HfConfig read_hf_config(const std::string& path);

class HfFolder {
public:
    // Opens `dir`: config.json and the weight files (all mapped, every header and index checked).
    // `verify`: check the CRC-32 of the pickles and of each .bin storage when its tensor is read.
    HfFolder(const std::string& dir, bool verify = true);
    ~HfFolder();
    HfFolder(const HfFolder&) = delete;
    HfFolder& operator=(const HfFolder&) = delete;

    struct Tensor {
        std::string name;  // as stored ("transformer.h.0.ln_1.weight", "h.0.ln_1.weight", ...)
        DType dtype = DType::F32;
        std::vector<std::int64_t> shape;
        std::size_t file = 0;  // into weight_files()
        std::int64_t numel() const;
    };

    const std::string& directory() const { return dir_; }
    const HfConfig& config() const { return config_; }
    // The weight files read, as paths (one, or the shards an index names, in name order), and the
    // index when there is one (else empty).
    const std::vector<std::string>& weight_files() const { return files_; }
    const std::string& index_file() const { return index_; }
    // Every tensor of the weight files, in file order then the order each file holds them.
    const std::vector<Tensor>& tensors() const { return tensors_; }
    const Tensor* find(std::string_view name) const;
    // "<file>: tensor '<name>'" for messages.
    std::string where(const Tensor& t) const;
    // The tensor's row-major bytes: a view into its mapped file, or (a strided .bin tensor) gathered
    // into `scratch`. Checks the storage's CRC-32 for .bin files unless verification is off.
    std::span<const std::byte> bytes(const Tensor& t, std::vector<std::byte>& scratch) const;

private:
    struct Files;
    void open_weights(bool verify);
    void add_file(const std::string& path, bool verify);

    std::string dir_, index_;
    HfConfig config_;
    std::vector<std::string> files_;
    std::vector<Tensor> tensors_;
    std::map<std::string, std::size_t, std::less<>> by_name_;
    std::unique_ptr<Files> open_;
};

}  // namespace mds::ckpt
