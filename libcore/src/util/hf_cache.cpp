#include "mds/util/hf_cache.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mds/util/safe_paths.h"  // in_quotes

namespace mds::hf_cache {
namespace fs = std::filesystem;
namespace {

bool is_regular(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool is_folder(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// os.path.join(a, b) for a relative b.
std::string py_join(const std::string& a, const std::string& b) {
    if (a.empty() || a.back() == '/') return a + b;
    std::string out = a;
    out += '/';
    out += b;
    return out;
}

bool word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// posixpath.expanduser: "~" or "~/..." -> $HOME (else the password database), "~user/..." -> that
// user's home; an unknown user leaves the path as written.
std::string expand_user(const std::string& path, const EnvLookup& env) {
    if (path.empty() || path[0] != '~') return path;
    std::size_t i = path.find('/', 1);
    if (i == std::string::npos) i = path.size();
    std::string home;
    if (i == 1) {
        if (auto h = env("HOME")) {
            home = *h;
        } else {
            const passwd* pw = ::getpwuid(::getuid());
            if (!pw || !pw->pw_dir) return path;
            home = pw->pw_dir;
        }
    } else {
        const std::string user = path.substr(1, i - 1);
        const passwd* pw = ::getpwnam(user.c_str());
        if (!pw || !pw->pw_dir) return path;
        home = pw->pw_dir;
    }
    while (!home.empty() && home.back() == '/') home.pop_back();
    std::string out = home;
    out += path.substr(i);
    return out.empty() ? "/" : out;
}

// posixpath.expandvars: $NAME (ASCII word characters) and ${NAME}; unset variables stay as written.
std::string expand_vars(const std::string& path, const EnvLookup& env) {
    if (path.find('$') == std::string::npos) return path;
    std::string out;
    std::size_t i = 0;
    while (i < path.size()) {
        if (path[i] != '$') {
            out += path[i++];
            continue;
        }
        std::size_t end = i + 1;
        std::string name;
        if (end < path.size() && path[end] == '{') {
            const std::size_t close = path.find('}', end + 1);
            if (close == std::string::npos) {
                out += path[i++];
                continue;
            }
            name = path.substr(end + 1, close - end - 1);
            end = close + 1;
        } else {
            while (end < path.size() && word_char(path[end])) ++end;
            name = path.substr(i + 1, end - i - 1);
        }
        const auto value = name.empty() ? std::nullopt : env(name.c_str());
        if (value) out += *value;
        else out += path.substr(i, end - i);
        i = end;
    }
    return out;
}

bool repo_part_ok(std::string_view part) {
    if (part.empty() || part.size() > 96) return false;
    if (!word_char(part.front()) || !word_char(part.back())) return false;
    return std::all_of(part.begin(), part.end(), [](char c) { return word_char(c) || c == '-' || c == '.'; });
}

std::string read_ref(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    std::string v = s.str();
    // huggingface_hub writes the hash without a newline; a hand-made ref may have one.
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r' || v.back() == ' ')) v.pop_back();
    return v;
}

}  // namespace

EnvLookup process_env() {
    return [](const char* name) -> std::optional<std::string> {
        const char* v = std::getenv(name);
        if (!v) return std::nullopt;
        return std::string(v);
    };
}

std::string expand_path(const std::string& path, const EnvLookup& env) {
    return expand_vars(expand_user(path, env), env);
}

CacheDir hub_cache_dir(const EnvLookup& env) {
    // As huggingface_hub/constants.py: an empty variable counts as set (os.getenv returns "").
    if (auto v = env("HF_HUB_CACHE")) return {expand_path(*v, env), "HF_HUB_CACHE"};
    if (auto v = env("HUGGINGFACE_HUB_CACHE")) return {expand_path(*v, env), "HUGGINGFACE_HUB_CACHE"};
    std::string home, from;
    if (auto v = env("HF_HOME")) {
        home = *v;
        from = "HF_HOME";
    } else if (auto x = env("XDG_CACHE_HOME")) {
        home = py_join(*x, "huggingface");
        from = "XDG_CACHE_HOME";
    } else {
        home = py_join(expand_user("~", env), ".cache/huggingface");
        from = "the default ~/.cache/huggingface";
    }
    home = expand_path(home, env);
    return {expand_path(py_join(home, "hub"), env), from};
}

bool is_repo_id(std::string_view name) {
    if (name.find("--") != std::string_view::npos || name.find("..") != std::string_view::npos) return false;
    if (name.size() >= 4 && name.substr(name.size() - 4) == ".git") return false;
    const auto slash = name.find('/');
    if (slash == std::string_view::npos) return repo_part_ok(name);
    if (name.find('/', slash + 1) != std::string_view::npos) return false;
    return repo_part_ok(name.substr(0, slash)) && repo_part_ok(name.substr(slash + 1));
}

std::string repo_folder_name(std::string_view repo_id) {
    std::string out = "models";
    std::size_t start = 0;
    while (true) {
        const auto slash = repo_id.find('/', start);
        out += "--";
        out += repo_id.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
        if (slash == std::string_view::npos) break;
        start = slash + 1;
    }
    return out;
}

Snapshot find_snapshot(const std::string& cache_dir, const std::string& repo_id, const std::string& revision) {
    Snapshot s;
    s.repo_folder = py_join(cache_dir, repo_folder_name(repo_id));
    if (!is_folder(s.repo_folder)) {
        s.problem = in_quotes(s.repo_folder) + " does not exist";
        return s;
    }
    s.commit = revision;
    const std::string ref = s.repo_folder + "/refs/" + revision;
    if (is_regular(ref)) s.commit = read_ref(ref);
    const std::string snapshots = s.repo_folder + "/snapshots";
    std::error_code ec;
    if (is_folder(snapshots))
        for (const auto& e : fs::directory_iterator(snapshots, ec)) s.snapshots.push_back(e.path().filename().string());
    std::sort(s.snapshots.begin(), s.snapshots.end());
    const std::string folder = snapshots + "/" + s.commit;
    if (!s.commit.empty() && s.commit.find('/') == std::string::npos && is_folder(folder)) {
        s.folder = folder;
        s.snapshots.clear();
        return s;
    }
    if (s.commit == revision && !is_regular(ref)) {
        s.problem = in_quotes(ref) + " does not exist (huggingface_hub resolves revision " + in_quotes(revision) + " through it)";
    } else {
        s.problem = in_quotes(ref) + " names commit " + in_quotes(s.commit) + " but " + in_quotes(folder) + " does not exist";
    }
    return s;
}

bool known_missing(const Snapshot& snapshot, const std::string& file) {
    return !snapshot.commit.empty() && is_regular(snapshot.repo_folder + "/.no_exist/" + snapshot.commit + "/" + file);
}

Resolved resolve_name(const std::string& name, const EnvLookup& env) {
    Resolved r;
    if (!name.empty() && is_regular(name)) {
        r.kind = Resolved::Kind::File;
        r.path = name;
        return r;
    }
    if (!name.empty() && is_folder(name)) {
        r.kind = Resolved::Kind::Folder;
        r.path = name;
        return r;
    }
    std::error_code ec;
    const fs::path abs = fs::absolute(name.empty() ? fs::path(".") : fs::path(name), ec);
    r.searched = "a local file or folder " + in_quotes(ec ? name : abs.lexically_normal().string()) + ": none";
    if (!is_repo_id(name)) {
        r.searched += "; not a Hugging Face repository id (ORG/NAME), so the cache was not searched";
        return r;
    }
    r.cache = hub_cache_dir(env);
    r.snapshot = find_snapshot(r.cache.path, name);
    r.searched += "; the Hugging Face cache " + in_quotes(r.cache.path) + " (from " + r.cache.from + "): ";
    if (!r.snapshot.folder.empty()) {
        r.kind = Resolved::Kind::CacheSnapshot;
        r.path = r.snapshot.folder;
        r.searched.clear();
        return r;
    }
    r.searched += r.snapshot.problem;
    if (!r.snapshot.snapshots.empty()) {
        r.searched += " (snapshots present: ";
        for (std::size_t i = 0; i < r.snapshot.snapshots.size(); ++i) r.searched += (i ? ", " : "") + r.snapshot.snapshots[i];
        r.searched += "; pass one's folder to use it)";
    }
    return r;
}

std::string how_to_get(const std::string& name) {
    std::string m = "mds never downloads: on a machine with network, run `hf download ";
    m += name;
    m += "` (`huggingface-cli download ";
    m += name;
    m += "` with an older huggingface_hub) with HF_HOME or HF_HUB_CACHE set as this job sees them, or copy the model's folder here and pass its path";
    return m;
}

}  // namespace mds::hf_cache
