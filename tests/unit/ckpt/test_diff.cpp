// diff_models on two small Hugging Face BLOOM folders: the elementwise rule (numpy.allclose's, B the
// reference), NaN / infinity handling, dtype and shape mismatches, one-sided tensors, the order of
// the report and its JSON. Checkpoints (TP / PP merging, optimizer states, tied copies) are checked
// against torch in tests/crosscheck/test_ckpt_diff.py.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "mds/ckpt/diff.h"
#include "mds/ckpt/safetensors.h"
#include "mds/util/error.h"
#include "mds/util/files.h"  // write_file_atomic
#include "test_support.h"

using namespace mds::ckpt;

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A BLOOM folder with a final LayerNorm of `weight` (F32) and `bias`, plus `extra` tensors.
std::string bloom_folder(const std::string& dir, const std::vector<float>& weight, const std::vector<double>& bias,
                         const std::vector<TensorToWrite>& extra = {}) {
    std::filesystem::create_directories(dir);
    mds::write_file_atomic(dir + "/config.json", R"({"model_type": "bloom", "n_head": 2})");
    std::vector<TensorToWrite> t = {{"transformer.ln_f.weight", DType::F32, {static_cast<std::int64_t>(weight.size())}, weight.data()},
                                    {"transformer.ln_f.bias", DType::F64, {static_cast<std::int64_t>(bias.size())}, bias.data()}};
    t.insert(t.end(), extra.begin(), extra.end());
    write_safetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
    return dir;
}

const TensorDiff* find(const DiffReport& r, const std::string& name) {
    for (const auto& d : r.differing)
        if (d.name == name) return &d;
    return nullptr;
}

}  // namespace

TEST_CASE("diff: allclose's rule with B as the reference, counts and norms") {
    const auto dir = mds::test::scratch_dir("diff-rule").string();
    const auto a = bloom_folder(dir + "/a", {1, 2, 3, 4}, {0, 0});
    const auto b = bloom_folder(dir + "/b", {1, 2.5f, 3, 2}, {0, 0});
    DiffOptions o;
    auto r = diff_models(a, b, o);
    CHECK_FALSE(r.equal());
    CHECK(r.compared == 2);
    REQUIRE(r.differing.size() == 1);
    const auto& d = r.differing[0];
    CHECK(d.name == "final_layernorm.weight");
    CHECK(d.differing == 2);
    CHECK(d.numel == 4);
    CHECK(d.max_abs == doctest::Approx(2.0));
    CHECK(d.max_rel == doctest::Approx(1.0));  // |4 - 2| / |2|
    CHECK(d.diff_norm == doctest::Approx(std::sqrt(0.25 + 4.0)));
    CHECK(d.norm_a == doctest::Approx(std::sqrt(30.0)));
    o.atol = 2.0;  // |a-b| <= 2: equal
    CHECK(diff_models(a, b, o).equal());
    o.atol = 1.0;  // 2 <= 1 + rtol * |2| with rtol 0.5: equal; 0.5 <= 1: equal
    o.rtol = 0.5;
    CHECK(diff_models(a, b, o).equal());
    o.rtol = 0.49;
    CHECK_FALSE(diff_models(a, b, o).equal());
    // B is the reference: swapped, |4 - 2| <= 1 + 0.25 * |4| holds.
    o.rtol = 0.25;
    CHECK(diff_models(b, a, o).equal());
    CHECK_FALSE(diff_models(a, b, o).equal());
}

TEST_CASE("diff: NaN equals NaN, infinities only themselves, zero reference gives an infinite relative difference") {
    const auto dir = mds::test::scratch_dir("diff-nan").string();
    const auto a = bloom_folder(dir + "/a", {kNan, kInf, 1, 0}, {0, 1});
    CHECK(diff_models(a, bloom_folder(dir + "/same", {kNan, kInf, 1, 0}, {0, 1}), {}).equal());
    DiffOptions loose;
    loose.atol = 1e30;
    loose.rtol = 1e30;
    const auto b = bloom_folder(dir + "/b", {1, -kInf, kNan, 0}, {0, 1});
    auto r = diff_models(a, b, loose);  // no tolerance makes NaN or an infinity equal to a number
    REQUIRE(r.differing.size() == 1);
    CHECK(r.differing[0].differing == 3);
    CHECK(std::isinf(r.differing[0].max_abs));
    const auto c = bloom_folder(dir + "/c", {kNan, kInf, 1, 0}, {0.5, 0});
    r = diff_models(a, c, {});
    const auto* bias = find(r, "final_layernorm.bias");
    REQUIRE(bias);
    CHECK(std::isinf(bias->max_rel));  // 1 against 0
    CHECK(bias->max_abs == doctest::Approx(1.0));
    const auto j = nlohmann::json::parse(diff_report_json(r, 20));
    CHECK(j["tensors"][0]["name"] == "final_layernorm.bias");  // infinite relative difference first
    CHECK(j["tensors"][0]["max_rel"].is_null());
    CHECK(j["equal"] == false);
}

TEST_CASE("diff: dtype and shape mismatches, one-sided tensors, the summary line") {
    const auto dir = mds::test::scratch_dir("diff-mismatch").string();
    const float pos[6] = {1, 2, 3, 4, 5, 6};
    const auto a = bloom_folder(dir + "/a", {1, 2}, {0, 0}, {{"transformer.h.0.input_layernorm.weight", DType::F32, {2}, pos}});
    const auto b = bloom_folder(dir + "/b", {1, 2, 3}, {0, 0}, {{"transformer.h.0.input_layernorm.bias", DType::F32, {2}, pos}});
    const auto r = diff_models(a, b, {});
    REQUIRE(r.differing.size() == 1);
    CHECK_FALSE(r.differing[0].compared);  // [2] vs [3]
    CHECK(r.only_a.size() == 1);
    CHECK(r.only_a[0].name == "layers.0.input_layernorm.weight");
    CHECK(r.only_b.size() == 1);
    CHECK(r.only_b[0].name == "layers.0.input_layernorm.bias");
    const auto text = describe_diff(r, 20);
    CHECK(text.find("final_layernorm.weight  shape [2] vs [3]") != std::string::npos);
    CHECK(text.find("only in A: layers.0.input_layernorm.weight  [2] F32") != std::string::npos);
    CHECK(text.find("2 tensors compared, 1 differ, 1 only in A, 1 only in B\n") != std::string::npos);

    // Same values, other dtype: reported as a difference with zero distance.
    std::filesystem::create_directories(dir + "/c");
    mds::write_file_atomic(dir + "/c/config.json", R"({"model_type": "bloom", "n_head": 2})");
    const double wd[2] = {1, 2};
    const double bd[2] = {0, 0};
    write_safetensors(dir + "/c/model.safetensors", {{"transformer.ln_f.weight", DType::F64, {2}, wd}, {"transformer.ln_f.bias", DType::F64, {2}, bd}});
    const auto d = bloom_folder(dir + "/d", {1, 2}, {0, 0});
    const auto r2 = diff_models(d, dir + "/c", {});
    REQUIRE(r2.differing.size() == 1);
    CHECK(r2.differing[0].dtype_a == "F32");
    CHECK(r2.differing[0].dtype_b == "F64");
    CHECK(r2.differing[0].differing == 0);
}

TEST_CASE("diff: unreadable inputs are errors naming the file") {
    const auto dir = mds::test::scratch_dir("diff-bad").string();
    const auto a = bloom_folder(dir + "/a", {1}, {0});
    CHECK_THROWS_WITH_AS(diff_models(a, dir + "/missing", {}), doctest::Contains("missing: no such folder"), mds::Error);
    std::filesystem::create_directories(dir + "/gpt");
    std::filesystem::create_directories(dir + "/empty");
    mds::write_file_atomic(dir + "/gpt/config.json", R"({"model_type": "llama", "n_head": 2})");
    CHECK_THROWS_WITH_AS(diff_models(a, dir + "/gpt", {}), doctest::Contains("expected \"gpt2\" or \"bloom\""), mds::Error);
    mds::write_file_atomic(dir + "/empty/config.json", R"({"model_type": "gpt2", "n_head": 2})");
    CHECK_THROWS_WITH_AS(diff_models(a, dir + "/empty", {}), doctest::Contains("no model.safetensors"), mds::Error);
    DiffOptions o;
    o.optimizer = true;
    CHECK_THROWS_AS(diff_models(a, a, o), mds::UsageError);
}
