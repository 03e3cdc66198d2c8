// bench_allreduce: the data-parallel gradient all-reduce of mds-train (trainer::Communicator,
// 25 MiB buckets over Gloo) on the gradient tensors of a GPT of the given shape, timed.
//   RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p bench_allreduce --layers L --hidden H --vocab V --iters K
//   bench_allreduce ... --print-shapes     the gradient shapes as JSON (for reference.py), no communication
// Rank 0 prints one JSON line: {"impl": "mds", "ms": [...], "bytes": N}. bench/dist/run.sh runs it
// beside torch.distributed (reference.py) on the same shapes.
#include <CLI/CLI.hpp>
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "mds/dist/launch.h"
#include "mds/dist/layout.h"
#include "mds/model/gpt_model.h"
#include "mds/trainer/comm.h"

int main(int argc, char** argv) {
    CLI::App app{"bench_allreduce"};
    mds::model::GptConfig cfg;
    cfg.num_attention_heads = 8;
    cfg.seq_length = 1024;
    int iters = 10, warmup = 2;
    bool print_shapes = false;
    app.add_option("--layers", cfg.num_layers)->required();
    app.add_option("--hidden", cfg.hidden_size)->required();
    app.add_option("--vocab", cfg.padded_vocab_size)->required();
    app.add_option("--iters", iters);
    app.add_option("--warmup", warmup);
    app.add_flag("--print-shapes", print_shapes);
    CLI11_PARSE(app, argc, argv);
    cfg.ffn_hidden_size = 4 * cfg.hidden_size;
    cfg.max_position_embeddings = cfg.seq_length;

    mds::model::GptModel model(cfg, at::kCPU, 1234);
    std::vector<at::Tensor> grads;
    std::int64_t bytes = 0;
    for (const auto& p : model.parameters()) {
        grads.push_back(at::randn(p.tensor.sizes(), at::TensorOptions().dtype(at::kFloat)));
        bytes += grads.back().numel() * 4;
    }
    if (print_shapes) {
        std::string out = "[";
        for (std::size_t i = 0; i < grads.size(); ++i) {
            out += i ? ", [" : "[";
            for (std::int64_t d = 0; d < grads[i].dim(); ++d) out += (d ? ", " : "") + std::to_string(grads[i].size(d));
            out += "]";
        }
        std::printf("%s]\n", out.c_str());
        return 0;
    }
    const auto launch = mds::dist::detect_launch();
    mds::trainer::Communicator comm(launch, mds::dist::ParallelLayout(launch.world_size, 1, 1), {});
    std::vector<double> ms;
    for (int i = 0; i < warmup + iters; ++i) {
        comm.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        comm.all_reduce_sum(grads, mds::trainer::Group::Data, 1.0 / launch.world_size);
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (i >= warmup) ms.push_back(t);
    }
    comm.finish();
    if (launch.rank == 0) {
        std::string list;
        for (double t : ms) list += (list.empty() ? "" : ", ") + std::to_string(t);
        std::printf("{\"impl\": \"mds\", \"world\": %d, \"bytes\": %lld, \"tensors\": %zu, \"ms\": [%s]}\n", launch.world_size,
                    static_cast<long long>(bytes), grads.size(), list.c_str());
    }
    return 0;
}
