// --adam-step-fusion on the CPU (trainer/fused_adam.cpp running kernels/adam_ref.cpp): a bf16 model's steps give
// the unfused optimizer's gradient norms, zero counts, masters, moments and weights to fp32 rounding, skip a
// non-finite step alike, resume from a checkpoint's state alike; models and set-ups it cannot update are refused;
// the update over ZeRO-1's fragments (slices) is the update over the whole parameters on those elements. Which
// fused kernels a run gets by default (trainer/fusions.h): on a GPU where they apply, never on the CPU, the flags
// deciding when given either way.
#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../../libcore/src/trainer/fused_adam.h"  // private to the trainer area
#include "../../../libcore/src/trainer/fusions.h"
#include "mds/flags/train_args.h"
#include "mds/model/fused_layer_norm.h"
#include "adam_support.h"
#include "mds/model/gpt_model.h"
#include "mds/trainer/optimizer.h"
#include "mds/util/error.h"
#include "tiny_gpt.h"
#include "train_flags_support.h"

using namespace mds::trainer;
using mds::trainer_test::adam_config;
using mds::trainer_test::fill_grads;

namespace {

mds::optim::OptimizerConfig fused_config() {
    auto c = adam_config();
    c.adam_step_fusion = true;
    return c;
}

// The largest normwise difference max |a - b| / max |b| over two lists of tensors. Elementwise relative differences
// are no measure here: torch's CPU AdamW rounds each fp32 operation (the moments as lerp and addcmul), adam_math.h
// computes them in double, and where β·m and (1 - β)·g cancel, the same rounding leaves a large relative
// difference in a tiny moment (torch's own CPU step is 1.6e-4 off the exact moments there).
double worst_normwise(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const auto x = a[i].to(at::kDouble), y = b[i].to(at::kDouble);
        const double scale = y.abs().max().item<double>();
        worst = std::max(worst, (x - y).abs().max().item<double>() / (scale > 0 ? scale : 1.0));
    }
    return worst;
}

std::vector<at::Tensor> weights(mds::model::GptModel& m) {
    std::vector<at::Tensor> out;
    for (auto& p : m.parameters()) out.push_back(p.tensor.detach());
    return out;
}

std::string refusal(mds::model::Precision precision, bool offload) {
    auto config = tiny_gpt();
    config.precision = precision;
    mds::model::GptModel model(config, c10::Device(at::kCPU), 42);
    try {
        AdamOptimizer opt(model.parameters(), fused_config(), nullptr, offload);
    } catch (const mds::UsageError& e) {
        return e.what();
    }
    return "(accepted)";
}

}  // namespace

TEST_CASE("adam step fusion: a bf16 model's steps as the unfused optimizer's, to fp32 rounding") {
    auto config = tiny_gpt();
    config.precision = mds::model::Precision::BF16;
    mds::model::GptModel plain_model(config, c10::Device(at::kCPU), 42);
    mds::model::GptModel fused_model(config, c10::Device(at::kCPU), 42);
    AdamOptimizer plain(plain_model.parameters(), adam_config());
    AdamOptimizer fused(fused_model.parameters(), fused_config());
    for (int step = 1; step <= 5; ++step) {
        fill_grads(plain_model, step);
        fill_grads(fused_model, step);
        // Weight decay 0.1 on the decay group; step 3 with a larger learning rate.
        const double lr = step == 3 ? 3e-3 : 1e-3;
        const auto a = plain.step(lr, 0.1, 1.0, false, true);
        const auto b = fused.step(lr, 0.1, 1.0, false, true);
        INFO("step " << step);
        DOCTEST_CHECK(a.grad_norm > 1.0);  // clipping acted
        DOCTEST_CHECK(std::abs(a.grad_norm - b.grad_norm) <= 1e-12 * a.grad_norm);
        DOCTEST_CHECK(a.num_zeros == b.num_zeros);
        DOCTEST_CHECK(!b.skipped);
    }
    DOCTEST_CHECK(fused.steps_taken() == 5);
    // fp32 states: the same arithmetic up to fp32 roundings (torch's CPU AdamW vs adam_math.h).
    DOCTEST_CHECK(worst_normwise(fused.master_params(), plain.master_params()) < 1e-6);
    DOCTEST_CHECK(worst_normwise(fused.exp_avg(), plain.exp_avg()) < 1e-6);
    DOCTEST_CHECK(worst_normwise(fused.exp_avg_sq(), plain.exp_avg_sq()) < 1e-6);
    // The model's bf16 weights are its masters rounded to nearest even: the same as the unfused ones but where a
    // master sits within fp32 rounding of a bf16 tie.
    std::int64_t differ = 0, total = 0;
    const auto w_fused = weights(fused_model), w_plain = weights(plain_model);
    for (std::size_t i = 0; i < w_fused.size(); ++i) {
        DOCTEST_CHECK(at::equal(w_fused[i], fused.master_params()[i].to(at::kBFloat16)));
        differ += w_fused[i].ne(w_plain[i]).sum().item<std::int64_t>();
        total += w_fused[i].numel();
    }
    DOCTEST_CHECK(differ * 10000 < total);
    // Something moved.
    mds::model::GptModel initial(config, c10::Device(at::kCPU), 42);
    DOCTEST_CHECK(!at::equal(initial.parameters()[0].tensor, fused_model.parameters()[0].tensor));
}

TEST_CASE("adam step fusion: a non-finite gradient skips the step and changes nothing") {
    auto config = tiny_gpt();
    config.precision = mds::model::Precision::BF16;
    mds::model::GptModel model(config, c10::Device(at::kCPU), 42);
    AdamOptimizer fused(model.parameters(), fused_config());
    fill_grads(model, 1);
    fused.step(1e-3, 0.1, 1.0, true, false);
    const auto before = weights(model);
    std::vector<at::Tensor> masters;
    for (const auto& m : fused.master_params()) masters.push_back(m.clone());
    fill_grads(model, 2);
    model.parameters()[1].tensor.mutable_grad().view({-1})[3] = std::numeric_limits<float>::infinity();
    const auto r = fused.step(1e-3, 0.1, 1.0, true, false);
    DOCTEST_CHECK(r.skipped);
    DOCTEST_CHECK(std::isinf(r.grad_norm));
    DOCTEST_CHECK(fused.steps_taken() == 1);
    for (std::size_t i = 0; i < before.size(); ++i) {
        DOCTEST_CHECK(at::equal(before[i], model.parameters()[i].tensor));
        DOCTEST_CHECK(at::equal(masters[i], fused.master_params()[i]));
    }
}

TEST_CASE("adam step fusion: a checkpoint's state resumes into the same next step as unfused") {
    auto config = tiny_gpt();
    config.precision = mds::model::Precision::BF16;
    mds::model::GptModel source(config, c10::Device(at::kCPU), 42);
    AdamOptimizer trained(source.parameters(), adam_config());
    for (int step = 1; step <= 2; ++step) {
        fill_grads(source, step);
        trained.step(1e-3, 0.1, 1.0, false, false);
    }
    mds::model::GptModel target(config, c10::Device(at::kCPU), 7);
    AdamOptimizer resumed(target.parameters(), fused_config());
    resumed.load_state(trained.master_params(), trained.exp_avg(), trained.exp_avg_sq(), trained.steps_taken());
    DOCTEST_CHECK(resumed.steps_taken() == 2);
    fill_grads(source, 3);
    fill_grads(target, 3);
    const auto a = trained.step(1e-3, 0.1, 1.0, false, false);
    const auto b = resumed.step(1e-3, 0.1, 1.0, false, false);
    DOCTEST_CHECK(std::abs(a.grad_norm - b.grad_norm) <= 1e-12 * a.grad_norm);
    // The third step's bias corrections (step 3, not 1): the moments and masters agree.
    DOCTEST_CHECK(worst_normwise(resumed.master_params(), trained.master_params()) < 1e-6);
    DOCTEST_CHECK(worst_normwise(resumed.exp_avg_sq(), trained.exp_avg_sq()) < 1e-6);
}

TEST_CASE("adam step fusion: fp32 and fp16 models and the host-offloaded optimizer are refused") {
    DOCTEST_CHECK(refusal(mds::model::Precision::BF16, false) == "(accepted)");
    DOCTEST_CHECK(refusal(mds::model::Precision::FP32, false) ==
                  "--adam-step-fusion: a bf16 model only, not Float (needs --bf16)");
    DOCTEST_CHECK(refusal(mds::model::Precision::FP16, false) ==
                  "--adam-step-fusion: a bf16 model only, not Half (needs --bf16)");
    DOCTEST_CHECK(refusal(mds::model::Precision::BF16, true) ==
                  "--adam-step-fusion: not with the optimizer offloaded to the host (--cpu-optimizer)");
}

// The update over slices (ZeRO-1's fragments) is the update over whole parameters on those elements, to the bit:
// slices at odd offsets and across chunk boundaries; elements no slice covers are left alone (another rank's).
TEST_CASE("adam step fusion: slices of the parameters update exactly their elements") {
    const std::vector<std::int64_t> sizes = {70001, 5, 40000};
    std::vector<at::Tensor> whole_p, sliced_p, master, m1, m2;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        const auto x = at::sin(at::arange(sizes[i], at::TensorOptions().dtype(at::kFloat)) * (0.3 + 0.1 * static_cast<double>(i)));
        whole_p.push_back(x.to(at::kBFloat16));
        sliced_p.push_back(x.to(at::kBFloat16));
        master.push_back(whole_p.back().to(at::kFloat));
        m1.push_back(at::zeros({sizes[i]}));
        m2.push_back(at::zeros({sizes[i]}));
    }
    FusedAdam whole(whole_p, master, m1, m2, {true, false, true});
    // Parameter 0 in two slices, 1 whole, 2 in two with elements [100, 200) left to "another rank".
    struct Range { std::size_t param; std::int64_t begin, end; };
    const std::vector<Range> ranges = {{0, 0, 33333}, {0, 33333, 70001}, {1, 0, 5}, {2, 0, 100}, {2, 200, 40000}};
    std::vector<FusedAdamSlice> slices;
    for (const auto& r : ranges) {
        const auto len = r.end - r.begin;
        slices.push_back({r.param, r.begin, len, sliced_p[r.param].to(at::kFloat).narrow(0, r.begin, len).clone(),
                          at::zeros({len}), at::zeros({len}), r.param != 1});
    }
    FusedAdam sliced(sliced_p, slices);
    const auto untouched = sliced_p[2].narrow(0, 100, 100).clone();
    for (int step = 1; step <= 3; ++step) {
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            const auto g = at::cos(at::arange(sizes[i], at::TensorOptions().dtype(at::kFloat)) * (0.7 + step)).to(at::kBFloat16);
            whole_p[i].mutable_grad() = g;
            sliced_p[i].mutable_grad() = g.clone();
        }
        const auto a = whole.grad_sumsq(0.5f), b = sliced.grad_sumsq(0.5f);
        DOCTEST_CHECK(at::equal(a, b));
        mds::kernels::AdamHyper h;
        h.grad_scale = 0.5f;
        h.clip = 0.75f;
        h.lr = 1e-2;
        h.weight_decay[0] = 0.1;
        h.step = step;
        whole.step(h);
        sliced.step(h);
    }
    for (std::size_t k = 0; k < ranges.size(); ++k) {
        const auto& r = ranges[k];
        INFO("slice " << k);
        const auto len = r.end - r.begin;
        DOCTEST_CHECK(at::equal(sliced_p[r.param].narrow(0, r.begin, len), whole_p[r.param].narrow(0, r.begin, len)));
        DOCTEST_CHECK(at::equal(slices[k].master, master[r.param].narrow(0, r.begin, len)));
        DOCTEST_CHECK(at::equal(slices[k].exp_avg_sq, m2[r.param].narrow(0, r.begin, len)));
    }
    DOCTEST_CHECK(at::equal(sliced_p[2].narrow(0, 100, 100), untouched));
    DOCTEST_CHECK(!at::equal(whole_p[2].narrow(0, 100, 100), untouched));
    // A slice outside its parameter, or with states of another size, is refused by name.
    auto bad = slices;
    bad[1].length += 1;
    bad[1].master = at::zeros({bad[1].length});
    bad[1].exp_avg = at::zeros({bad[1].length});
    bad[1].exp_avg_sq = at::zeros({bad[1].length});
    DOCTEST_CHECK_THROWS_WITH(FusedAdam(sliced_p, bad), "fused Adam step: slice 1: elements [33333, 70002) outside parameter 0's 70001");
    bad = slices;
    bad[3].exp_avg = at::zeros({7});
    DOCTEST_CHECK_THROWS_WITH(FusedAdam(sliced_p, bad),
                              "fused Adam step: slice 3 (parameter 2): its states are not contiguous fp32 tensors of its size on its device");
}

namespace {

mds::flags::TrainArgs parse_fusion_flags(std::vector<std::string> argv) {
    return mds::trainer_test::parse_train_flags(std::move(argv), /*resolve=*/false);
}

std::string fusion_list(const Fusions& f) {
    return std::string(f.cross_entropy ? "ce " : "") + (f.adam_step ? "adam " : "") + (f.layernorm_backward ? "ln " : "") +
           (f.bias_grad ? "bias" : "");
}

}  // namespace

TEST_CASE("fused kernels by default: on a GPU where they apply, off on the CPU, the flags deciding when given") {
    const c10::Device cpu(at::kCPU), gpu(at::kCUDA, 0);
    // A build without kernels/'s CUDA code (the sanitizer build) turns none on, on a GPU too.
    const bool kernels = mds::model::fused_layer_norm_unsupported(gpu, at::kBFloat16).empty();
    const std::string all = kernels ? "ce adam ln bias" : "";
    std::vector<std::string> by_default;
    DOCTEST_CHECK(fusion_list(fusions_for(parse_fusion_flags({"--bf16"}), cpu, &by_default)).empty());
    DOCTEST_CHECK(by_default.empty());

    DOCTEST_CHECK(fusion_list(fusions_for(parse_fusion_flags({"--bf16"}), gpu, &by_default)) == all);
    if (kernels)
        DOCTEST_CHECK(by_default == std::vector<std::string>{"--cross-entropy-loss-fusion", "--adam-step-fusion",
                                                             "--layernorm-backward-fusion", "--bias-grad-fusion"});
    // fp32: the Adam step is bf16's only; fp16: none of the four takes it.
    DOCTEST_CHECK(fusion_list(fusions_for(parse_fusion_flags({}), gpu)) == (kernels ? "ce ln bias" : ""));
    DOCTEST_CHECK(fusion_list(fusions_for(parse_fusion_flags({"--fp16"}), gpu)).empty());
    // The cross entropy over a vocabulary split between tensor-parallel ranks, the Adam step offloaded: unfused.
    DOCTEST_CHECK(fusion_list(fusions_for(parse_fusion_flags({"--bf16", "--tensor-model-parallel-size", "2"}), gpu)) ==
                  (kernels ? "adam ln bias" : ""));
    DOCTEST_CHECK(fusion_list(fusions_for(parse_fusion_flags({"--bf16", "--cpu-optimizer"}), gpu)) ==
                  (kernels ? "ce ln bias" : ""));
    // --no-X turns one off; --X given is kept as given, on the CPU too (where the references run).
    by_default.clear();
    DOCTEST_CHECK(fusion_list(fusions_for(parse_fusion_flags({"--bf16", "--no-adam-step-fusion", "--no-bias-grad-fusion"}),
                                          gpu, &by_default)) == (kernels ? "ce ln " : ""));
    DOCTEST_CHECK(by_default.size() == (kernels ? 2u : 0u));
    DOCTEST_CHECK(fusion_list(fusions_for(parse_fusion_flags({"--bf16", "--adam-step-fusion"}), cpu)) == "adam ");
    DOCTEST_CHECK(fusion_list(fusions_for(parse_fusion_flags({"--layernorm-backward-fusion"}), cpu)) == "ln ");
}
