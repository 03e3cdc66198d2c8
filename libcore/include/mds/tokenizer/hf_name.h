// A Hugging Face tokenizer named as transformers' AutoTokenizer.from_pretrained takes it, found
// offline: a tokenizer.json file, a folder holding one, or a Hub name (ORG/NAME) whose snapshot is
// in the local Hugging Face cache (util/hf_cache.h: huggingface_hub's folders and precedence).
#pragma once

#include <string>

namespace mds::tok {

// The path of the tokenizer.json `name` refers to. mds::UsageError naming `flag` when there is none:
// every folder searched and how to get it into the cache, or what the folder holds instead (a slow
// tokenizer's vocab.json + merges.txt, whose vocabulary transformers counts differently).
std::string hf_tokenizer_json(const std::string& name, const std::string& flag);

}  // namespace mds::tok
