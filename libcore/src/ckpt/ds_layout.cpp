#include "mds/ckpt/ds_layout.h"

#include <cctype>
#include <cstdio>
#include <filesystem>

#include <sys/stat.h>  // stat

#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/safe_paths.h"  // checked_entry_name, printable

namespace mds::ckpt {
namespace {

// Parses a run of decimal digits at `s[pos]` (at least `min_digits`); advances pos.
std::optional<long long> digits(std::string_view s, std::size_t& pos, std::size_t min_digits = 1) {
    const std::size_t start = pos;
    long long v = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
        if (pos - start >= 12) return std::nullopt;
        v = v * 10 + (s[pos] - '0');
        ++pos;
    }
    if (pos - start < min_digits) return std::nullopt;
    return v;
}

bool eat(std::string_view s, std::size_t& pos, std::string_view lit) {
    if (s.substr(pos, lit.size()) != lit) return false;
    pos += lit.size();
    return true;
}

std::string two_digits(const char* prefix, long long v, const char* suffix) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%02lld%s", prefix, v, suffix);
    return buf;
}

}  // namespace

std::string ds_tag(long long global_steps) { return "global_step" + std::to_string(global_steps); }

std::string ds_layer_file(int layer, int tp_rank) {
    return two_digits("layer_", layer, "") + two_digits("-model_", tp_rank, "-model_states.pt");
}

std::string ds_mp_rank_file(int mp_rank) { return two_digits("mp_rank_", mp_rank, "_model_states.pt"); }

std::string ds_optim_file(bool bf16, int dp_rank, int mp_rank) {
    return std::string(bf16 ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(dp_rank) +
           two_digits("_mp_rank_", mp_rank, "_optim_states.pt");
}

std::optional<DsLayerFileName> parse_ds_layer_file(std::string_view name) {
    std::size_t pos = 0;
    DsLayerFileName r;
    if (!eat(name, pos, "layer_")) return std::nullopt;
    const auto layer = digits(name, pos, 2);
    if (!layer || !eat(name, pos, "-model_")) return std::nullopt;
    const auto tp = digits(name, pos, 2);
    if (!tp || !eat(name, pos, "-model_states.pt") || pos != name.size()) return std::nullopt;
    r.layer = static_cast<int>(*layer);
    r.tp_rank = static_cast<int>(*tp);
    return r;
}

std::optional<int> parse_ds_mp_rank_file(std::string_view name) {
    std::size_t pos = 0;
    if (!eat(name, pos, "mp_rank_")) return std::nullopt;
    const auto mp = digits(name, pos, 2);
    if (!mp || !eat(name, pos, "_model_states.pt") || pos != name.size()) return std::nullopt;
    return static_cast<int>(*mp);
}

std::optional<DsOptimFileName> parse_ds_optim_file(std::string_view name) {
    std::size_t pos = 0;
    DsOptimFileName r;
    r.bf16 = eat(name, pos, "bf16_");
    if (!eat(name, pos, "zero_pp_rank_")) return std::nullopt;
    const auto dp = digits(name, pos);
    if (!dp || !eat(name, pos, "_mp_rank_")) return std::nullopt;
    const auto mp = digits(name, pos, 2);
    if (!mp) return std::nullopt;
    eat(name, pos, "_");
    if (!eat(name, pos, "optim_states.pt") || pos != name.size()) return std::nullopt;
    r.dp_rank = static_cast<int>(*dp);
    r.mp_rank = static_cast<int>(*mp);
    return r;
}

std::optional<long long> parse_ds_tag(std::string_view name) {
    std::size_t pos = 0;
    if (!eat(name, pos, "global_step")) return std::nullopt;
    const auto n = digits(name, pos);
    if (!n || pos != name.size()) return std::nullopt;
    return *n;
}

std::optional<std::string> read_latest_tag(const std::string& root) {
    const std::string path = (std::filesystem::path(root) / "latest").string();
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    // Not opened unless regular: a FIFO would block the open, a device would never end.
    if (!S_ISREG(st.st_mode)) throw Error(printable(path, 200) + ": not a regular file (a checkpoint's `latest` holds a tag name)");
    std::string tag = read_file(path, 4096, "`latest` file");
    const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
    while (!tag.empty() && space(tag.back())) tag.pop_back();
    std::size_t first = 0;
    while (first < tag.size() && space(tag[first])) ++first;
    return checked_entry_name(std::string_view(tag).substr(first), printable(path, 200) + " (the tag of the latest checkpoint)");
}

std::string checked_tag_dir(const std::string& root, const std::string& tag, const std::string& source) {
    checked_entry_name(tag, source);
    const std::string dir = (std::filesystem::path(root) / tag).string();
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        std::string m = source;
        m += " names tag '";
        m += printable(tag);
        m += "', but ";
        m += printable(dir, 200);
        m += " is not a folder";
        throw Error(m);
    }
    return dir;
}

std::filesystem::path plain_folder_path(const std::string& path) {
    namespace fs = std::filesystem;
    const auto strip = [](fs::path p) {
        p = p.lexically_normal();
        if (p.filename().empty() && p.has_relative_path()) p = p.parent_path();
        return p;
    };
    fs::path p = strip(path);
    const auto name = p.filename().string();
    if (name.empty() || name == "." || name == "..") {
        std::error_code ec;
        const fs::path abs = fs::absolute(path, ec);
        if (!ec) p = strip(abs);
    }
    return p;
}

void write_latest_tag(const std::string& root, const std::string& tag) {
    write_file_atomic((std::filesystem::path(root) / "latest").string(), tag);
    sync_directory(root);
}

}  // namespace mds::ckpt
