#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <unistd.h>

#include <filesystem>

#include "mds/model/gpt_model.h"
#include "tiny_gpt.h"
#include "mds/flags/train_args.h"
#include "mds/trainer/checkpoint.h"
#include "mds/util/files.h"  // remove_tree: std::filesystem::remove_all resolves into libtorch's copy and crashes

using namespace mds::trainer;
namespace fs = std::filesystem;

TEST_CASE("--load of a missing folder or one without `latest` starts from scratch, as Megatron-DeepSpeed") {
    const fs::path tmp = fs::temp_directory_path() / ("mds-test-load-" + std::to_string(::getpid()));
    mds::remove_tree(tmp.string());
    mds::flags::TrainArgs args;
    args.checkpoint.load = (tmp / "checkpoints").string();  // the first job of a chain: not created yet
    DOCTEST_CHECK(CheckpointLoader::open(args, 0, 0) == nullptr);
    fs::create_directories(tmp / "checkpoints");
    DOCTEST_CHECK(CheckpointLoader::open(args, 0, 0) == nullptr);
    mds::remove_tree(tmp.string());
}

TEST_CASE("parameters_in_billions_no_embedding: BMD's per-rank count times the model-parallel size") {
    // One block: 12 h^2 + 13 h = 49984 parameters at h = 64; the final LayerNorm 2 h.
    const mds::model::GptModel whole(tiny_gpt(), c10::Device(at::kCPU), 42);
    DOCTEST_CHECK(megatron_parameters_in_billions_no_embedding(whole, 1) == doctest::Approx(100096e-9).epsilon(1e-12));
    // PP = 2: stage 0 holds the embeddings and block 0, stage 1 block 1, the final norm and the tied
    // embedding module (BLOOM's embedding LayerNorm counts there too, as DeepSpeed's last stage holds it).
    mds::model::PipelineStage first{0, 2, 0, 1}, last{1, 2, 1, -1};
    const mds::model::GptModel s0(tiny_gpt(), c10::Device(at::kCPU), 42, {}, first);
    const mds::model::GptModel s1(tiny_gpt(), c10::Device(at::kCPU), 42, {}, last);
    DOCTEST_CHECK(megatron_parameters_in_billions_no_embedding(s0, 2) == doctest::Approx(2 * 49984e-9).epsilon(1e-12));
    DOCTEST_CHECK(megatron_parameters_in_billions_no_embedding(s1, 2) == doctest::Approx(2 * (49984 + 128) * 1e-9).epsilon(1e-12));
    const mds::model::GptModel b1(tiny_gpt(true), c10::Device(at::kCPU), 42, {}, last);
    DOCTEST_CHECK(megatron_parameters_in_billions_no_embedding(b1, 2) == doctest::Approx(2 * (49984 + 128 + 128) * 1e-9).epsilon(1e-12));
}
