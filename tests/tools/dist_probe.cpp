// dist_probe: mds::dist for tests/crosscheck/test_dist_layout.py and tests/integration/test_train_srun.py.
//   dist_probe layout <world> <tp> <pp>   ->  JSON: every group of each kind in creation order, and the
//                                             coordinates [tp, dp, pp] of each rank
//   dist_probe hostlist <list>            ->  the expanded host names, one per line
//   dist_probe tasks <spec>               ->  the expanded tasks per node, space separated
//   dist_probe launch                     ->  JSON: what detect_launch reads from this process's environment
// A rejected input prints "error: <message>" on stderr and exits 1.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "mds/dist/launch.h"
#include "mds/dist/layout.h"
#include "mds/util/error.h"

int main(int argc, char** argv) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    try {
        if (cmd == "layout" && argc == 5) {
            const mds::dist::ParallelLayout l(std::stoi(argv[2]), std::stoi(argv[3]), std::stoi(argv[4]));
            nlohmann::json j;
            j["tensor"] = l.all_tensor_groups();
            j["data"] = l.all_data_groups();
            j["pipeline"] = l.all_pipeline_groups();
            j["embedding"] = l.all_embedding_groups();
            for (int r = 0; r < l.world_size(); ++r) {
                const auto c = l.coordinates(r);
                j["coordinates"].push_back({c.tp, c.dp, c.pp});
                j["model"].push_back(l.model_group(r));
            }
            std::cout << j.dump() << "\n";
        } else if (cmd == "hostlist" && argc == 3) {
            for (const auto& h : mds::dist::expand_hostlist(argv[2])) std::cout << h << "\n";
        } else if (cmd == "tasks" && argc == 3) {
            const auto v = mds::dist::expand_tasks_per_node(argv[2]);
            for (std::size_t i = 0; i < v.size(); ++i) std::cout << (i ? " " : "") << v[i];
            std::cout << "\n";
        } else if (cmd == "launch" && argc == 2) {
            const auto l = mds::dist::detect_launch();
            std::cout << nlohmann::json{{"launcher", l.launcher}, {"rank", l.rank}, {"world_size", l.world_size},
                                        {"local_rank", l.local_rank}, {"local_world_size", l.local_world_size},
                                        {"master_addr", l.master_addr}, {"master_port", l.master_port}}
                             .dump()
                      << "\n";
        } else {
            std::fputs("usage: dist_probe layout WORLD TP PP | hostlist LIST | tasks SPEC | launch\n", stderr);
            return 2;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
