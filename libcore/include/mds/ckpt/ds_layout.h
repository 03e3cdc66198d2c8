// File names of a DeepSpeed pipeline checkpoint (specs/checkpoints.md §1): the tag folders, the
// layer files, the per-rank engine files, the optimizer shards and the `latest` tag file, both
// ways (name from numbers, numbers from a name). Shared by mds-train and the mds-ckpt-* tools.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace mds::ckpt {

// "global_step<N>": DeepSpeed's tag for a save at global step N.
std::string ds_tag(long long global_steps);
// "layer_{layer:02d}-model_{tp:02d}-model_states.pt" (layer = global pipeline spec index).
std::string ds_layer_file(int layer, int tp_rank);
// "mp_rank_{mp:02d}_model_states.pt", mp = pp_stage * tp_size + tp_rank.
std::string ds_mp_rank_file(int mp_rank);
// "[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt" ("pp" is DeepSpeed's name for the
// data-parallel rank); bf16 runs add the prefix whatever the ZeRO stage.
std::string ds_optim_file(bool bf16, int dp_rank, int mp_rank);

// The inverse parsers: nullopt when `name` is not such a file.
struct DsLayerFileName { int layer = 0, tp_rank = 0; };
std::optional<DsLayerFileName> parse_ds_layer_file(std::string_view name);
std::optional<int> parse_ds_mp_rank_file(std::string_view name);
struct DsOptimFileName { bool bf16 = false; int dp_rank = 0, mp_rank = 0; };
// Also accepts the old "...mp_rank_XXoptim_states.pt" spelling DeepSpeed still loads.
std::optional<DsOptimFileName> parse_ds_optim_file(std::string_view name);
// N of "global_step<N>", nullopt for other names.
std::optional<long long> parse_ds_tag(std::string_view name);

// `<root>/latest`: the tag, whitespace stripped as DeepSpeed's reader does; nullopt when absent.
// The tag must be a plain folder name (mds::checked_entry_name: not empty, no '/', no "..", no
// control bytes, at most 255 bytes) and the file at most 4 KiB: a damaged or hostile `latest`
// ("../../x", binary) is an mds::Error naming the file and showing the text escaped, never a path
// outside `root`.
std::optional<std::string> read_latest_tag(const std::string& root);
// The folder `<root>/<tag>` of a tag named by `source` ("--tag", "ckpt/latest"): the tag checked
// as read_latest_tag checks it, and the folder must exist (a symbolic link to a folder counts).
// Every tool resolves tags through here, so none can name a path outside its root.
std::string checked_tag_dir(const std::string& root, const std::string& tag, const std::string& source);

// A folder path given by the user with "." and ".." folded and no trailing separator, so that its
// last part is the folder's own name ("ckpt/global_step5/" -> "ckpt/global_step5"); made absolute
// when that part would otherwise be "", "." or ".." ("." -> "/home/me/run"). The tools derive tag
// names and temporary names from it: "out/" or "." must never make them operate on a parent.
std::filesystem::path plain_folder_path(const std::string& path);
// Writes `<root>/latest` (the tag, no newline) atomically and durably: temporary file, fsync,
// rename, fsync of `root`. Call it after every file of the tag is durable.
void write_latest_tag(const std::string& root, const std::string& tag);

}  // namespace mds::ckpt
