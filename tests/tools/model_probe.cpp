// model_probe: runs mds's GPT model on given weights and tokens for tests/crosscheck/test_model_hf.py.
//   model_probe --weights W.safetensors --inputs I.safetensors --out O.safetensors [model flags]
// W holds every parameter under its full name ("03.self_attention.query_key_value.weight");
// I holds "tokens" and "labels" (int64 [b, s]) and optionally "loss_mask" (float [b, s]), and for packed
// rows "position_ids" and "segment_ids" (int64 [b, s]: attention within each segment).
// O receives "logits" (fp32), "loss" (fp32 scalar) and "grad.<full name>" for every parameter
// (fp32), computed in evaluation mode (no dropout).
// With --init-seed N and no --weights, the model is initialized from seed N and O receives the
// initial parameters under their full names instead.
#include <CLI/CLI.hpp>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>  // set_num_threads
#include <c10/core/GradMode.h>

#include <cstdio>
#include <exception>

#include "mds/model/gpt_model.h"
#include "mds/model/tensor_io.h"

int main(int argc, char** argv) {
    // One intra-op thread: the same bits every run. With two, under load, 1 run in 40 of test_hf_to_ckpt's
    // gelu_new model gave logits 3.2e-5 away from the other 39 (and from transformers'), the same other value each
    // time: LibTorch's CPU kernels split their work by the threads that join, and one split rounds differently
    // (never in 60 runs with one thread; 2026-12-01). The cross-checks compare to 1e-5.
    at::set_num_threads(1);
    CLI::App app{"model_probe"};
    mds::model::GptConfig cfg;
    std::string weights, inputs, out;
    bool alibi = false, bf16 = false, no_bias_gelu_fusion = false, openai_gelu = false;
    std::uint64_t init_seed = 0;
    app.add_option("--weights", weights);
    app.add_option("--inputs", inputs);
    app.add_option("--out", out)->required();
    app.add_option("--init-seed", init_seed);
    app.add_option("--num-layers", cfg.num_layers)->required();
    app.add_option("--hidden-size", cfg.hidden_size)->required();
    app.add_option("--ffn-hidden-size", cfg.ffn_hidden_size)->required();
    app.add_option("--num-attention-heads", cfg.num_attention_heads)->required();
    app.add_option("--seq-length", cfg.seq_length)->required();
    app.add_option("--max-position-embeddings", cfg.max_position_embeddings);
    app.add_option("--padded-vocab-size", cfg.padded_vocab_size)->required();
    app.add_option("--layernorm-epsilon", cfg.layernorm_epsilon);
    app.add_option("--init-method-std", cfg.init_method_std);
    app.add_flag("--alibi", alibi);
    app.add_flag("--embed-layernorm", cfg.embed_layernorm);
    app.add_flag("--checkpoint-activations", cfg.checkpoint_activations);
    app.add_option("--checkpoint-num-layers", cfg.checkpoint_num_layers);
    app.add_flag("--bf16", bf16);
    // Megatron's GeLU kinds (ParallelMLP's precedence) and residual order, for test_hf_to_ckpt.py.
    app.add_flag("--no-bias-gelu-fusion", no_bias_gelu_fusion);
    app.add_flag("--openai-gelu", openai_gelu);
    app.add_flag("--apply-residual-connection-post-layernorm", cfg.residual_post_layernorm);
    CLI11_PARSE(app, argc, argv);
    try {
        if (alibi) cfg.position_embedding = mds::model::PositionEmbedding::Alibi;
        if (bf16) cfg.precision = mds::model::Precision::BF16;
        if (no_bias_gelu_fusion) cfg.activation = openai_gelu ? mds::model::Activation::OpenAiGelu : mds::model::Activation::Gelu;
        mds::model::GptModel model(cfg, at::kCPU, init_seed);
        if (weights.empty()) {
            mds::model::save_tensors(out, mds::model::named_parameters(model));
            return 0;
        }
        mds::model::load_parameters(model, mds::ckpt::SafetensorsFile(weights));
        model.set_training(false);
        mds::ckpt::SafetensorsFile in(inputs);
        auto tokens = mds::model::to_tensor(in.at("tokens"));
        auto labels = mds::model::to_tensor(in.at("labels"));
        at::Tensor mask = in.contains("loss_mask") ? mds::model::to_tensor(in.at("loss_mask")) : at::Tensor();
        // Packed rows (--sft): position ids and segment ids [b, s] int64, when given.
        at::Tensor positions = in.contains("position_ids") ? mds::model::to_tensor(in.at("position_ids")) : at::Tensor();
        at::Tensor segments = in.contains("segment_ids") ? mds::model::to_tensor(in.at("segment_ids")) : at::Tensor();
        at::Tensor logits;
        {
            c10::NoGradGuard no_grad;
            logits = model.logits(tokens, positions, segments).to(at::kFloat);
        }
        auto loss = model.loss(tokens, labels, mask, positions, segments);
        loss.backward();
        std::vector<std::pair<std::string, at::Tensor>> result{{"logits", logits}, {"loss", loss.detach()}};
        for (const auto& p : model.parameters()) result.emplace_back("grad." + p.full_name(), p.tensor.grad().to(at::kFloat));
        mds::model::save_tensors(out, result);
        std::printf("loss %.8f\n", loss.item<double>());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "model_probe: error: %s\n", e.what());
        return 1;
    }
}
