#include "mds/tokenizer/hf_name.h"

#include <sys/stat.h>

#include "mds/util/error.h"
#include "mds/util/hf_cache.h"
#include "mds/util/safe_paths.h"  // in_quotes

namespace mds::tok {
namespace {

bool is_regular(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The tokenizer.json of a folder (a local model folder or a cache snapshot), or an error saying
// what the folder holds instead.
std::string tokenizer_json_in(const std::string& folder, const std::string& name, const std::string& flag,
                              const hf_cache::Resolved& r) {
    const std::string file = folder + "/tokenizer.json";
    if (is_regular(file)) return file;
    std::string m = flag + " " + in_quotes(name) + ": ";
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
        m += "').save_pretrained('DIR')\"` and pass ";
        m += flag;
        m += " DIR (or the GPT-2 vocabulary and merges files if it is a plain GPT-2 vocabulary)";
    } else if (r.kind == hf_cache::Resolved::Kind::CacheSnapshot) {
        m += "; " + hf_cache::how_to_get(name) + " (a partial download may lack it)";
    }
    throw UsageError(m);
}

}  // namespace

std::string hf_tokenizer_json(const std::string& name, const std::string& flag) {
    if (name.empty()) throw UsageError(flag + " is empty");
    const auto r = hf_cache::resolve_name(name);
    switch (r.kind) {
    case hf_cache::Resolved::Kind::File: return r.path;
    case hf_cache::Resolved::Kind::Folder:
    case hf_cache::Resolved::Kind::CacheSnapshot: return tokenizer_json_in(r.path, name, flag, r);
    case hf_cache::Resolved::Kind::NotFound: break;
    }
    std::string m = flag + " " + in_quotes(name) + ": no tokenizer found offline. Searched " + r.searched + ". ";
    m += hf_cache::how_to_get(name);
    throw UsageError(m);
}

}  // namespace mds::tok
