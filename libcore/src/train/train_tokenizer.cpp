#include "mds/train/train_tokenizer.h"

#include <filesystem>

#include "mds/util/error.h"

namespace mds::train {

tok::Tokenizer load_tokenizer(const DataArgs& d) {
    const std::string type = d.tokenizer_type.value_or("GPT2BPETokenizer");
    if (type == "GPT2BPETokenizer") {
        if (d.vocab_file.empty() || d.merge_file.empty())
            throw UsageError("--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
        return tok::Tokenizer::from_gpt2_files(d.vocab_file, d.merge_file);
    }
    if (type == "PretrainedFromHF") {
        std::filesystem::path p = d.tokenizer_name_or_path;
        if (std::filesystem::is_directory(p)) p /= "tokenizer.json";
        if (d.tokenizer_name_or_path.empty() || !std::filesystem::exists(p))
            throw UsageError("--tokenizer-name-or-path " + d.tokenizer_name_or_path +
                             ": mds reads a local tokenizer.json (or a directory holding one); Hub names are not fetched");
        return tok::Tokenizer::from_hf_json(p.string());
    }
    throw UsageError("--tokenizer-type " + type + " is not supported (GPT2BPETokenizer or PretrainedFromHF)");
}

}  // namespace mds::train
