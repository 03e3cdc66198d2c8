// The tokenizer mds-train builds from its flags, as Megatron's build_tokenizer: GPT2BPETokenizer
// from --vocab-file/--merge-file, or PretrainedFromHF from a local tokenizer.json (a file, or a
// directory holding one; mds fetches nothing from the Hub).
#pragma once

#include "mds/tokenizer/tokenizer.h"
#include "mds/train/train_args.h"

namespace mds::train {

// Throws mds::UsageError naming the flags when they are missing or contradictory, mds::Error when
// a file cannot be read.
tok::Tokenizer load_tokenizer(const DataArgs& data);

}  // namespace mds::train
