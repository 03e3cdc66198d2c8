#include "ckpt/hf_tokenizer.h"

#include <sys/stat.h>  // stat

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mds/util/json_limits.h"
#include "mds/util/error.h"
#include "mds/util/hf_cache.h"
#include "mds/util/files.h"       // read_file
#include "mds/util/safe_paths.h"  // printable

namespace mds::ckpt::hf_detail {
namespace fs = std::filesystem;
namespace {

// A tokenizer document is a few MB (BLOOM's tokenizer.json: 14 MB); refuse what cannot be one
// before parsing it into memory.
constexpr std::uint64_t kMaxTokenizerFileBytes = 256ull << 20;
// How far above the tag folder a relative args path is looked for: the checkpoint root, the run
// folder holding it, and two more (runs keep data/ and checkpoints/ side by side).
constexpr int kParentsSearched = 4;

bool is_regular(const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool is_folder(const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

nlohmann::json read_json(const std::string& path) {
    const std::string text = read_file(path, kMaxTokenizerFileBytes, "tokenizer file");
    check_json_depth(text, printable(path, 200));
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) throw Error(printable(path, 200) + ": not a JSON document");
    return j;
}

// Counts the ids of a token -> id object (vocab.json, tokenizer.json's BPE / WordPiece vocab).
void count_ids(const nlohmann::json& vocab, const std::string& path, TokenizerFiles& t) {
    for (const auto& [token, id] : vocab.items()) {
        if (!id.is_number_integer() || id.get<std::int64_t>() < 0)
            throw Error(printable(path, 200) + ": token " + in_quotes(token) + " has no id (expected a JSON object of token -> id)");
        t.max_id = std::max(t.max_id, id.get<std::int64_t>());
        ++t.tokens;
    }
    t.ids_from = path;
}

void read_gpt2_vocab(TokenizerFiles& t) {
    const auto j = read_json(t.vocab);
    if (!j.is_object()) throw Error(printable(t.vocab, 200) + ": not a GPT-2 vocabulary (expected a JSON object of token -> id)");
    count_ids(j, t.vocab, t);
    if (const auto it = j.find("<|endoftext|>"); it != j.end()) t.eos_id = it->get<std::int64_t>();
}

// tokenizer.json (the tokenizers library): model.vocab as an object (BPE, WordPiece, WordLevel)
// or a list of [piece, score] (Unigram: the index is the id), plus added_tokens[].id.
void read_tokenizer_json(const std::string& path, TokenizerFiles& t) {
    const auto j = read_json(path);
    if (!j.is_object()) throw Error(printable(path, 200) + ": not a tokenizer.json (expected a JSON object)");
    t.ids_from = path;
    if (const auto m = j.find("model"); m != j.end() && m->is_object()) {
        if (const auto v = m->find("vocab"); v != m->end()) {
            if (v->is_object()) {
                count_ids(*v, path, t);
            } else if (v->is_array() && !v->empty()) {
                t.tokens = static_cast<std::int64_t>(v->size());
                t.max_id = t.tokens - 1;
            }
        }
    }
    if (const auto a = j.find("added_tokens"); a != j.end() && a->is_array())
        for (const auto& tok : *a)
            if (tok.is_object() && tok.contains("id") && tok["id"].is_number_integer()) {
                t.max_id = std::max(t.max_id, tok["id"].get<std::int64_t>());
                ++t.tokens;
            }
}

// The vocabulary of a tokenizer folder, for the id check: tokenizer.json, else GPT-2's vocab.json.
// False when it has neither.
bool read_folder_vocabulary(const fs::path& dir, TokenizerFiles& t) {
    if (is_regular(dir / "tokenizer.json")) {
        read_tokenizer_json((dir / "tokenizer.json").string(), t);
        return true;
    }
    if (is_regular(dir / "vocab.json")) {
        t.vocab = (dir / "vocab.json").string();
        read_gpt2_vocab(t);
        t.vocab.clear();
        return true;
    }
    return false;
}

// args.<key> as a string, or "" when absent, None or not a string.
std::string str_arg(const DsCheckpoint& ck, const char* key) {
    const auto* v = ck.arg(key);
    return v && v->type() == PyType::Str ? v->as_str() : std::string();
}

// Where a path from the checkpoint's args is: as given (absolute, or relative to the current
// folder), else relative to the tag folder and the folders above it. `tried` gets every candidate.
std::optional<fs::path> locate(const std::string& given, const DsCheckpoint& ck, std::vector<std::string>& tried, std::string& base) {
    const fs::path g = given;
    tried.push_back(given);
    if (is_regular(g)) {
        base = g.is_absolute() ? "" : "the current folder";
        return g;
    }
    if (g.is_absolute()) return std::nullopt;
    std::error_code ec;
    fs::path folder = fs::absolute(ck.directory(), ec).lexically_normal();
    if (ec) return std::nullopt;
    for (int up = 0; up <= kParentsSearched && !folder.empty(); ++up) {
        const fs::path candidate = (folder / g).lexically_normal();
        tried.push_back(candidate.string());
        if (is_regular(candidate)) {
            base = folder.string();
            return candidate;
        }
        if (folder == folder.parent_path()) break;
        folder = folder.parent_path();
    }
    return std::nullopt;
}

std::string join_quoted(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& s : items) {
        if (!out.empty()) out += ", ";
        out += in_quotes(s);
    }
    return out;
}

// The files of a tokenizer folder worth exporting: never a model's weights from a whole snapshot.
const char* const kTokenizerFileNames[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                           "added_tokens.json", "vocab.json",            "merges.txt",
                                           "vocab.txt",         "tokenizer.model",       "spiece.model",
                                           "sentencepiece.bpe.model"};

// args.tokenizer_name_or_path (BMD: AutoTokenizer.from_pretrained(name)): a local folder (relative
// to where the training ran, like the args' vocabulary files) or the Hub name's cached snapshot.
TokenizerFiles hub_tokenizer(const DsCheckpoint& ck, const std::string& name, const std::function<void(const std::string&)>& note) {
    TokenizerFiles t;
    auto r = hf_cache::resolve_name(name);
    std::string found_as;
    if (r.kind == hf_cache::Resolved::Kind::NotFound && !fs::path(name).is_absolute()) {
        std::vector<std::string> tried;
        std::string base;
        if (const auto f = locate(name + "/tokenizer.json", ck, tried, base)) {
            r.kind = hf_cache::Resolved::Kind::Folder;
            r.path = f->parent_path().string();
            found_as = " found as " + in_quotes(r.path) + (base.empty() ? std::string() : " (relative to " + printable(base, 200) + ")");
        }
    }
    switch (r.kind) {
    case hf_cache::Resolved::Kind::NotFound: {
        std::string m = "the checkpoint's tokenizer (args.tokenizer_name_or_path " + in_quotes(name) + ") was not found: searched " +
                        r.searched + ". Pass --tokenizer-dir (a folder with tokenizer.json) or --vocab-file/--merge-file, "
                        "or --no-tokenizer to export the weights alone; ";
        m += hf_cache::how_to_get(name);
        throw Error(m);
    }
    case hf_cache::Resolved::Kind::File:
        throw Error("args.tokenizer_name_or_path " + in_quotes(name) + " is a file, not a tokenizer folder; pass --tokenizer-dir (a "
                    "folder with tokenizer.json) or --no-tokenizer");
    case hf_cache::Resolved::Kind::Folder:
    case hf_cache::Resolved::Kind::CacheSnapshot: break;
    }
    t.kind = TokenizerFiles::Kind::Folder;
    t.folder = r.path;
    for (const char* f : kTokenizerFileNames)
        if (is_regular(fs::path(r.path) / f)) t.files.emplace_back(f);
    if (t.files.empty())
        throw Error("the checkpoint's tokenizer (args.tokenizer_name_or_path " + in_quotes(name) + ") resolves to " + in_quotes(r.path) +
                    ", which holds no tokenizer files (tokenizer.json, vocab.json, ...); pass --tokenizer-dir or --no-tokenizer");
    (void)read_folder_vocabulary(r.path, t);
    note("tokenizer: args.tokenizer_name_or_path " + in_quotes(name) +
         (r.kind == hf_cache::Resolved::Kind::CacheSnapshot ? " from the Hugging Face cache: " + in_quotes(r.path) : found_as));
    return t;
}

}  // namespace

TokenizerFiles find_tokenizer(const DsCheckpoint& ck, const ToHfOptions& options, const std::function<void(const std::string&)>& note) {
    TokenizerFiles t;
    if (options.no_tokenizer) return t;
    if (!options.tokenizer_dir.empty()) {
        if (!is_folder(options.tokenizer_dir)) throw Error("--tokenizer-dir " + in_quotes(options.tokenizer_dir) + ": no such folder");
        t.kind = TokenizerFiles::Kind::Folder;
        t.folder = options.tokenizer_dir;
        if (!read_folder_vocabulary(options.tokenizer_dir, t))
            note("warning: --tokenizer-dir " + in_quotes(t.folder) + " has neither tokenizer.json nor vocab.json; its token ids are not checked against the embedding");
        return t;
    }

    // GPT-2 BPE files: a flag wins; else the args' path, found where the training ran.
    std::vector<std::string> missing;  // "args.vocab_file 'x' (tried ...)"
    const auto pick = [&](const std::string& flag_value, const char* flag, const char* key) -> std::string {
        if (!flag_value.empty()) {
            if (!is_regular(flag_value)) throw Error(std::string(flag) + " " + in_quotes(flag_value) + ": no such file");
            return flag_value;
        }
        const std::string given = str_arg(ck, key);
        if (given.empty()) return "";
        std::vector<std::string> tried;
        std::string base;
        if (const auto found = locate(given, ck, tried, base)) {
            if (tried.size() > 1 || !base.empty())
                note("tokenizer: args." + std::string(key) + " " + in_quotes(given) + " found as " + in_quotes(found->string()) +
                     (base.empty() ? std::string() : " (relative to " + printable(base, 200) + ")"));
            return found->string();
        }
        missing.push_back("args." + std::string(key) + " " + in_quotes(given) + " (tried " + join_quoted(tried) + ")");
        return "";
    };
    t.vocab = pick(options.vocab_file, "--vocab-file", "vocab_file");
    t.merges = pick(options.merge_file, "--merge-file", "merge_file");
    if (!missing.empty()) {
        std::string m = "the checkpoint's tokenizer files were not found: ";
        for (std::size_t i = 0; i < missing.size(); ++i) m += (i ? "; " : "") + missing[i];
        m += ". Pass --vocab-file and --merge-file (or --tokenizer-dir), run from the training folder, or pass --no-tokenizer to "
             "export the weights alone";
        throw Error(m);
    }
    if (!t.vocab.empty() && !t.merges.empty()) {
        t.kind = TokenizerFiles::Kind::Gpt2Bpe;
        read_gpt2_vocab(t);
        return t;
    }
    if (!t.vocab.empty() || !t.merges.empty())
        throw Error(std::string("a GPT-2 tokenizer needs both files: ") + (t.vocab.empty() ? "--vocab-file" : "--merge-file") +
                    " is missing (the checkpoint's args do not name it); or pass --no-tokenizer to export the weights alone");
    const std::string type = str_arg(ck, "tokenizer_type"), name = str_arg(ck, "tokenizer_name_or_path");
    if (!name.empty() && (type.empty() || type == "PretrainedFromHF")) return hub_tokenizer(ck, name, note);
    // The checkpoint names no files (nor a tokenizer by name): say so, once, loudly.
    std::string which;
    if (!type.empty()) which += " (args.tokenizer_type " + in_quotes(type);
    if (!name.empty()) which += (which.empty() ? " (" : ", ") + std::string("args.tokenizer_name_or_path ") + in_quotes(name);
    if (!which.empty()) which += ")";
    note("warning: no tokenizer files are written: the checkpoint names no vocabulary files" + which +
         "; pass --tokenizer-dir (e.g. a folder with tokenizer.json) or --vocab-file/--merge-file, or --no-tokenizer to silence this");
    return t;
}

void check_tokenizer_fits(const TokenizerFiles& t, std::int64_t embedding_rows) {
    if (t.kind == TokenizerFiles::Kind::None || t.max_id < 0) return;
    const bool eos_out = t.eos_id && *t.eos_id >= embedding_rows;
    if (t.max_id < embedding_rows && !eos_out) return;
    std::string m = "the tokenizer (" + printable(t.ids_from, 200) + ") has token ids up to " + std::to_string(t.max_id) + " (" +
                    std::to_string(t.tokens) + " tokens";
    if (t.eos_id) m += ", <|endoftext|> = " + std::to_string(*t.eos_id);
    m += ") but the model's embedding has " + std::to_string(embedding_rows) +
         " rows: transformers would index past it. Pass the tokenizer the model was trained with "
         "(--vocab-file/--merge-file or --tokenizer-dir), or --no-tokenizer to export the weights alone";
    throw Error(m);
}

}  // namespace mds::ckpt::hf_detail
