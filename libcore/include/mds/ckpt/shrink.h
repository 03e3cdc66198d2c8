// mds-ckpt-shrink: weights-only copies of DeepSpeed pipeline checkpoints (specs/checkpoints.md §5.6),
// what BigScience made with `rsync --exclude "bf16*"` / `gsutil rsync -x`: keep every layer file
// (the only copy of the weights), every mp_rank file (iteration, args, LR schedule, RNG; DeepSpeed
// will not load without them) and `latest`; drop the optimizer shards (`*_optim_states.pt`) and
// zero_to_fp32.py. An mp_rank file that carries optimizer state itself (fp16/fp32 without ZeRO:
// key `optimizer`) is rewritten with `optimizer` = None. Every copied torch.save file is verified
// first (zip structure and every entry's CRC-32): a truncated or damaged file is an error, never a
// silently bad backup. Each tag is written to a temporary folder (mds::temp_path_for) and renamed
// into place when complete; `latest` moves last. Source and destination may not overlap, tags are
// plain names inside the source (ds_layout.h checked_tag_dir).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mds::ckpt {

struct ShrinkOptions {
    std::vector<std::string> tags;  // global_step folders to copy; empty: the one `latest` names
    bool all_tags = false;          // every global_step* folder of the source
    bool overwrite = false;         // replace tags that exist in the destination
    bool dry_run = false;           // report only
    bool verify = true;             // check every copied file's zip structure and CRC-32s (--no-verify: off)
    int workers = 0;                // files copied side by side; 0: the machine's cores (--workers)
    std::function<void(const std::string&)> log;   // one line per file (none when empty)
    std::function<void(const std::string&)> note;  // warnings and clean-ups the user should see
    // After each piece copied: (files done, bytes done, bytes in all), bytes of the kept files.
    std::function<void(std::uint64_t, std::uint64_t, std::uint64_t)> progress;
};

struct ShrinkFile {
    std::string name;
    std::uint64_t bytes = 0;
    enum class Action { Copied, Rewritten, Dropped } action = Action::Copied;
};

struct ShrinkTag {
    std::string tag;
    std::vector<ShrinkFile> files;
    std::uint64_t bytes_in = 0, bytes_out = 0;
};

struct ShrinkReport {
    std::vector<ShrinkTag> tags;
    bool latest_written = false;
};

const char* shrink_action_name(ShrinkFile::Action a);  // "copied", "rewritten", "dropped"

// Copies the weights of checkpoint root `src` into root `dst` (created; mds::prepare_output_dir).
// Throws mds::Error naming the file (mds::UsageError when `src` and `dst` overlap); a failure
// leaves no partial tag folder under its final name and `latest` untouched.
ShrinkReport shrink_checkpoint(const std::string& src, const std::string& dst, const ShrinkOptions& options);

}  // namespace mds::ckpt
