// Internal to merged_tensors_*.cpp: the two kinds of MergedTensors and a few helpers they share.
#pragma once

#include <memory>
#include <string>

#include "mds/ckpt/merged_tensors.h"

namespace mds::ckpt::merged_detail {

// A DeepSpeed pipeline checkpoint (merged_tensors_ds.cpp).
std::unique_ptr<MergedTensors> open_deepspeed(const std::string& path, bool optimizer, bool verify);
// A Hugging Face GPT2 / BLOOM folder (merged_tensors_hf.cpp).
std::unique_ptr<MergedTensors> open_huggingface(const std::string& dir, bool verify);

// "embedding.", "layers.<i>.", "final_layernorm." + name.
inline std::string embedding_name(const std::string& name) { return "embedding." + name; }
inline std::string block_name(std::size_t block, const std::string& name) { return "layers." + std::to_string(block) + "." + name; }
inline std::string final_name(const std::string& name) { return "final_layernorm." + name; }

}  // namespace mds::ckpt::merged_detail
