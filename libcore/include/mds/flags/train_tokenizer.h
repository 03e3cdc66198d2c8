// The tokenizer mds-train builds from its flags, as Megatron's build_tokenizer: GPT2BPETokenizer
// from --vocab-file/--merge-file, or PretrainedFromHF from a tokenizer.json: a file, a folder
// holding one, or a Hub name (ORG/NAME) whose snapshot is in the local Hugging Face cache, found
// offline where transformers' AutoTokenizer.from_pretrained finds it (mds/util/hf_cache.h).
// mds fetches nothing from the Hub.
#pragma once

#include "mds/tokenizer/tokenizer.h"
#include "mds/flags/train_args.h"

namespace mds::flags {

// Throws mds::UsageError naming the flags when they are missing or contradictory, or when the
// tokenizer is nowhere (naming every place searched and how to fetch it); mds::Error when a file
// cannot be read.
tok::Tokenizer load_tokenizer(const DataArgs& data);

}  // namespace mds::flags
