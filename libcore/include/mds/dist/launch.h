// Where this process sits in a distributed launch, read from the launcher's environment the way
// torch.distributed's env:// rendezvous and the SLURM / MPI wrappers of Megatron-DeepSpeed
// scripts do. Recognised, in this order:
//   torchrun (and anything that sets RANK + WORLD_SIZE): RANK, WORLD_SIZE, LOCAL_RANK,
//            LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Open MPI's mpirun:  OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE
//   MPICH / Intel MPI (PMI): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   srun:     SLURM_PROCID, SLURM_STEP_NUM_TASKS (set by srun only, not in the batch script),
//             SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST
// MASTER_ADDR / MASTER_PORT, when set, win over anything derived (srun: the first host of the
// step's node list; port 6000, what BigScience's SLURM scripts exported). Nothing recognised:
// one process, rank 0 of 1.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mds::dist {

struct LaunchInfo {
    std::string launcher = "none";  // "torchrun", "Open MPI", "PMI", "srun", "none"
    int rank = 0;
    int world_size = 1;
    int local_rank = 0;
    int local_world_size = 1;
    std::string master_addr = "127.0.0.1";
    int master_port = 6000;
    // The variables the values came from, for messages ("RANK=3 WORLD_SIZE=8 ...").
    std::string source;
};

// Reads a variable; nullptr when unset. The default reads the process environment.
using EnvReader = std::function<const char*(const char*)>;
EnvReader process_env();

// Throws mds::UsageError naming the variable and its value when one is malformed or the values
// contradict each other (rank beyond the world size, a size of 0, one of a pair missing).
LaunchInfo detect_launch(const EnvReader& env = process_env());

// SLURM's host list syntax, as `scontrol show hostnames` expands it: "jz[001-003,007],r2i1n[4-5]"
// → jz001 jz002 jz003 jz007 r2i1n4 r2i1n5 (zero padding kept; several bracket groups in one name
// expand left to right). Throws mds::Error on an unbalanced bracket or a bad range, and beyond
// 100,000 names or 16 MiB of them.
std::vector<std::string> expand_hostlist(std::string_view list);

// SLURM's tasks-per-node syntax: "4(x2),2" → 4 4 2. Throws mds::Error when malformed or beyond
// 100,000 nodes.
std::vector<int> expand_tasks_per_node(std::string_view spec);

}  // namespace mds::dist
