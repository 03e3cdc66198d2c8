#include "mds/train/train_tokenizer.h"

#include <sys/stat.h>

#include "mds/util/error.h"
#include "mds/util/hf_cache.h"
#include "mds/util/safe_paths.h"  // in_quotes

namespace mds::train {
namespace {

bool is_regular(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The tokenizer.json of a folder (a local model folder or a cache snapshot), or an error saying
// what the folder holds instead.
std::string tokenizer_json_in(const std::string& folder, const std::string& name, const hf_cache::Resolved& r) {
    const std::string file = folder + "/tokenizer.json";
    if (is_regular(file)) return file;
    std::string m = "--tokenizer-name-or-path " + in_quotes(name) + ": ";
    m += r.kind == hf_cache::Resolved::Kind::CacheSnapshot ? "its snapshot in the Hugging Face cache " : "the folder ";
    m += in_quotes(folder) + " has no tokenizer.json";
    if (r.kind == hf_cache::Resolved::Kind::CacheSnapshot && hf_cache::known_missing(r.snapshot, "tokenizer.json"))
        m += " (huggingface_hub recorded that the repository has none)";
    if (is_regular(folder + "/vocab.json") && is_regular(folder + "/merges.txt")) {
        m += "; it has vocab.json and merges.txt (a slow tokenizer), whose added tokens transformers takes from its "
             "tokenizer_config.json, so mds would not count the same vocabulary. mds reads the fast tokenizer's "
             "tokenizer.json: write one with `python -c \"from transformers import AutoTokenizer; "
             "AutoTokenizer.from_pretrained('";
        m += name;
        m += "').save_pretrained('DIR')\"` and pass --tokenizer-name-or-path DIR (or pass --tokenizer-type GPT2BPETokenizer "
             "--vocab-file/--merge-file if it is a plain GPT-2 vocabulary)";
    } else if (r.kind == hf_cache::Resolved::Kind::CacheSnapshot) {
        m += "; " + hf_cache::how_to_get(name) + " (a partial download may lack it)";
    }
    throw UsageError(m);
}

}  // namespace

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
        const auto r = hf_cache::resolve_name(name);
        switch (r.kind) {
        case hf_cache::Resolved::Kind::File: return tok::Tokenizer::from_hf_json(r.path);
        case hf_cache::Resolved::Kind::Folder:
        case hf_cache::Resolved::Kind::CacheSnapshot: return tok::Tokenizer::from_hf_json(tokenizer_json_in(r.path, name, r));
        case hf_cache::Resolved::Kind::NotFound: break;
        }
        std::string m = "--tokenizer-name-or-path " + in_quotes(name) + ": no tokenizer found offline. Searched " + r.searched + ". ";
        m += hf_cache::how_to_get(name);
        throw UsageError(m);
    }
    throw UsageError("--tokenizer-type " + type + " is not supported (GPT2BPETokenizer or PretrainedFromHF)");
}

}  // namespace mds::train
