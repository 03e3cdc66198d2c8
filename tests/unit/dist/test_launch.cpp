// Launcher environments (mds/dist/launch.h): what torchrun, Open MPI's mpirun, MPICH/Intel MPI and
// srun export, as documented by each (torch.distributed.run, Open MPI's mpirun(1) "Environment
// variables", Hydra's PMI, sbatch(1)/srun(1) "OUTPUT ENVIRONMENT VARIABLES"), and SLURM's host list
// syntax. tests/crosscheck/test_dist_launch.py compares the host lists with scontrol and the
// torchrun environment with a real torchrun.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "mds/dist/launch.h"
#include "mds/util/error.h"

using namespace mds::dist;

namespace {

EnvReader env_of(const std::map<std::string, std::string>& vars) {
    return [vars](const char* name) -> const char* {
        const auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    };
}

}  // namespace

TEST_CASE("no launcher: one process") {
    const auto info = detect_launch(env_of({}));
    CHECK(info.launcher == "none");
    CHECK(info.rank == 0);
    CHECK(info.world_size == 1);
    CHECK(info.local_world_size == 1);
}

TEST_CASE("torchrun") {
    const auto info = detect_launch(env_of({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                                            {"MASTER_ADDR", "jz001"}, {"MASTER_PORT", "29500"}}));
    CHECK(info.launcher == "torchrun");
    CHECK(info.rank == 5);
    CHECK(info.world_size == 8);
    CHECK(info.local_rank == 1);
    CHECK(info.local_world_size == 4);
    CHECK(info.master_addr == "jz001");
    CHECK(info.master_port == 29500);
    CHECK(info.source.find("RANK=5") != std::string::npos);
}

TEST_CASE("torchrun wins over the srun that started it (BigScience: srun → torch.distributed.run per node)") {
    const auto info = detect_launch(env_of({{"RANK", "6"}, {"WORLD_SIZE", "16"}, {"MASTER_ADDR", "n1"}, {"SLURM_PROCID", "1"},
                                            {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_STEP_NODELIST", "n[1-2]"}}));
    CHECK(info.launcher == "torchrun");
    CHECK(info.rank == 6);
    CHECK(info.world_size == 16);
}

TEST_CASE("Open MPI and PMI") {
    auto info = detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}}));
    CHECK(info.launcher == "Open MPI");
    CHECK(info.rank == 3);
    CHECK(info.local_rank == 1);
    CHECK(info.local_world_size == 2);
    CHECK(info.master_port == 6000);
    info = detect_launch(env_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"MASTER_ADDR", "h"}}));
    CHECK(info.launcher == "PMI");
    CHECK(info.world_size == 2);
    // mpirun gives no master address.
    CHECK_THROWS_WITH_AS(detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}})),
                         doctest::Contains("MASTER_ADDR is not set"), mds::UsageError);
}

TEST_CASE("srun: the step's variables, master = first host") {
    const auto info = detect_launch(env_of({{"SLURM_PROCID", "5"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_LOCALID", "1"},
                                            {"SLURM_NODEID", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "4,2(x2)"},
                                            {"SLURM_STEP_NODELIST", "r7i4n[3,5-6]"}, {"SLURM_NTASKS", "8"}}));
    CHECK(info.launcher == "srun");
    CHECK(info.rank == 5);
    CHECK(info.world_size == 8);
    CHECK(info.local_rank == 1);
    CHECK(info.local_world_size == 2);
    CHECK(info.master_addr == "r7i4n3");
    CHECK(info.master_port == 6000);
}

TEST_CASE("the batch script itself (SLURM_PROCID without srun's step) is one process") {
    const auto info = detect_launch(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_JOB_NODELIST", "n[1-2]"}}));
    CHECK(info.launcher == "none");
    CHECK(info.world_size == 1);
}

TEST_CASE("malformed environments are errors naming the variable") {
    CHECK_THROWS_WITH_AS(detect_launch(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}})), doctest::Contains("RANK=x"), mds::UsageError);
    CHECK_THROWS_WITH_AS(detect_launch(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}})),
                         doctest::Contains("rank 2 is not below the world size 2"), mds::UsageError);
    CHECK_THROWS_WITH_AS(detect_launch(env_of({{"RANK", "0"}})), doctest::Contains("WORLD_SIZE is not set"), mds::UsageError);
    CHECK_THROWS_WITH_AS(detect_launch(env_of({{"WORLD_SIZE", "0"}, {"RANK", "0"}})), doctest::Contains("WORLD_SIZE=0"),
                         mds::UsageError);
    CHECK_THROWS_WITH_AS(detect_launch(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}})),
                         doctest::Contains("MASTER_PORT=70000"), mds::UsageError);
    CHECK_THROWS_WITH_AS(detect_launch(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "12ab"}})),
                         doctest::Contains("MASTER_PORT=12ab"), mds::UsageError);
    CHECK_THROWS_AS(detect_launch(env_of({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_NODEID", "3"},
                                          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}})),
                    mds::UsageError);
}

TEST_CASE("SLURM host lists") {
    using V = std::vector<std::string>;
    CHECK(expand_hostlist("jean-zay-iam01") == V{"jean-zay-iam01"});
    CHECK(expand_hostlist("jz[001-003,007],r2i1n[4-5]") == V{"jz001", "jz002", "jz003", "jz007", "r2i1n4", "r2i1n5"});
    CHECK(expand_hostlist("a[8-11]") == V{"a8", "a9", "a10", "a11"});
    CHECK(expand_hostlist("a[098-101]") == V{"a098", "a099", "a100", "a101"});
    CHECK(expand_hostlist("r[1-2]n[3-4]") == V{"r1n3", "r1n4", "r2n3", "r2n4"});
    CHECK(expand_hostlist("n[1-2]-ib") == V{"n1-ib", "n2-ib"});
    CHECK(expand_hostlist("") == V{});
    // A typo that would expand to 10^12 names is an error, not an exhausted memory.
    CHECK_THROWS_WITH_AS(expand_hostlist("n[0-999999][0-999999]"), doctest::Contains("expands to more than 100000 hosts"),
                         mds::Error);
    CHECK(expand_hostlist("n[1-100000]").size() == 100000);
    CHECK_THROWS_AS(expand_hostlist("n[1-100001]"), mds::Error);
    // Fewer names, but long ones: a 4 KB suffix on 5,000 names is 20 MB of host names.
    CHECK_THROWS_WITH_AS(expand_hostlist("n[1-5000]" + std::string(4000, 'x')), doctest::Contains("MiB of host names"), mds::Error);
    for (const char* bad : {"a[1-", "a]", "a[x]", "a[3-1]", "a[[1]]", "a[1-2-3]"}) {
        INFO(bad);
        CHECK_THROWS_AS(expand_hostlist(bad), mds::Error);
    }
}

TEST_CASE("SLURM tasks per node") {
    CHECK(expand_tasks_per_node("4") == std::vector<int>{4});
    CHECK(expand_tasks_per_node("4(x2),2") == std::vector<int>{4, 4, 2});
    CHECK(expand_tasks_per_node("1(x100000)").size() == 100000);
    CHECK_THROWS_AS(expand_tasks_per_node("1(x100000),1"), mds::Error);
    for (const char* bad : {"", "x", "4(x)", "4(x2", "4(xa)", "-1", "0", "0(x4)"}) {
        INFO(bad);
        CHECK_THROWS_AS(expand_tasks_per_node(bad), mds::Error);
    }
}
