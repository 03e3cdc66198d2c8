// mds-train's start-up check of the folders it will write (--save, --tensorboard-dir,
// --codecarbon-dir): a file in their place, a folder the process may not write into, or a parent
// that is a file fails the run before the rendezvous and before any training, with the flag named,
// instead of at the first save hours later.
#pragma once

#include <string>
#include <vector>

#include "mds/flags/train_args.h"

namespace mds::flags {

struct OutputFolder {
    std::string flag;  // "--save"
    std::string path;
};

// The folders that the process of `rank` among `world_size` (local rank `local_rank` on its node)
// writes: --save on every rank (each writes its model-parallel shard or optimizer partition),
// --tensorboard-dir on the last rank (Megatron's is_last_rank writes the events), --codecarbon-dir
// on local rank 0 of each node (one carbon tracker per node).
std::vector<OutputFolder> output_folders(const TrainArgs& args, int rank, int world_size, int local_rank);

// mds::check_output_dir for each of output_folders(): nothing is created. Throws mds::Error
// "the --save folder '...' exists and is not a folder", "cannot write into the --save folder: ...:
// Permission denied", ...
void check_output_folders(const TrainArgs& args, int rank, int world_size, int local_rank);

}  // namespace mds::flags
