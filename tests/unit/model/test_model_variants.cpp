// The model variants of Megatron-DeepSpeed's flags (issue 18): the MLP activations as BMD's
// ParallelMLP computes them, the GLU halves' order, and the shapes --kv-channels and
// --glu-activation give the parameters. The cross-check against the real program is
// tests/crosscheck/test_bmd_variants.py.
#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <vector>

#include "mds/model/gpt_config.h"
#include "mds/model/gpt_model.h"
#include "mds/util/error.h"

using namespace mds::model;

namespace {

double at1(const at::Tensor& t, std::int64_t i) { return t.to(at::kDouble)[i].item<double>(); }
bool has_shape(const Parameter& p, std::int64_t rows, std::int64_t cols) {
    return p.tensor.dim() == 2 && p.tensor.size(0) == rows && p.tensor.size(1) == cols;
}

GptConfig tiny() {
    GptConfig c;
    c.num_layers = 2;
    c.hidden_size = 16;
    c.ffn_hidden_size = 24;
    c.num_attention_heads = 4;
    c.seq_length = 8;
    c.max_position_embeddings = 8;
    c.padded_vocab_size = 32;
    c.hidden_dropout = 0.0;
    c.attention_dropout = 0.0;
    return c;
}

}  // namespace

TEST_CASE("GeLU kinds: the formulas of BMD's fused bias GeLU, F.gelu, openai_gelu and erf_gelu") {
    const std::vector<double> xs{-3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 2.5};
    const auto x = at::tensor(xs, at::TensorOptions().dtype(at::kDouble));
    const auto fused = mlp_activation(x, Activation::FusedGelu, Glu::None);
    const auto exact = mlp_activation(x, Activation::Gelu, Glu::None);
    const auto openai = mlp_activation(x, Activation::OpenAiGelu, Glu::None);
    const auto onnx = mlp_activation(x, Activation::ErfGelu, Glu::None);
    for (std::size_t i = 0; i < xs.size(); ++i) {
        const double v = xs[i];
        const auto k = static_cast<std::int64_t>(i);
        const double tanh_form = 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * v * (1.0 + 0.044715 * v * v)));
        CHECK(at1(fused, k) == doctest::Approx(tanh_form).epsilon(1e-12));
        CHECK(at1(openai, k) == doctest::Approx(tanh_form).epsilon(1e-12));
        CHECK(at1(exact, k) == doctest::Approx(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))).epsilon(1e-12));
        CHECK(at1(onnx, k) == doctest::Approx(v * 0.5 * (std::erf(v / 1.41421) + 1.0)).epsilon(1e-12));
    }
    // erf_gelu's 1.41421 is not √2: at x = 1 the two differ by ~1e-6 relative, more than fp32 rounding.
    CHECK(std::abs(at1(onnx, 5) - at1(exact, 5)) > 1e-7);
    // The tanh approximation and the exact GeLU differ too (what --no-bias-gelu-fusion changes).
    CHECK(std::abs(at1(fused, 1) - at1(exact, 1)) > 1e-5);
}

TEST_CASE("GLU: the first half times the activation of the second, on the last dimension") {
    // x = [a | b] with a = (1, 2), b = (3, -1): x1 · act(x2).
    const auto x = at::tensor(std::vector<double>{1.0, 2.0, 3.0, -1.0}, at::TensorOptions().dtype(at::kDouble)).view({1, 4});
    auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
    auto gelu = [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); };
    const auto sw = mlp_activation(x, Activation::Gelu, Glu::SwiGLU).view({-1});
    REQUIRE(sw.size(0) == 2);
    CHECK(at1(sw, 0) == doctest::Approx(1.0 * silu(3.0)));
    CHECK(at1(sw, 1) == doctest::Approx(2.0 * silu(-1.0)));
    const auto ge = mlp_activation(x, Activation::Gelu, Glu::GeGLU).view({-1});
    CHECK(at1(ge, 0) == doctest::Approx(gelu(3.0)));
    CHECK(at1(ge, 1) == doctest::Approx(2.0 * gelu(-1.0)));
    const auto re = mlp_activation(x, Activation::Gelu, Glu::ReGLU).view({-1});
    CHECK(at1(re, 0) == doctest::Approx(3.0));
    CHECK(at1(re, 1) == doctest::Approx(0.0));
    const auto li = mlp_activation(x, Activation::Gelu, Glu::LiGLU).view({-1});
    CHECK(at1(li, 0) == doctest::Approx(3.0));
    CHECK(at1(li, 1) == doctest::Approx(-2.0));
}

TEST_CASE("--glu-activation names and the fused bias GeLU refusal") {
    CHECK(glu_from_name("swiglu") == Glu::SwiGLU);
    CHECK(std::string(glu_name(Glu::GeGLU)) == "geglu");
    CHECK_THROWS_WITH_AS(glu_from_name("gelu"), doctest::Contains("expected one of geglu, liglu, reglu, swiglu"), mds::UsageError);
    auto c = tiny();
    c.glu = Glu::SwiGLU;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("needs --no-bias-gelu-fusion"), mds::UsageError);
    c.activation = Activation::Gelu;
    c.validate();
}

TEST_CASE("parameter shapes with --glu-activation and --kv-channels") {
    auto c = tiny();
    c.activation = Activation::Gelu;
    c.glu = Glu::SwiGLU;
    c.kv_channels = 6;  // projection 24 ≠ hidden 16
    GptModel m(c, at::kCPU, 1);
    const int layer = transformer_layer_index(0);
    CHECK(has_shape(m.parameter(layer, "mlp.dense_h_to_4h.weight"), 48, 16));
    CHECK(m.parameter(layer, "mlp.dense_h_to_4h.bias").tensor.size(0) == 48);
    CHECK(has_shape(m.parameter(layer, "mlp.dense_4h_to_h.weight"), 16, 24));
    CHECK(has_shape(m.parameter(layer, "self_attention.query_key_value.weight"), 72, 16));
    CHECK(has_shape(m.parameter(layer, "self_attention.dense.weight"), 16, 24));
    const auto tokens = at::arange(16, at::TensorOptions().dtype(at::kLong)).remainder(32).view({2, 8});
    const auto loss = m.loss(tokens, tokens);
    CHECK(std::isfinite(loss.item<double>()));
    // kv-channels frees hidden from dividing by the heads, as in Megatron.
    auto odd = tiny();
    odd.num_attention_heads = 5;
    CHECK_THROWS_AS(odd.validate(), mds::UsageError);
    odd.kv_channels = 4;
    odd.validate();
}

TEST_CASE("--apply-residual-connection-post-layernorm changes the function, not the parameters") {
    auto c = tiny();
    GptModel pre(c, at::kCPU, 7);
    c.residual_post_layernorm = true;
    GptModel post(c, at::kCPU, 7);
    REQUIRE(pre.parameter_count() == post.parameter_count());
    const auto tokens = at::arange(16, at::TensorOptions().dtype(at::kLong)).remainder(32).view({2, 8});
    const double a = pre.loss(tokens, tokens).item<double>(), b = post.loss(tokens, tokens).item<double>();
    CHECK(std::isfinite(b));
    CHECK(std::abs(a - b) > 1e-6);
}

TEST_CASE("--fp32-residual-connection: fp32 hidden states between the blocks, half-precision LayerNorm outputs") {
    auto c = tiny();
    c.precision = Precision::FP32;
    c.fp32_residual = true;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("needs --fp16 or --bf16"), mds::UsageError);
    c.precision = Precision::BF16;
    GptModel fp32_res(c, at::kCPU, 3);
    c.fp32_residual = false;
    GptModel plain(c, at::kCPU, 3);
    const auto x = at::randn({2, 8, 16}, at::TensorOptions().dtype(at::kFloat));
    // A block keeps the residual stream in the dtype it receives: fp32 in, fp32 out.
    CHECK((fp32_res.block_forward(0, x, {}).scalar_type() == at::kFloat));
    CHECK((plain.block_forward(0, x.to(at::kBFloat16), {}).scalar_type() == at::kBFloat16));
    const auto tokens = at::arange(16, at::TensorOptions().dtype(at::kLong)).remainder(32).view({2, 8});
    const double a = fp32_res.loss(tokens, tokens).item<double>(), b = plain.loss(tokens, tokens).item<double>();
    CHECK(std::isfinite(a));
    CHECK(a != b);  // the bf16 residual sums round, the fp32 ones do not
}

TEST_CASE("position ids (--reset-position-ids): index the absolute position embeddings; ALiBi ignores them") {
    const auto tokens = at::arange(16, at::TensorOptions().dtype(at::kLong)).remainder(32).view({2, 8});
    const auto plain = at::arange(8, at::TensorOptions().dtype(at::kLong)).repeat({2, 1});
    // Sample 0 restarts after position 3 (an EOD there); sample 1 keeps 0 … 7.
    const auto reset = at::tensor(std::vector<std::int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7}, at::kLong).view({2, 8});
    auto c = tiny();
    GptModel m(c, at::kCPU, 3);
    const double none = m.loss(tokens, tokens).item<double>();
    DOCTEST_CHECK(m.loss(tokens, tokens, {}, plain).item<double>() == none);  // 0 … s-1 is the default
    DOCTEST_CHECK(std::abs(m.loss(tokens, tokens, {}, reset).item<double>() - none) > 1e-6);
    // Only the positions whose ids change see another input: sample 1's logits and sample 0's first half stay.
    const auto a = m.logits(tokens), b = m.logits(tokens, reset);
    DOCTEST_CHECK(at::allclose(a[1], b[1]));
    DOCTEST_CHECK(at::allclose(a[0].narrow(0, 0, 4), b[0].narrow(0, 0, 4)));
    DOCTEST_CHECK(!at::allclose(a[0].narrow(0, 4, 4), b[0].narrow(0, 4, 4)));
    DOCTEST_CHECK_THROWS_AS(m.loss(tokens, tokens, {}, plain.narrow(1, 0, 4)), mds::Error);
    c.position_embedding = PositionEmbedding::Alibi;
    GptModel alibi(c, at::kCPU, 3);
    DOCTEST_CHECK(alibi.loss(tokens, tokens, {}, reset).item<double>() == alibi.loss(tokens, tokens).item<double>());
}

namespace {

// `fused` (a flag on) gives `plain`'s loss and gradients on random tokens and labels, with and without a loss mask.
void check_same_loss_and_grads(GptModel& plain, GptModel& fused) {
    at::manual_seed(3);
    const auto tokens = at::randint(0, 32, {2, 8}, at::kLong);
    const auto labels = at::randint(0, 32, {2, 8}, at::kLong);
    const auto pos = at::arange(8, at::kLong).unsqueeze(0).expand({2, 8});
    auto mask = at::ones({2, 8});
    mask[1][3] = 0;
    for (const auto& m : {at::Tensor(), mask}) {
        auto a = plain.loss(tokens, labels, m, pos, {});
        auto b = fused.loss(tokens, labels, m, pos, {});
        CHECK(b.item<double>() == doctest::Approx(a.item<double>()).epsilon(1e-6));
        a.backward();
        b.backward();
        for (std::size_t i = 0; i < plain.parameters().size(); ++i) {
            INFO(plain.parameters()[i].full_name());
            const auto& ga = plain.parameters()[i].tensor.grad();
            const auto& gb = fused.parameters()[i].tensor.grad();
            CHECK(at::allclose(ga, gb, 1e-5, 1e-7));
        }
        for (auto* model : {&plain, &fused})
            for (auto& p : model->parameters()) p.tensor.mutable_grad().reset();
    }
}

}  // namespace

TEST_CASE("--cross-entropy-loss-fusion: the model's loss and gradients as without it; fp16 and TP > 1 refused") {
    auto c = tiny();
    GptModel plain(c, c10::Device(at::kCPU), 5);
    c.cross_entropy_fusion = true;
    GptModel fused(c, c10::Device(at::kCPU), 5);
    check_same_loss_and_grads(plain, fused);
    c.precision = Precision::FP16;
    CHECK_THROWS_WITH_AS(GptModel(c, c10::Device(at::kCPU), 5), doctest::Contains("not --fp16"), mds::UsageError);
    c.precision = Precision::FP32;
    TensorParallel tp{0, 2, [](at::Tensor&) {}, [](at::Tensor&) {}};
    CHECK_THROWS_WITH_AS(GptModel(c, c10::Device(at::kCPU), 5, tp),
                         doctest::Contains("--cross-entropy-loss-fusion: not with --tensor-model-parallel-size 2"),
                         mds::UsageError);
}

namespace {

// The model of `c` with GptConfig's `flag` on has the loss and gradients of the model without it.
void check_same_with(bool mds::model::GptConfig::*flag, GptConfig c, std::uint64_t seed) {
    c.*flag = false;
    GptModel plain(c, c10::Device(at::kCPU), seed);
    c.*flag = true;
    GptModel fused(c, c10::Device(at::kCPU), seed);
    check_same_loss_and_grads(plain, fused);
}

// A fusion of the LayerNorms (GptConfig's `flag`, mds-train's `name`): the model's loss and gradients as without it,
// with the pre- and the post-LayerNorm residual; fp16 refused.
void check_layer_norm_fusion(bool mds::model::GptConfig::*flag, const std::string& name) {
    auto c = tiny();
    for (bool post : {false, true}) {
        INFO(name << ", post-LayerNorm residual " << post);
        c.residual_post_layernorm = post;
        check_same_with(flag, c, 5);
    }
    c.*flag = true;
    c.precision = Precision::FP16;
    const std::string refused = name + " takes fp32 or bf16, not --fp16";
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains(refused.c_str()), mds::UsageError);
}

}  // namespace

TEST_CASE("--layernorm-backward-fusion: the model's loss and gradients as without it, post-LayerNorm too; fp16 refused") {
    check_layer_norm_fusion(&mds::model::GptConfig::layernorm_backward_fusion, "--layernorm-backward-fusion");
}

TEST_CASE("--residual-layernorm-fusion: the model's loss and gradients as without it, post-LayerNorm too; fp16 refused") {
    check_layer_norm_fusion(&mds::model::GptConfig::residual_layernorm_fusion, "--residual-layernorm-fusion");
}

TEST_CASE("--bias-grad-fusion: the model's loss and gradients as without it; fp16 refused") {
    auto c = tiny();
    check_same_with(&GptConfig::bias_grad_fusion, c, 6);
    c.bias_grad_fusion = true;
    c.precision = Precision::FP16;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--bias-grad-fusion takes fp32 or bf16, not --fp16"), mds::UsageError);
}

TEST_CASE("--gelu-epilogue-fusion: the model's loss and gradients as without it, with --bias-grad-fusion too; refused "
          "with fp16, another activation, a GLU and TP > 1") {
    for (bool bias_grad : {false, true}) {
        INFO("--bias-grad-fusion " << bias_grad);
        auto c = tiny();
        c.bias_grad_fusion = bias_grad;
        check_same_with(&GptConfig::gelu_epilogue_fusion, c, 7);
    }
    auto c = tiny();
    c.gelu_epilogue_fusion = true;
    c.precision = Precision::FP16;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--gelu-epilogue-fusion takes fp32 or bf16, not --fp16"), mds::UsageError);
    c.precision = Precision::FP32;
    c.activation = Activation::Gelu;  // --no-bias-gelu-fusion
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--gelu-epilogue-fusion fuses the bias GeLU"), mds::UsageError);
    c.glu = Glu::GeGLU;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("not with --glu-activation"), mds::UsageError);
    c.glu = Glu::None;
    c.activation = Activation::FusedGelu;
    TensorParallel tp{0, 2, [](at::Tensor&) {}, [](at::Tensor&) {}};
    CHECK_THROWS_WITH_AS(GptModel(c, c10::Device(at::kCPU), 5, tp),
                         doctest::Contains("--gelu-epilogue-fusion: not with --tensor-model-parallel-size 2"), mds::UsageError);
}
