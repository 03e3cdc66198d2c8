// bench_train_step: the training step of mds-train (GptModel forward + backward through LibTorch
// autograd, then AdamOptimizer: fp32 masters, clipping, fused AdamW) on random tokens, timed.
//   bench_train_step --layers L --hidden H --heads N --seq S --batch B --vocab V --steps K --warmup W
// Prints one JSON line: {"impl": "mds", "ms_per_step": [...], ...}. bench/train-cpu/run.sh runs it
// beside the PyTorch reference (reference.py) with the same shapes and threads.
#include <CLI/CLI.hpp>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "mds/model/gpt_model.h"
#include "mds/optim/optimizer_config.h"
#include "mds/trainer/optimizer.h"

int main(int argc, char** argv) {
    CLI::App app{"bench_train_step"};
    mds::model::GptConfig cfg;
    std::int64_t batch = 8, steps = 10, warmup = 3, threads = 0, micro_batches = 1;
    bool recompute = false;
    app.add_option("--layers", cfg.num_layers)->required();
    app.add_option("--hidden", cfg.hidden_size)->required();
    app.add_option("--heads", cfg.num_attention_heads)->required();
    app.add_option("--seq", cfg.seq_length)->required();
    app.add_option("--vocab", cfg.padded_vocab_size)->required();
    app.add_option("--batch", batch);
    app.add_option("--micro-batches", micro_batches);
    app.add_option("--steps", steps);
    app.add_option("--warmup", warmup);
    app.add_option("--threads", threads);
    app.add_flag("--recompute", recompute);
    CLI11_PARSE(app, argc, argv);
    if (threads > 0) at::set_num_threads(static_cast<int>(threads));
    cfg.ffn_hidden_size = 4 * cfg.hidden_size;
    cfg.max_position_embeddings = cfg.seq_length;
    cfg.hidden_dropout = cfg.attention_dropout = 0.0;  // the reference runs without dropout too
    cfg.checkpoint_activations = recompute;
    mds::model::GptModel model(cfg, at::kCPU, 1234);
    mds::optim::OptimizerConfig oc;
    oc.lr = 1e-4;
    oc.weight_decay = 0.1;
    oc.clip_grad = 1.0;
    mds::trainer::AdamOptimizer opt(model.parameters(), oc);
    auto gen = at::detail::createCPUGenerator(7);
    auto tokens = at::randint(cfg.padded_vocab_size, {micro_batches, batch, cfg.seq_length + 1}, gen, at::TensorOptions().dtype(at::kLong));

    std::vector<double> ms;
    double last_loss = 0;
    for (std::int64_t i = 0; i < warmup + steps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        opt.zero_grad();
        double loss_sum = 0;
        for (std::int64_t j = 0; j < micro_batches; ++j) {
            auto mb = tokens[j];
            auto loss = model.loss(mb.narrow(1, 0, cfg.seq_length), mb.narrow(1, 1, cfg.seq_length));
            loss_sum += loss.item<double>();
            (loss / static_cast<double>(micro_batches)).backward();
        }
        opt.step(1e-4, 0.1, 1.0, false, false);
        last_loss = loss_sum / static_cast<double>(micro_batches);
        const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (i >= warmup) ms.push_back(dt);
    }
    std::string list;
    for (double v : ms) list += (list.empty() ? "" : ", ") + std::to_string(v);
    std::printf("{\"impl\": \"mds\", \"threads\": %d, \"params\": %lld, \"loss\": %.6f, \"ms_per_step\": [%s]}\n",
                at::get_num_threads(), static_cast<long long>(model.parameter_count()), last_loss, list.c_str());
    return 0;
}
