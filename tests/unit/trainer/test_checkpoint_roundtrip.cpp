#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <ATen/ATen.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "mds/model/gpt_model.h"
#include "tiny_gpt.h"
#include "mds/flags/train_args.h"
#include "mds/trainer/checkpoint.h"
#include "mds/trainer/optimizer.h"
#include "mds/util/files.h"  // remove_tree: std::filesystem::remove_all resolves into libtorch's copy and crashes

using namespace mds::trainer;
namespace fs = std::filesystem;

namespace {

mds::flags::TrainArgs tiny_args(const fs::path& root) {
    mds::flags::TrainArgs a;
    a.model.num_layers = 2;
    a.model.hidden_size = 64;
    a.model.num_attention_heads = 4;
    a.optimizer.lr = 1e-3;
    a.checkpoint.save = root.string();
    a.checkpoint.load = root.string();
    return a;
}

bool same(const at::Tensor& a, const at::Tensor& b) { return a.sizes() == b.sizes() && at::equal(a.to(at::kFloat), b.to(at::kFloat)); }

}  // namespace

TEST_CASE("python_random_seed_state / numpy_random_seed_state: the MT19937 words of random.seed and np.random.seed") {
    // Python: random.seed(1234); random.getstate()[1]  (position 624, word 0 always 0x80000000).
    const auto py = python_random_seed_state(1234);
    DOCTEST_CHECK(py[0] == 2147483648u);
    DOCTEST_CHECK(py[1] == 681931688u);
    DOCTEST_CHECK(py[2] == 3687344416u);
    DOCTEST_CHECK(py[623] == 343805460u);
    // A seed wider than 32 bits feeds init_by_array two words.
    DOCTEST_CHECK(python_random_seed_state((std::uint64_t{1} << 40) + 5)[1] == 550267540u);
    // numpy: np.random.seed(1234); np.random.get_state()[1]  (init_genrand: word 0 is the seed).
    const auto np = numpy_random_seed_state(1234);
    DOCTEST_CHECK(np[0] == 1234u);
    DOCTEST_CHECK(np[1] == 3159640283u);
    DOCTEST_CHECK(np[2] == 4062961311u);
    DOCTEST_CHECK(np[623] == 3064478787u);
}

TEST_CASE("save_checkpoint then CheckpointLoader: weights, Adam state, progress and RNG come back") {
    const fs::path tmp = fs::temp_directory_path() / ("mds-test-roundtrip-" + std::to_string(::getpid()));
    mds::remove_tree(tmp.string());
    const fs::path root = tmp / "checkpoints";
    auto args = tiny_args(root);

    mds::model::GptModel model(tiny_gpt(), c10::Device(at::kCPU), 42);
    AdamOptimizer optimizer(model.parameters(), args.optimizer);
    for (auto& p : model.parameters()) p.tensor.mutable_grad() = at::full_like(p.tensor, 0.01);
    optimizer.step(1e-3, 0.1, 1.0, false, false);

    TrainingProgress progress;
    progress.iteration = 7;
    progress.consumed_train_samples = 28;
    progress.consumed_train_tokens = 28 * 64;
    progress.lr.params.max_lr = 1e-3;
    progress.lr.params.min_lr = 1e-4;
    progress.lr.params.lr_decay_steps = 20;
    progress.lr.num_steps = 28;
    progress.current_lr = 9e-4;

    // What a killed save leaves behind goes; the new tag is published with `latest`.
    fs::create_directories(root / ".global_step5.tmp-99999");
    const auto info = save_checkpoint(args, 500, model, optimizer, progress);
    DOCTEST_CHECK(info.tag == "global_step7");
    DOCTEST_CHECK(info.bytes > 0);
    DOCTEST_CHECK(!fs::exists(root / ".global_step5.tmp-99999"));
    const fs::path dir = root / "global_step7";
    DOCTEST_CHECK(fs::exists(dir / "mp_rank_00_model_states.pt"));
    DOCTEST_CHECK(fs::exists(dir / "layer_01-model_00-model_states.pt"));
    DOCTEST_CHECK(fs::exists(dir / "zero_pp_rank_0_mp_rank_00_optim_states.pt"));
    int temporaries = 0;
    for (const auto& e : fs::directory_iterator(root)) temporaries += e.path().filename().string().rfind(".global_step", 0) == 0;
    DOCTEST_CHECK(temporaries == 0);

    const auto loader = CheckpointLoader::open(args);
    DOCTEST_REQUIRE(loader != nullptr);
    DOCTEST_CHECK(loader->directory() == dir.string());
    DOCTEST_CHECK(loader->iteration() == 7);
    const TrainingProgress back = loader->progress();
    DOCTEST_CHECK(back.consumed_train_samples == 28);
    DOCTEST_CHECK(back.consumed_train_tokens == 28 * 64);
    DOCTEST_CHECK(back.lr.num_steps == 28);
    DOCTEST_CHECK(back.lr.params.lr_decay_steps == 20);
    DOCTEST_CHECK(back.lr.params.min_lr == doctest::Approx(1e-4));

    mds::model::GptModel fresh(tiny_gpt(), c10::Device(at::kCPU), 7);
    loader->load_weights(fresh);
    for (std::size_t i = 0; i < model.parameters().size(); ++i)
        DOCTEST_CHECK(same(fresh.parameters()[i].tensor, model.parameters()[i].tensor));
    AdamOptimizer restored(fresh.parameters(), args.optimizer);
    TrainingProgress resumed = back;
    loader->load_optimizer(restored, fresh, resumed);
    DOCTEST_CHECK(restored.steps_taken() == 1);
    for (std::size_t i = 0; i < model.parameters().size(); ++i) {
        DOCTEST_CHECK(same(restored.exp_avg()[i], optimizer.exp_avg()[i]));
        DOCTEST_CHECK(same(restored.exp_avg_sq()[i], optimizer.exp_avg_sq()[i]));
    }
    DOCTEST_CHECK(loader->load_rng(fresh).empty());

    // A weights-only copy: the error says how to resume anyway.
    DOCTEST_REQUIRE(std::remove((dir / "zero_pp_rank_0_mp_rank_00_optim_states.pt").string().c_str()) == 0);
    try {
        loader->load_optimizer(restored, fresh, resumed);
        DOCTEST_FAIL("load_optimizer accepted a checkpoint without optimizer states");
    } catch (const std::exception& e) {
        DOCTEST_CHECK(std::string(e.what()).find("resume with --no-load-optim") != std::string::npos);
    }
    mds::remove_tree(tmp.string());
}
