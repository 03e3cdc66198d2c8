// mds-ckpt-shrink: weights-only copies of DeepSpeed pipeline checkpoints (specs/checkpoints.md §5.6),
// what BigScience made with `rsync --exclude "bf16*"` / `gsutil rsync -x`: keep every layer file
// (the only copy of the weights), every mp_rank file (iteration, args, LR schedule, RNG; DeepSpeed
// will not load without them) and `latest`; drop the optimizer shards (`*_optim_states.pt`) and
// zero_to_fp32.py. An mp_rank file that carries optimizer state itself (fp16/fp32 without ZeRO:
// key `optimizer`) is rewritten with `optimizer` = None. Each tag is written to a temporary folder
// and renamed into place when complete; `latest` moves last.
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
    std::function<void(const std::string&)> log;  // one line per file (none when empty)
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

// Copies the weights of checkpoint root `src` into root `dst` (created). Throws mds::Error naming
// the file; a failure leaves no partial tag folder under its final name and `latest` untouched.
ShrinkReport shrink_checkpoint(const std::string& src, const std::string& dst, const ShrinkOptions& options);

}  // namespace mds::ckpt
