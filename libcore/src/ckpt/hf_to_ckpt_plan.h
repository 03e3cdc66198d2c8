// Internal to mds-hf-to-ckpt (hf_to_ckpt.cpp, hf_to_ckpt_plan.cpp, hf_to_ckpt_args.cpp): the target
// checkpoint worked out from a Hugging Face folder before anything is written: the model's
// Megatron variant (GeLU kind, positions, embedding LayerNorm, residual order), every parameter with
// its Hugging Face source, global and TP-shard shapes, the pipeline stages with their optimizer
// groups, and what the args Namespace of the mp_rank files says (specs/checkpoints.md §1, §3, §4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mds/ckpt/ds_optimizer_layout.h"  // DsParamGroup
#include "mds/ckpt/hf_folder.h"
#include "mds/ckpt/hf_to_ckpt.h"
#include "mds/ckpt/pickle.h"
#include "mds/ckpt/tp_reshard.h"  // TpLayout

namespace mds::ckpt::hf2ck_detail {

// Megatron's GeLU flags for the Hugging Face activation (BMD's ParallelMLP precedence, which
// to_hf.cpp's gelu_kind reads back): bias_gelu_fusion wins, then openai_gelu, else F.gelu.
struct GeluArgs {
    bool bias_gelu_fusion = true;  // GPT2 "gelu_fast", BLOOM's bloom_gelu: the fused kernel's tanh GeLU
    bool openai_gelu = false;      // GPT2 "gelu_new" (and "gelu_pytorch_tanh", the same function)
};

struct Param {
    MegatronPlace place;
    int layer = 0;                             // BMD's layer file index
    const HfFolder::Tensor* source = nullptr;  // the Hugging Face tensor
    std::vector<std::int64_t> shape;           // global, Megatron's layout, vocabulary padded
    std::vector<std::int64_t> shard;           // one TP rank's
    TpLayout layout;
    bool vocab = false;                        // word_embeddings.weight: zero rows appended up to the padded size
    bool weight_decay = true;                  // Megatron's rule: not for biases and LayerNorms
    std::string ds_name;                       // DeepSpeed's parameter name: "tied_modules.embed.word_embeddings.weight", "3.input_layernorm.weight"
    std::uint64_t shard_bytes(DType dtype) const;
};

struct Stage {
    std::vector<int> layers;               // layer indices whose files the stage holds
    bool tied_embedding = false;           // holds tied_modules.embed (first stage and the LM head's)
    std::vector<std::size_t> params;       // into Plan::params, in DeepSpeed's traversal order
    std::vector<DsParamGroup> groups;      // Megatron's three optimizer groups of those
};

struct TokenizerFiles {
    std::vector<std::string> files;        // names in the Hugging Face folder, copied into hf_tokenizer/
    std::string tokenizer_type;            // "GPT2BPETokenizer" or "PretrainedFromHF"
    bool gpt2_bpe_files = false;           // vocab.json + merges.txt are among them
};

struct Plan {
    const HfFolder* folder = nullptr;
    HfArchitecture arch = HfArchitecture::Gpt2;
    HfModelSizes sizes;                    // sizes.vocab: the Hugging Face vocabulary (unpadded)
    std::int64_t num_layers = 0, padded_vocab = 0, seq_length = 0, max_positions = 0;
    std::int64_t padded_vocab_divisible_by = 128;  // --make-vocab-size-divisible-by
    DType dtype = DType::F32;              // of every written tensor
    GeluArgs gelu;
    bool alibi = false, embed_layernorm = false, post_ln = false;
    int tp = 1, pp = 1;
    std::vector<int> layers;               // layer indices, sorted
    std::vector<Param> params;             // layer-file order
    std::vector<Stage> stages;
    TokenizerFiles tokenizer;
    std::string partition_method;
    std::vector<std::string> notes;        // for the user: conversions, ignored tensors
};

// Reads the folder's config and tensor list against the request and lays out the target. Every
// refusal is an mds::Error naming config.json or the tensor (mds::UsageError for flag values the
// model cannot take).
Plan make_plan(const HfFolder& folder, const HfToCkptOptions& options);

// The mp_rank file of pipeline stage `stage` (the same for each of its TP ranks; an object tree without tensors).
PyValue mp_rank_root(const Plan& plan, int stage);

// The mds-train / Megatron-DeepSpeed flags that build this model from the checkpoint at `out`.
std::vector<std::string> train_flags(const Plan& plan, const std::string& out);

}  // namespace mds::ckpt::hf2ck_detail
