#include "mds/flags/train_tokenizer.h"

#include "mds/tokenizer/hf_name.h"
#include "mds/util/error.h"

namespace mds::flags {

tok::Tokenizer load_tokenizer(const DataArgs& d) {
    const std::string type = d.tokenizer_type.value_or("GPT2BPETokenizer");
    if (type == "GPT2BPETokenizer") {
        if (d.vocab_file.empty() || d.merge_file.empty())
            throw UsageError("--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
        return tok::Tokenizer::from_gpt2_files(d.vocab_file, d.merge_file);
    }
    if (type == "PretrainedFromHF") {
        const std::string& name = d.tokenizer_name_or_path;
        if (name.empty()) throw UsageError("--tokenizer-type PretrainedFromHF needs --tokenizer-name-or-path");
        return tok::Tokenizer::from_hf_json(tok::hf_tokenizer_json(name, "--tokenizer-name-or-path"));
    }
    throw UsageError("--tokenizer-type " + type + " is not supported (GPT2BPETokenizer or PretrainedFromHF)");
}

}  // namespace mds::flags
