// save_checkpoint (mds/trainer/checkpoint.h): which rank writes which file, and the commit that
// makes a tag visible only once complete. A save writes the tag into a temporary folder, syncs
// every file and the folder, renames it into place, syncs the root, and only then moves `latest`
// (DeepSpeed's engine.save_checkpoint writes in place and then `latest`; mds adds the temporary
// folder so that a process killed at any moment leaves `latest` on a complete tag).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <unistd.h>

#include "checkpoint_files.h"
#include "mds/ckpt/ds_layout.h"
#include "mds/trainer/comm.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "mds/util/safe_paths.h"  // filesystem_error_message

namespace mds::trainer {
namespace fs = std::filesystem;
using namespace checkpoint_detail;

namespace {

// The ranks' agreement on one save: each rank runs its part of a stage, keeping the first failure;
// at the end of the stage every rank learns whether any rank failed.
class SaveBarrier {
public:
    SaveBarrier(const flags::TrainArgs& args, Communicator* comm, const std::string& directory)
        : args_(args), comm_(comm), directory_(directory) {}

    // Runs `work` unless this rank already failed; a failure is kept for the next agree().
    void attempt(const std::function<void()>& work) {
        if (!error_.empty()) return;
        try {
            work();
        } catch (const fs::filesystem_error& e) {
            error_ = "saving the checkpoint to --save " + args_.checkpoint.save + ": " + filesystem_error_message(e);
        } catch (const std::exception& e) {
            error_ = e.what();
        }
    }

    // Returns the maxima of `values` over the ranks after checking that no rank failed so far.
    std::vector<double> agree(std::vector<double> values, const char* stage) {
        values.push_back(error_.empty() ? 0.0 : 1.0);
        if (comm_) values = comm_->max(std::move(values), Group::World);
        if (values.back() > 0)
            throw Error(!error_.empty() ? error_ : "saving " + directory_ + " failed on another rank while " + stage +
                                                       " (its error says why)");
        values.pop_back();
        return values;
    }

private:
    const flags::TrainArgs& args_;
    Communicator* comm_;
    const std::string& directory_;
    std::string error_;
};

// Leftovers of saves that were killed: only one process prepares a checkpoint folder.
void remove_stale_folders(const fs::path& root) {
    std::vector<fs::path> stale;
    for (const auto& e : fs::directory_iterator(root)) {
        const auto name = e.path().filename().string();
        if (name.rfind(".global_step", 0) == 0 &&
            (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos))
            stale.push_back(e.path());
    }
    for (const auto& p : stale) remove_tree(p.string());
}

std::uint64_t folder_bytes(const fs::path& dir) {
    std::uint64_t n = 0;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file()) n += e.file_size();
    return n;
}

// Renames the complete temporary folder to <root>/<tag>, then moves `latest` to it.
void publish_folder(const fs::path& root, const fs::path& tmp, CheckpointSaveInfo& info) {
    sync_directory(tmp.string());
    info.bytes = folder_bytes(tmp);
    const fs::path final_dir = root / info.tag;
    if (fs::exists(final_dir)) {
        // Saving the same step again (e.g. a rerun): the old copy goes aside until the new one is in place.
        const fs::path old = root / ("." + info.tag + ".old-" + std::to_string(::getpid()));
        remove_tree(old.string());
        fs::rename(final_dir, old);
        fs::rename(tmp, final_dir);
        remove_tree(old.string());
    } else {
        fs::rename(tmp, final_dir);
    }
    sync_directory(root.string());
    ckpt::write_latest_tag(root.string(), info.tag);
}

// This rank's files: data-parallel rank 0 of each model-parallel (TP x PP) shard writes its layers
// and mp_rank file, every rank its optimizer partition. The tied module and its partition are
// collectives: every rank takes part, before any file is written.
void write_rank_files(SaveBarrier& barrier, const fs::path& tmp, const flags::TrainArgs& args, std::int64_t original_vocab_size,
                      const model::GptModel& model, const AdamOptimizer& optimizer, const TrainingProgress& progress,
                      Communicator* comm) {
    const int dp = comm ? static_cast<int>(comm->members(Group::Data).size()) : 1;
    const int dp_rank = comm ? comm->coordinates().dp : 0;
    const int mp_rank = model_parallel_rank(model);
    // The last stage's tied module as DeepSpeed saves it, and this rank's optimizer partition in
    // DeepSpeed's groups.
    const TiedModule tied = tied_module(model, comm);
    std::optional<StatePartition> tied_part;
    if (!tied.params.empty() && !args.checkpoint.no_save_optim)
        tied_part = with_tied_module(optimizer, model.parameters(), tied, dp_rank, dp, comm);
    if (dp_rank == 0)  // one copy of each model-parallel (TP x PP) shard
        barrier.attempt([&] {
            write_layer_files(tmp.string(), model);
            write_mp_rank_file((tmp / ckpt::ds_mp_rank_file(mp_rank)).string(), args, original_vocab_size, model, progress, tied);
        });
    if (!args.checkpoint.no_save_optim)
        barrier.attempt([&] {
            const auto part = optimizer.state_partition(dp_rank, dp);
            const std::string file = (tmp / ckpt::ds_optim_file(args.optimizer.bf16, dp_rank, mp_rank)).string();
            if (!tied_part)
                write_optimizer_file(file, args, model.parameters(), optimizer, part, progress);
            else
                write_optimizer_file(file, args, tied.params, optimizer, *tied_part, progress);
        });
}

}  // namespace

CheckpointSaveInfo save_checkpoint(const flags::TrainArgs& args, std::int64_t original_vocab_size,
                                   const model::GptModel& model, const AdamOptimizer& optimizer,
                                   const TrainingProgress& progress, Communicator* comm) {
    const auto start = std::chrono::steady_clock::now();
    c10::NoGradGuard no_grad;
    const fs::path root = args.checkpoint.save;
    CheckpointSaveInfo info;
    info.tag = ckpt::ds_tag(progress.iteration);
    info.directory = (root / info.tag).string();
    // Several processes: rank 0 prepares and publishes the folder, every data-parallel rank writes its
    // optimizer partition into it. A failure anywhere fails the save everywhere, once every rank is
    // done with its part, and leaves the previous checkpoint and `latest` untouched.
    const bool leader = !comm || comm->rank() == 0;
    SaveBarrier barrier(args, comm, info.directory);

    double tmp_id = 0;
    if (leader)
        barrier.attempt([&] {
            fs::create_directories(root);
            remove_stale_folders(root);
            tmp_id = static_cast<double>(::getpid());
            fs::create_directories(root / ("." + info.tag + ".tmp-" + std::to_string(::getpid())));
        });
    tmp_id = barrier.agree({tmp_id}, "preparing the folder")[0];
    const fs::path tmp = root / ("." + info.tag + ".tmp-" + std::to_string(static_cast<long long>(tmp_id)));
    // The end of a stage: on any rank's failure the leader removes the temporary folder.
    auto settle = [&](const char* stage) {
        try {
            barrier.agree({}, stage);
        } catch (...) {
            if (leader) {
                try {
                    remove_tree(tmp.string());
                } catch (const Error&) {
                    // The save's own error is the one to report.
                }
            }
            throw;
        }
    };

    write_rank_files(barrier, tmp, args, original_vocab_size, model, optimizer, progress, comm);
    settle("writing its files");
    if (leader) barrier.attempt([&] { publish_folder(root, tmp, info); });
    settle("publishing the folder");
    info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return info;
}

}  // namespace mds::trainer
