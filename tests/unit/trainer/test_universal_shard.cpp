#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../../../libcore/src/trainer/checkpoint_files.h"  // private to the trainer area
#include "mds/ckpt/universal.h"
#include "mds/util/error.h"
#include "mds/util/files.h"  // remove_tree

using namespace mds::trainer::checkpoint_detail;
namespace fs = std::filesystem;

namespace {

// zero/<layer>.<name>/fp32.pt holding `full` (row-major fp32), as the converters write it.
void write_state(const fs::path& dir, const std::string& ds_name, const at::Tensor& full) {
    const at::Tensor t = full.to(at::kFloat).contiguous();
    const std::span<const float> data(t.data_ptr<float>(), static_cast<std::size_t>(t.numel()));
    mds::ckpt::write_universal_state((dir / "zero" / ds_name).string(), mds::ckpt::OptimState::FP32, data, t.sizes().vec(), {});
}

mds::model::Parameter param(int layer, const std::string& name, std::vector<std::int64_t> shard, mds::model::TpSplit split) {
    mds::model::Parameter p;
    p.layer = layer;
    p.name = name;
    p.tensor = at::zeros(shard);
    p.split = split;
    return p;
}

// Rows (dim 0) of `full` picked by `rows`.
at::Tensor rows(const at::Tensor& full, std::vector<std::int64_t> idx) { return full.index_select(0, at::tensor(idx, at::kLong)); }

}  // namespace

TEST_CASE("universal_shard: each rank's TP shard of a universal checkpoint's full tensors") {
    const fs::path dir = fs::temp_directory_path() / ("mds-test-universal-" + std::to_string(::getpid()));
    mds::remove_tree(dir.string());
    using mds::model::TpSplit;
    const auto fp32 = mds::ckpt::OptimState::FP32;

    // Column-parallel (QKV, dense_h_to_4h): dim 0 cut in TP pieces.
    const at::Tensor qkv = at::arange(8 * 3, at::kFloat).view({8, 3});
    write_state(dir, "3.self_attention.query_key_value.weight", qkv);
    const auto pq = param(3, "self_attention.query_key_value.weight", {4, 3}, TpSplit::ColumnParallel);
    DOCTEST_CHECK(at::equal(universal_shard(dir, pq, fp32, 2, 1, false), rows(qkv, {4, 5, 6, 7})));

    // GLU's dense_h_to_4h: [A; B] split separately, rank 1 holds [A_1; B_1].
    const at::Tensor glu = at::arange(8 * 2, at::kFloat).view({8, 2});
    write_state(dir, "3.mlp.dense_h_to_4h.weight", glu);
    const auto pg = param(3, "mlp.dense_h_to_4h.weight", {4, 2}, TpSplit::ColumnParallel);
    DOCTEST_CHECK(at::equal(universal_shard(dir, pg, fp32, 2, 1, true), rows(glu, {2, 3, 6, 7})));
    DOCTEST_CHECK(at::equal(universal_shard(dir, pg, fp32, 2, 0, true), rows(glu, {0, 1, 4, 5})));

    // Row-parallel (self_attention.dense, dense_4h_to_h): dim 1, whatever the file's cat_dim says.
    const at::Tensor dense = at::arange(4 * 6, at::kFloat).view({4, 6});
    write_state(dir, "4.self_attention.dense.weight", dense);
    const auto pd = param(4, "self_attention.dense.weight", {4, 3}, TpSplit::RowParallel);
    DOCTEST_CHECK(at::equal(universal_shard(dir, pd, fp32, 2, 1, false), dense.narrow(1, 3, 3)));

    // The vocabulary: 5 stored rows (padding stripped) padded with zeros to this run's 2 x 4 rows.
    const at::Tensor emb = at::arange(5 * 2, at::kFloat).add(1).view({5, 2});
    write_state(dir, "tied_modules.embed.word_embeddings.weight", emb);
    const auto pe = param(mds::model::kEmbeddingLayer, "word_embeddings.weight", {4, 2}, TpSplit::ColumnParallel);
    const at::Tensor e1 = universal_shard(dir, pe, fp32, 2, 1, false);
    DOCTEST_CHECK(at::equal(e1.narrow(0, 0, 1), emb.narrow(0, 4, 1)));
    DOCTEST_CHECK(at::equal(e1.narrow(0, 1, 3), at::zeros({3, 2})));

    // Replicated (LayerNorm): whole, and a wrong shape names the file and the expected shape.
    write_state(dir, "3.input_layernorm.weight", at::ones({5}));
    const auto pl = param(3, "input_layernorm.weight", {5}, TpSplit::Replicated);
    DOCTEST_CHECK(at::equal(universal_shard(dir, pl, fp32, 2, 1, false), at::ones({5})));
    const auto pbad = param(3, "input_layernorm.weight", {6}, TpSplit::Replicated);
    DOCTEST_CHECK_THROWS_WITH_AS(universal_shard(dir, pbad, fp32, 2, 0, false),
                                 doctest::Contains("input_layernorm.weight/fp32.pt: shape [5], expected [6]"), mds::Error);
    // A shard that does not fit the TP degree.
    DOCTEST_CHECK_THROWS_WITH_AS(universal_shard(dir, pq, fp32, 4, 0, false),
                                 doctest::Contains("shape [8, 3], expected [16, 3]"), mds::Error);
    // A missing parameter.
    const auto pm = param(5, "mlp.dense_4h_to_h.weight", {2, 2}, TpSplit::RowParallel);
    DOCTEST_CHECK_THROWS_WITH_AS(universal_shard(dir, pm, fp32, 2, 0, false),
                                 doctest::Contains("5.mlp.dense_4h_to_h.weight/fp32.pt: missing"), mds::Error);
    mds::remove_tree(dir.string());
}

TEST_CASE("universal_checkpoint_dir: DIR/latest_universal names a folder with zero/") {
    const fs::path dir = fs::temp_directory_path() / ("mds-test-universal-dir-" + std::to_string(::getpid()));
    mds::remove_tree(dir.string());
    fs::create_directories(dir / "global_step7");
    DOCTEST_CHECK_THROWS_WITH_AS(universal_checkpoint_dir(dir.string()), doctest::Contains("latest_universal does not exist"),
                                 mds::Error);
    mds::write_file_atomic((dir / "latest_universal").string(), "global_step7\n");
    DOCTEST_CHECK_THROWS_WITH_AS(universal_checkpoint_dir(dir.string()),
                                 doctest::Contains("is not a universal checkpoint folder"), mds::Error);
    fs::create_directories(dir / "global_step7" / "zero");
    DOCTEST_CHECK(universal_checkpoint_dir(dir.string()) == dir / "global_step7");
    mds::remove_tree(dir.string());
}
