// save_checkpoint (mds/trainer/checkpoint.h): which rank writes which file, and the commit that
// makes a tag visible only once complete. A save writes the tag into a temporary folder, syncs
// every file and the folder, renames it into place, syncs the root, and only then moves `latest`
// (DeepSpeed's engine.save_checkpoint writes in place and then `latest`; mds adds the temporary
// folder so that a process killed at any moment leaves `latest` on a complete tag). An asynchronous
// save (AsyncCheckpointSaver) is the same stages split in two: the folder and a host copy of the files
// in the foreground, the writing on a background thread, the commit when the ranks agree it is done.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>
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

// The ranks' agreement on one save: each rank runs its part of a stage, keeping the first failure;
// at the end of the stage every rank learns whether any rank failed. (Outside the anonymous namespace:
// AsyncCheckpointSaver::Impl holds one.)
class SaveBarrier {
public:
    SaveBarrier(const flags::TrainArgs& args, Communicator* comm, std::string directory)
        : args_(args), comm_(comm), directory_(std::move(directory)) {}

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
    std::string directory_;
    std::string error_;
};

namespace {

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
                      Communicator* comm, Snapshot* snapshot) {
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
            write_layer_files(tmp.string(), model, snapshot);
            write_mp_rank_file((tmp / ckpt::ds_mp_rank_file(mp_rank)).string(), args, original_vocab_size, model, progress, tied,
                               snapshot);
        });
    if (!args.checkpoint.no_save_optim)
        barrier.attempt([&] {
            const auto part = optimizer.state_partition(dp_rank, dp);
            const std::string file = (tmp / ckpt::ds_optim_file(args.optimizer.bf16, dp_rank, mp_rank)).string();
            if (!tied_part)
                write_optimizer_file(file, args, model.parameters(), optimizer, part, progress, snapshot);
            else
                write_optimizer_file(file, args, tied.params, optimizer, *tied_part, progress, snapshot);
        });
}

// The temporary folder of a save: the leader removes killed saves' leftovers and creates it, every rank
// learns its name (the leader's pid). Throws on the leader's failure, on every rank.
fs::path prepare_folder(SaveBarrier& barrier, const fs::path& root, const std::string& tag, bool leader) {
    double tmp_id = 0;
    if (leader)
        barrier.attempt([&] {
            fs::create_directories(root);
            remove_stale_folders(root);
            tmp_id = static_cast<double>(::getpid());
            fs::create_directories(root / ("." + tag + ".tmp-" + std::to_string(::getpid())));
        });
    tmp_id = barrier.agree({tmp_id}, "preparing the folder")[0];
    return root / ("." + tag + ".tmp-" + std::to_string(static_cast<long long>(tmp_id)));
}

// The end of a stage: on any rank's failure the leader removes the temporary folder.
void settle(SaveBarrier& barrier, bool leader, const fs::path& tmp, const char* stage) {
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
}

// Once every rank's files are written: the leader renames the folder into place and moves `latest`.
void commit_folder(SaveBarrier& barrier, bool leader, const fs::path& root, const fs::path& tmp, CheckpointSaveInfo& info) {
    settle(barrier, leader, tmp, "writing its files");
    if (leader) barrier.attempt([&] { publish_folder(root, tmp, info); });
    settle(barrier, leader, tmp, "publishing the folder");
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
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
    const fs::path tmp = prepare_folder(barrier, root, info.tag, leader);
    write_rank_files(barrier, tmp, args, original_vocab_size, model, optimizer, progress, comm, nullptr);
    commit_folder(barrier, leader, root, tmp, info);
    info.seconds = seconds_since(start);
    info.blocked_seconds = info.seconds;
    return info;
}

// ---- asynchronous saves ------------------------------------------------------------------------------------

struct AsyncCheckpointSaver::Impl {
    Impl(const flags::TrainArgs& a, std::int64_t vocab, Communicator* c)
        : args(a), original_vocab_size(vocab), comm(c), leader(!c || c->rank() == 0) {}

    const flags::TrainArgs& args;
    std::int64_t original_vocab_size;
    Communicator* comm;
    bool leader;
    std::optional<Snapshot> snapshot;  // made at the first save, on the model's device; its buffers are reused

    // The save in flight.
    bool pending = false;
    std::int64_t iteration = 0;
    std::optional<SaveBarrier> barrier;
    CheckpointSaveInfo info;
    fs::path tmp;
    std::chrono::steady_clock::time_point start;
    std::thread writer;
    std::atomic<bool> written{false};
    std::exception_ptr write_error;  // set by the writer before `written`

    void join() {
        if (writer.joinable()) writer.join();
    }
};

AsyncCheckpointSaver::AsyncCheckpointSaver(const flags::TrainArgs& args, std::int64_t original_vocab_size, Communicator* comm)
    : impl_(std::make_unique<Impl>(args, original_vocab_size, comm)) {}

AsyncCheckpointSaver::~AsyncCheckpointSaver() { abandon(); }

bool AsyncCheckpointSaver::pending() const { return impl_->pending; }
std::int64_t AsyncCheckpointSaver::pending_iteration() const { return impl_->iteration; }

void AsyncCheckpointSaver::start(const model::GptModel& model, const AdamOptimizer& optimizer, const TrainingProgress& progress) {
    auto& s = *impl_;
    if (s.pending) throw Error("internal: a checkpoint save started while the previous one is pending");
    s.start = std::chrono::steady_clock::now();
    c10::NoGradGuard no_grad;
    const fs::path root = s.args.checkpoint.save;
    s.info = CheckpointSaveInfo{};
    s.info.tag = ckpt::ds_tag(progress.iteration);
    s.info.directory = (root / s.info.tag).string();
    s.barrier.emplace(s.args, s.comm, s.info.directory);
    s.tmp = prepare_folder(*s.barrier, root, s.info.tag, s.leader);  // throws: nothing pending
    s.pending = true;
    s.iteration = progress.iteration;
    s.written = false;
    s.write_error = nullptr;
    if (!s.snapshot) s.snapshot.emplace(model.parameters().front().tensor.device());
    s.snapshot->begin();
    // The foreground part: the save's collectives and a copy of everything the files hold. A failure
    // is kept by the barrier (the writer then has nothing to write) and reported by finish(), where
    // the ranks agree on it, as a synchronous save does.
    write_rank_files(*s.barrier, s.tmp, s.args, s.original_vocab_size, model, optimizer, progress, s.comm, &*s.snapshot);
    s.barrier->attempt([&] { s.snapshot->wait_copies(); });
    s.info.blocked_seconds = seconds_since(s.start);
    s.writer = std::thread([&s] {
        try {
            s.snapshot->write_files();
        } catch (...) {
            s.write_error = std::current_exception();
        }
        s.written.store(true, std::memory_order_release);
    });
}

bool AsyncCheckpointSaver::all_written() {
    auto& s = *impl_;
    if (!s.pending) return true;
    std::vector<double> busy{s.written.load(std::memory_order_acquire) ? 0.0 : 1.0};
    if (s.comm) busy = s.comm->max(std::move(busy), Group::World);
    return busy[0] == 0;
}

CheckpointSaveInfo AsyncCheckpointSaver::finish() {
    auto& s = *impl_;
    if (!s.pending) throw Error("internal: no checkpoint save to finish");
    s.join();
    s.pending = false;
    auto& barrier = *s.barrier;
    barrier.attempt([&] {
        if (s.write_error) std::rethrow_exception(s.write_error);
    });
    commit_folder(barrier, s.leader, s.args.checkpoint.save, s.tmp, s.info);
    s.info.seconds = seconds_since(s.start);
    return s.info;
}

void AsyncCheckpointSaver::abandon() noexcept {
    impl_->join();
    impl_->pending = false;
}

}  // namespace mds::trainer
