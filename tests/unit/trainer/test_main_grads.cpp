// bf16's fp32 main gradients (trainer/main_grads.h): over several micro batches they are the fp32 sum of each
// micro batch's bf16 gradients, as DeepSpeed's BF16_Optimizer accumulates them (not autograd's bf16 sum);
// the data-parallel reducer, the tied-embedding sum and the optimizer read them; the optimizer's step from
// them is its step from fp32 copies of the same gradients.
#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "adam_support.h"
#include "mds/model/gpt_model.h"
#include "mds/trainer/comm.h"
#include "mds/trainer/finalize_grads.h"
#include "mds/trainer/grad_reducer.h"
#include "mds/trainer/main_grads.h"
#include "mds/trainer/optimizer.h"
#include "mds/util/error.h"
#include "tiny_gpt.h"

using namespace mds::trainer;
using mds::trainer_test::adam_config;

namespace {

mds::model::GptConfig bf16_gpt() {
    auto c = tiny_gpt();
    c.precision = mds::model::Precision::BF16;
    c.hidden_dropout = c.attention_dropout = 0.0;  // the same gradients again in a second step
    return c;
}

// Micro batch j's tokens and labels: [2, 64] ids of the tiny model's vocabulary, different for each j.
std::pair<at::Tensor, at::Tensor> micro_batch(int j) {
    const auto opts = at::TensorOptions().dtype(at::kLong);
    auto ids = (at::arange(2 * 65, opts) * (7 + 2 * j) + 13 * j).remainder(500).view({2, 65});
    return {ids.narrow(1, 0, 64).contiguous(), ids.narrow(1, 1, 64).contiguous()};
}

void backward(mds::model::GptModel& model, int j) {
    const auto [tokens, labels] = micro_batch(j);
    model.loss(tokens, labels).backward();
}

std::vector<at::Tensor> grads_of(mds::model::GptModel& model) {
    std::vector<at::Tensor> out;
    for (auto& p : model.parameters()) out.push_back(p.tensor.grad().defined() ? p.tensor.grad().clone() : at::Tensor());
    return out;
}

}  // namespace

TEST_CASE("main gradients: the fp32 sum of every micro batch's bf16 gradients, no .grad left behind") {
    constexpr int kMicroBatches = 6;
    // Each micro batch's bf16 gradients alone, summed in fp32 in micro-batch order: what BF16_Optimizer holds.
    mds::model::GptModel alone(bf16_gpt(), c10::Device(at::kCPU), 7);
    std::vector<at::Tensor> want;
    for (auto& p : alone.parameters()) want.push_back(at::zeros(p.tensor.sizes(), at::TensorOptions().dtype(at::kFloat)));
    for (int j = 0; j < kMicroBatches; ++j) {
        for (auto& p : alone.parameters()) p.tensor.mutable_grad().reset();
        backward(alone, j);
        const auto g = grads_of(alone);
        for (std::size_t k = 0; k < g.size(); ++k) {
            REQUIRE(g[k].defined());
            DOCTEST_CHECK((g[k].scalar_type() == at::kBFloat16));
            want[k].add_(g[k]);
        }
    }
    // autograd's own accumulation: a bf16 sum, which rounds after every micro batch.
    mds::model::GptModel plain(bf16_gpt(), c10::Device(at::kCPU), 7);
    for (int j = 0; j < kMicroBatches; ++j) backward(plain, j);
    const auto bf16_sum = grads_of(plain);

    mds::model::GptModel model(bf16_gpt(), c10::Device(at::kCPU), 7);
    MainGrads main(model.parameters());
    std::vector<std::size_t> heard;
    main.set_listener([&heard](std::size_t k) { heard.push_back(k); });
    for (int round = 0; round < 2; ++round) {  // a second step after zero() starts from nothing
        main.zero();
        heard.clear();
        for (int j = 0; j < kMicroBatches; ++j) backward(model, j);
        const auto& got = main.grads();
        REQUIRE(got.size() == want.size());
        std::int64_t bf16_differs = 0;
        for (std::size_t k = 0; k < got.size(); ++k) {
            INFO("round " << round << ", parameter " << model.parameters()[k].full_name());
            DOCTEST_CHECK((got[k].scalar_type() == at::kFloat));
            DOCTEST_CHECK(at::equal(got[k], want[k]));
            DOCTEST_CHECK(!model.parameters()[k].tensor.grad().defined());
            bf16_differs += bf16_sum[k].to(at::kFloat).ne(want[k]).sum().item<std::int64_t>();
        }
        // The bf16 sum is another number for many elements: the test tells the two apart.
        DOCTEST_CHECK(bf16_differs > 1000);
        // The listener heard every parameter once per micro batch.
        DOCTEST_CHECK(heard.size() == kMicroBatches * model.parameters().size());
    }
    DOCTEST_CHECK(main.flat().numel() == model.parameter_count());
    DOCTEST_CHECK(main.of(model.parameters()[3].tensor).data_ptr() == main.grads()[3].data_ptr());
    DOCTEST_CHECK_THROWS(main.of(at::zeros({2})));
    // A range of parameters is their views end to end, sharing the buffer.
    const auto r = main.range(2, 4);
    DOCTEST_CHECK(r.data_ptr() == main.grads()[2].data_ptr());
    DOCTEST_CHECK(r.numel() == main.grads()[2].numel() + main.grads()[3].numel() + main.grads()[4].numel());
    DOCTEST_CHECK(main.range(0, model.parameters().size() - 1).numel() == main.flat().numel());
    DOCTEST_CHECK_THROWS(main.range(4, 2));
    DOCTEST_CHECK_THROWS(main.range(0, model.parameters().size()));
}

TEST_CASE("main gradients: the reducer and finalize_model_grads reduce them, not the .grad tensors") {
    const auto comm = Communicator::single_process();
    mds::model::GptModel model(bf16_gpt(), c10::Device(at::kCPU), 7);
    auto& params = model.parameters();
    MainGrads main(params);
    main.flat().fill_(2.0);
    {
        GradientReducer reducer(params, *comm, 0.25, 4096, &main);
        DOCTEST_CHECK(reducer.buckets() > 1);
        finalize_model_grads(model, *comm, &reducer, nullptr, &main);
        for (std::size_t k = 0; k < params.size(); ++k) {
            DOCTEST_CHECK(at::equal(main.grads()[k], at::full_like(main.grads()[k], 0.5)));
            DOCTEST_CHECK(!params[k].tensor.grad().defined());
        }
    }
    // The reducer gone, the hooks still add each micro batch's gradient.
    main.zero();
    backward(model, 0);
    DOCTEST_CHECK(main.flat().abs().sum().item<double>() > 0);
}

TEST_CASE("main gradients: the optimizer's step from them is its step from fp32 copies of the same gradients") {
    for (const bool fused : {false, true}) {
        INFO("fused: " << fused);
        auto config = adam_config();
        config.adam_step_fusion = fused;
        mds::model::GptModel copies_model(bf16_gpt(), c10::Device(at::kCPU), 7);
        mds::model::GptModel main_model(bf16_gpt(), c10::Device(at::kCPU), 7);
        MainGrads main(main_model.parameters());
        AdamOptimizer copies(copies_model.parameters(), config);
        AdamOptimizer with_main(main_model.parameters(), config, nullptr, false, &main);
        for (int step = 1; step <= 3; ++step) {
            mds::trainer_test::fill_grads(copies_model, step);  // bf16 .grad
            with_main.zero_grad();
            for (std::size_t k = 0; k < main.grads().size(); ++k)
                main.grads()[k].copy_(copies_model.parameters()[k].tensor.grad());  // the same values in fp32
            const auto a = copies.step(1e-3, 0.1, 1.0, false, true);
            const auto b = with_main.step(1e-3, 0.1, 1.0, false, true);
            INFO("step " << step);
            DOCTEST_CHECK(a.grad_norm > 1.0);  // clipping acted
            DOCTEST_CHECK(a.grad_norm == b.grad_norm);
            DOCTEST_CHECK(a.num_zeros == b.num_zeros);
        }
        for (std::size_t k = 0; k < main.grads().size(); ++k) {
            DOCTEST_CHECK(at::equal(copies.master_params()[k], with_main.master_params()[k]));
            DOCTEST_CHECK(at::equal(copies_model.parameters()[k].tensor, main_model.parameters()[k].tensor));
        }
    }
}

TEST_CASE("gradient accumulation fusion: the Linear weights' products go straight into the fp32 main gradients") {
    constexpr int kMicroBatches = 4;
    auto fused_config = bf16_gpt();
    fused_config.gradient_accumulation_fusion = true;
    mds::model::GptModel plain(bf16_gpt(), c10::Device(at::kCPU), 7);
    mds::model::GptModel fused(fused_config, c10::Device(at::kCPU), 7);
    // The blocks' four Linear weights have a sink, nothing else does.
    std::size_t sinks = 0;
    for (const auto& p : fused.parameters()) {
        const bool linear_weight = p.name == "self_attention.query_key_value.weight" || p.name == "self_attention.dense.weight" ||
                                   p.name == "mlp.dense_h_to_4h.weight" || p.name == "mlp.dense_4h_to_h.weight";
        INFO(p.full_name());
        DOCTEST_CHECK(static_cast<bool>(p.main_grad) == linear_weight);
        sinks += linear_weight ? 1 : 0;
    }
    DOCTEST_CHECK(sinks == 4 * static_cast<std::size_t>(fused_config.num_layers));
    // Without MainGrads the fused model's backward returns every gradient, as the plain one's.
    backward(fused, 0);
    backward(plain, 0);
    for (std::size_t k = 0; k < plain.parameters().size(); ++k) {
        INFO(plain.parameters()[k].full_name());
        DOCTEST_CHECK(fused.parameters()[k].tensor.grad().defined());
        const auto& sink = fused.parameters()[k].main_grad;
        DOCTEST_CHECK_FALSE((sink && sink->added));
    }
    for (auto* m : {&plain, &fused})
        for (auto& p : m->parameters()) p.tensor.mutable_grad().reset();

    std::vector<at::Tensor> want, got;
    std::vector<std::size_t> heard_plain, heard_fused;
    {
        MainGrads main_plain(plain.parameters()), main_fused(fused.parameters());
        main_plain.set_listener([&](std::size_t k) { heard_plain.push_back(k); });
        main_fused.set_listener([&](std::size_t k) { heard_fused.push_back(k); });
        main_plain.zero();
        main_fused.zero();
        for (int j = 0; j < kMicroBatches; ++j) {
            backward(plain, j);
            backward(fused, j);
        }
        for (const auto& g : main_plain.grads()) want.push_back(g.clone());
        for (const auto& g : main_fused.grads()) got.push_back(g.clone());
        for (const auto& p : fused.parameters()) {
            INFO(p.full_name());
            DOCTEST_CHECK(!p.tensor.grad().defined());  // the placeholders were dropped
            DOCTEST_CHECK_FALSE((p.main_grad && p.main_grad->added));
        }
    }
    // The hooks ran as without the fusion: the data-parallel reducer hears every parameter once per micro batch
    // (a weight now before its bias: the fused backward's order).
    DOCTEST_CHECK(heard_fused.size() == kMicroBatches * fused.parameters().size());
    std::sort(heard_fused.begin(), heard_fused.end());
    std::sort(heard_plain.begin(), heard_plain.end());
    DOCTEST_CHECK(heard_fused == heard_plain);
    std::int64_t weight_differs = 0;
    for (std::size_t k = 0; k < want.size(); ++k) {
        const auto& p = fused.parameters()[k];
        INFO(p.full_name());
        const double scale = std::max(want[k].abs().max().item<double>(), 1e-30);
        // Each micro batch's product no longer rounded to bf16 before the fp32 sum: within bf16's rounding of it.
        const double normwise = (got[k] - want[k]).abs().max().item<double>() / scale;
        DOCTEST_CHECK(normwise < 1e-2);
        if (p.main_grad) weight_differs += got[k].ne(want[k]).sum().item<std::int64_t>();
    }
    DOCTEST_CHECK(weight_differs > 1000);  // the fused sums are other (unrounded) numbers: the test tells them apart
    // MainGrads gone, the sinks are empty: the backward returns the weights' gradients again.
    backward(fused, 0);
    for (const auto& p : fused.parameters()) DOCTEST_CHECK(p.tensor.grad().defined());

    auto fp32 = tiny_gpt();
    fp32.gradient_accumulation_fusion = true;
    DOCTEST_CHECK_THROWS_WITH_AS(fp32.validate(), doctest::Contains("takes --bf16"), mds::UsageError);
}
