#include "mds/flags/output_checks.h"

#include "mds/util/safe_paths.h"  // check_output_dir

namespace mds::flags {

std::vector<OutputFolder> output_folders(const TrainArgs& args, int rank, int world_size, int local_rank) {
    std::vector<OutputFolder> out;
    if (!args.checkpoint.save.empty()) out.push_back({"--save", args.checkpoint.save});
    if (!args.logging.tensorboard_dir.empty() && rank == world_size - 1)
        out.push_back({"--tensorboard-dir", args.logging.tensorboard_dir});
    if (!args.logging.codecarbon_dir.empty() && local_rank == 0)
        out.push_back({"--codecarbon-dir", args.logging.codecarbon_dir});
    return out;
}

void check_output_folders(const TrainArgs& args, int rank, int world_size, int local_rank) {
    for (const auto& f : output_folders(args, rank, world_size, local_rank)) check_output_dir(f.path, f.flag + " folder");
}

}  // namespace mds::flags
