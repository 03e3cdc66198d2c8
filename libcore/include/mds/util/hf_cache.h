// The local Hugging Face cache, read the way huggingface_hub (hf_hub_download / try_to_load_from_cache)
// and transformers' from_pretrained find a repository offline. Nothing here touches the network.
//
//   cache folder: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE (legacy), else HF_HOME/hub, else
//                 $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; each value with
//                 '~' and $VARS expanded as Python's os.path.expanduser / expandvars do
//                 (huggingface_hub/constants.py). TRANSFORMERS_CACHE is no longer read by either.
//   repository:   <cache>/models--ORG--NAME/refs/<revision> holds a commit hash;
//                 <cache>/models--ORG--NAME/snapshots/<hash>/<file> is the file (a symbolic link into
//                 ../../blobs/); .no_exist/<hash>/<file> records a file the repository lacks.
//
// A name that is a local file or folder wins over the cache, as in transformers.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::hf_cache {

// An environment lookup (std::getenv by default); tests pass their own.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
EnvLookup process_env();

// Python's os.path.expanduser then os.path.expandvars on `path` (unknown $VARS stay as written).
std::string expand_path(const std::string& path, const EnvLookup& env);

struct CacheDir {
    std::string path;  // the hub cache folder huggingface_hub uses
    std::string from;  // how it was chosen: "HF_HUB_CACHE", "HF_HOME", "the default", ...
};
CacheDir hub_cache_dir(const EnvLookup& env = process_env());

// huggingface_hub's validate_repo_id: "NAME" or "ORG/NAME", each part 1-96 of [A-Za-z0-9_.-] that
// starts and ends with [A-Za-z0-9_], no "--" or "..", not ending in ".git".
bool is_repo_id(std::string_view name);

// "models--ORG--NAME" (huggingface_hub's repo_folder_name for a model repository).
std::string repo_folder_name(std::string_view repo_id);

// A model repository's snapshot in the cache at `revision` ("main", another ref, or a commit hash).
struct Snapshot {
    std::string repo_folder;            // <cache>/models--ORG--NAME
    std::string commit;                 // the hash refs/<revision> names (or the revision itself)
    std::string folder;                 // <repo_folder>/snapshots/<commit>; empty when not found
    std::string problem;                // when not found: what is missing, for a message
    std::vector<std::string> snapshots; // the snapshot folders present (when `folder` is empty)
};
Snapshot find_snapshot(const std::string& cache_dir, const std::string& repo_id, const std::string& revision = "main");

// True when huggingface_hub recorded that the repository has no `file` at `commit`.
bool known_missing(const Snapshot& snapshot, const std::string& file);

// What a --tokenizer-name-or-path style name refers to.
struct Resolved {
    enum class Kind { File, Folder, CacheSnapshot, NotFound } kind = Kind::NotFound;
    std::string path;      // File: the file; Folder / CacheSnapshot: the folder
    CacheDir cache;        // the cache searched (for a name that is not a local path)
    Snapshot snapshot;     // CacheSnapshot / NotFound: the lookup's details
    std::string searched;  // NotFound: every place looked at, for a message
};
// A local file, else a local folder, else (for a valid repository id) its snapshot at "main" in
// the hub cache. Never throws for a missing name: see kind / searched.
Resolved resolve_name(const std::string& name, const EnvLookup& env = process_env());

// The sentence telling a user how to put `name` into the cache (or next to the job) offline.
std::string how_to_get(const std::string& name);

}  // namespace mds::hf_cache
