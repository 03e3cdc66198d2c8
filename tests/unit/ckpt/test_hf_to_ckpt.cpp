// mds-hf-to-ckpt's pure parts (the Hugging Face <-> Megatron name map, the QKV row order, the
// vocabulary padding) and a whole conversion of a tiny GPT2 folder written here, read back with
// TorchFile: TP shards, QKV rows, zero padding rows, the args and the refusals.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "mds/ckpt/ds_layout.h"
#include "mds/ckpt/hf_folder.h"
#include "mds/ckpt/hf_megatron_map.h"
#include "mds/ckpt/hf_to_ckpt.h"
#include "mds/ckpt/safetensors.h"
#include "mds/ckpt/torch_file.h"
#include "mds/util/error.h"
#include "test_support.h"

using namespace mds::ckpt;
namespace fs = std::filesystem;

TEST_CASE("Hugging Face names map to Megatron's places and back") {
    const auto qkv = megatron_place(HfArchitecture::Gpt2, "transformer.h.11.attn.c_attn.weight");
    REQUIRE(qkv);
    CHECK(qkv->part == MegatronPart::Block);
    CHECK(qkv->block == 11);
    CHECK(qkv->name == "self_attention.query_key_value.weight");
    CHECK(qkv->layout == HfLayout::QkvTranspose);
    // GPT2Model saved alone (the original gpt2 pytorch_model.bin): no "transformer." prefix.
    CHECK(megatron_place(HfArchitecture::Gpt2, "h.11.attn.c_attn.weight") == qkv);
    CHECK(megatron_place(HfArchitecture::Gpt2, "h.0.attn.c_attn.bias")->layout == HfLayout::Qkv);
    CHECK(megatron_place(HfArchitecture::Gpt2, "h.0.mlp.c_proj.weight")->name == "mlp.dense_4h_to_h.weight");
    CHECK(megatron_place(HfArchitecture::Gpt2, "h.0.mlp.c_proj.weight")->layout == HfLayout::Transpose);
    CHECK(megatron_place(HfArchitecture::Gpt2, "h.0.attn.c_proj.bias")->layout == HfLayout::Same);
    CHECK(megatron_place(HfArchitecture::Gpt2, "wte.weight")->name == "word_embeddings.weight");
    CHECK(megatron_place(HfArchitecture::Gpt2, "transformer.wpe.weight")->name == "position_embeddings.weight");
    CHECK(megatron_place(HfArchitecture::Gpt2, "transformer.ln_f.bias")->part == MegatronPart::FinalNorm);
    // BLOOM keeps Megatron's names and layouts.
    const auto b = megatron_place(HfArchitecture::Bloom, "transformer.h.3.self_attention.query_key_value.weight");
    REQUIRE(b);
    CHECK(b->layout == HfLayout::Same);
    CHECK(megatron_place(HfArchitecture::Bloom, "transformer.word_embeddings_layernorm.bias")->name == "word_embeddings.norm.bias");
    // Not parameters: other architectures' names, buffers, the LM head, malformed block numbers.
    CHECK_FALSE(megatron_place(HfArchitecture::Bloom, "transformer.wte.weight"));
    CHECK_FALSE(megatron_place(HfArchitecture::Gpt2, "transformer.word_embeddings.weight"));
    CHECK_FALSE(megatron_place(HfArchitecture::Gpt2, "lm_head.weight"));
    CHECK_FALSE(megatron_place(HfArchitecture::Gpt2, "transformer.h.0.attn.bias"));
    CHECK_FALSE(megatron_place(HfArchitecture::Gpt2, "transformer.h.01.ln_1.weight"));
    CHECK_FALSE(megatron_place(HfArchitecture::Gpt2, "transformer.h.-1.ln_1.weight"));
    CHECK_FALSE(megatron_place(HfArchitecture::Gpt2, "transformer.h.0.crossattention.c_attn.weight"));
    CHECK(hf_is_buffer(HfArchitecture::Gpt2, "transformer.h.2.attn.masked_bias"));
    CHECK(hf_is_buffer(HfArchitecture::Gpt2, "h.2.attn.bias"));
    CHECK_FALSE(hf_is_buffer(HfArchitecture::Bloom, "h.2.attn.bias"));
    // Every parameter's name maps back to its place, in the layer-file order Megatron saves.
    for (const auto arch : {HfArchitecture::Gpt2, HfArchitecture::Bloom}) {
        const auto params = megatron_parameters(arch, 3);
        CHECK(params.size() == (arch == HfArchitecture::Gpt2 ? 2u : 3u) + 3 * 12 + 2);
        int last_layer = 0;
        for (const auto& p : params) {
            CHECK(megatron_place(arch, hf_name_of(arch, p)) == p);
            CHECK(megatron_layer_index(p, 3) >= last_layer);
            last_layer = megatron_layer_index(p, 3);
        }
        CHECK(megatron_layer_index(params.front(), 3) == 1);
        CHECK(megatron_layer_index(params[params.size() - 3], 3) == 5);  // the last block's last tensor
        CHECK(megatron_layer_index(params.back(), 3) == 7);
    }
}

TEST_CASE("shapes: Conv1D weights are [in, out], Megatron's Linear [out, in]") {
    const HfModelSizes s{16, 4, 40, 100, 32};
    const MegatronPlace qkv{MegatronPart::Block, 0, "self_attention.query_key_value.weight", HfLayout::QkvTranspose};
    CHECK(megatron_shape(qkv, s) == std::vector<std::int64_t>{48, 16});
    CHECK(hf_shape(qkv, s) == std::vector<std::int64_t>{16, 48});
    const MegatronPlace h4h{MegatronPart::Block, 0, "mlp.dense_h_to_4h.weight", HfLayout::Transpose};
    CHECK(hf_shape(h4h, s) == std::vector<std::int64_t>{16, 40});
    const MegatronPlace bloom_h4h{MegatronPart::Block, 0, "mlp.dense_h_to_4h.weight", HfLayout::Same};
    CHECK(hf_shape(bloom_h4h, s) == std::vector<std::int64_t>{40, 16});
    CHECK(megatron_shape({MegatronPart::Embedding, -1, "position_embeddings.weight", HfLayout::Same}, s) == std::vector<std::int64_t>{32, 16});
}

TEST_CASE("QKV rows: Megatron's [heads, 3, d] from GPT2's [3, heads, d], the inverse of mds-ckpt-to-hf's reorder") {
    for (const auto& [heads, d] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {4, 8}, {6, 4}, {3, 5}}) {
        std::set<std::int64_t> seen;
        for (std::int64_t head = 0; head < heads; ++head)
            for (std::int64_t c = 0; c < 3; ++c)
                for (std::int64_t e = 0; e < d; ++e) {
                    const std::int64_t megatron = (head * 3 + c) * d + e, hf = (c * heads + head) * d + e;
                    CHECK(hf_qkv_row(megatron, heads, d) == hf);
                    seen.insert(hf_qkv_row(megatron, heads, d));
                }
        CHECK(static_cast<std::int64_t>(seen.size()) == 3 * heads * d);  // a permutation
    }
}

TEST_CASE("vocabulary padded as Megatron's _vocab_size_with_padding") {
    CHECK(megatron_padded_vocab(50257, 128, 1) == 50304);
    CHECK(megatron_padded_vocab(50257, 128, 2) == 50432);
    CHECK(megatron_padded_vocab(50257, 128, 4) == 50688);
    CHECK(megatron_padded_vocab(250880, 128, 4) == 250880);  // BLOOM's: already a multiple of 512
    CHECK(megatron_padded_vocab(1000, 1, 3) == 1002);
    CHECK(megatron_padded_vocab(1024, 128, 1) == 1024);
    CHECK_THROWS_AS(megatron_padded_vocab(100, 0, 1), mds::UsageError);
    CHECK_THROWS_AS(megatron_padded_vocab(100, 128, 0), mds::UsageError);
}

namespace {

// A GPT2 folder: config.json and model.safetensors with element i of every tensor = base + i.
constexpr std::int64_t kH = 8, kHeads = 2, kF = 16, kV = 10, kP = 4, kL = 2;

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }

std::string gpt2_config(const std::string& extra = "") {
    return "{\"model_type\": \"gpt2\", \"vocab_size\": " + std::to_string(kV) + ", \"n_positions\": " + std::to_string(kP) +
           ", \"n_embd\": " + std::to_string(kH) + ", \"n_layer\": " + std::to_string(kL) + ", \"n_head\": " + std::to_string(kHeads) +
           ", \"n_inner\": " + std::to_string(kF) + ", \"activation_function\": \"gelu_new\"" + extra + "}";
}

fs::path make_gpt2(const fs::path& dir, bool drop_one = false) {
    fs::create_directories(dir);
    write_text(dir / "config.json", gpt2_config());
    const HfModelSizes sizes{kH, kHeads, kF, kV, kP};
    std::vector<std::vector<float>> data;
    std::vector<TensorToWrite> tensors;
    auto params = megatron_parameters(HfArchitecture::Gpt2, kL);
    if (drop_one) params.pop_back();
    data.reserve(params.size() + 1);
    float base = 0;
    for (const auto& p : params) {
        const auto shape = hf_shape(p, sizes);
        std::int64_t n = 1;
        for (auto d : shape) n *= d;
        data.emplace_back(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) data.back()[static_cast<std::size_t>(i)] = base + static_cast<float>(i);
        base += 1000;
        tensors.push_back({hf_name_of(HfArchitecture::Gpt2, p), DType::F32, shape, data.back().data()});
    }
    data.emplace_back(static_cast<std::size_t>(kP * kP), 1.0f);  // an old transformers' causal-mask buffer
    tensors.push_back({"transformer.h.0.attn.bias", DType::F32, {1, 1, kP, kP}, data.back().data()});
    write_safetensors((dir / "model.safetensors").string(), tensors);
    return dir;
}

std::vector<float> floats(const TorchFile& f, const std::string& name) {
    const auto t = f.tensor(*f.root().ordered_dict_items().find(name), name);
    const auto b = t.gather();
    std::vector<float> out(b.size() / 4);
    std::memcpy(out.data(), b.data(), b.size());
    return out;
}

}  // namespace

TEST_CASE("a GPT2 folder converts to TP 2 x PP 2 shards with Megatron's layouts") {
    const auto dir = mds::test::scratch_dir("hf2ck");
    const auto hf = make_gpt2(dir / "hf");
    HfToCkptOptions o;
    o.target_tp = 2;
    o.target_pp = 2;
    o.make_vocab_size_divisible_by = 4;  // 10 tokens -> 16 rows at TP 2
    o.workers = 2;
    const auto r = convert_hf_to_ckpt(hf.string(), (dir / "ck").string(), o);
    CHECK(r.padded_vocab_size == 16);
    CHECK(r.stages == std::vector<std::vector<int>>{{1, 3}, {4, 6}});
    const fs::path tag = dir / "ck" / kHfToCkptTag;
    CHECK(read_latest_tag((dir / "ck").string()) == std::string(kHfToCkptTag));
    // Word embedding rows 0-7 on rank 0, 8-9 then 6 zero rows on rank 1.
    const TorchFile e1((tag / ds_layer_file(1, 1)).string());
    const auto w1 = floats(e1, "word_embeddings.weight");
    REQUIRE(w1.size() == 8 * kH);
    CHECK(w1[0] == 8 * kH);
    CHECK(w1[2 * kH - 1] == 10 * kH - 1);
    for (std::size_t i = 2 * kH; i < w1.size(); ++i) CHECK(w1[i] == 0.0f);
    // QKV rows of rank 0: its head 0, as [q, k, v] of that head; Conv1D columns become rows.
    const TorchFile b0((tag / ds_layer_file(3, 0)).string());
    const auto q = floats(b0, "self_attention.query_key_value.weight");  // [3 * 4, 8] of the [24, 8] global
    REQUIRE(q.size() == 12 * kH);
    const std::int64_t d = kH / kHeads;
    const float c_attn = 4000;  // wte 0, wpe 1000, ln_1 2000 / 3000, c_attn.weight 4000
    for (std::int64_t r_ = 0; r_ < 3 * d; ++r_)
        for (std::int64_t col = 0; col < kH; ++col) {
            // Megatron row r_ of head 0 = HF column hf_qkv_row(r_) of c_attn.weight [8, 24].
            const float want = c_attn + static_cast<float>(col * 3 * kH + hf_qkv_row(r_, kHeads, d));
            CHECK(q[static_cast<std::size_t>(r_ * kH + col)] == want);
        }
    // mp_rank files: stage 1's rank 1 is mp_rank_03, with the args Megatron would have had.
    const TorchFile mp((tag / ds_mp_rank_file(3)).string());
    CHECK(mp.root().get("mp_world_size").as_int() == 4);
    CHECK(mp.root().get(kHfVocabSizeKey).as_int() == kV);
    const auto& args = mp.root().get("args").namespace_attributes();
    CHECK(args.find("padded_vocab_size")->as_int() == 16);
    CHECK(args.find("make_vocab_size_divisible_by")->as_int() == 4);
    CHECK(args.find("bias_gelu_fusion")->as_bool() == false);  // gelu_new: --openai-gelu
    CHECK(args.find("openai_gelu")->as_bool() == true);
    CHECK(args.find("tensor_model_parallel_size")->as_int() == 2);
    CHECK(args.find("position_embedding_type")->is_object("megatron.enums", "PositionEmbeddingType"));
    // Again into the same place: refused without --overwrite, replaced with it.
    CHECK_THROWS_WITH_AS(convert_hf_to_ckpt(hf.string(), (dir / "ck").string(), o), doctest::Contains("--overwrite"), mds::Error);
    o.overwrite = true;
    o.target_pp = 1;
    CHECK_NOTHROW(convert_hf_to_ckpt(hf.string(), (dir / "ck").string(), o));
    CHECK_FALSE(fs::exists(tag / ds_mp_rank_file(3)));
    fs::remove_all(dir);
}

TEST_CASE("refusals name the file and what was expected, and leave nothing behind") {
    const auto dir = mds::test::scratch_dir("hf2ck-bad");
    HfToCkptOptions o;
    o.workers = 1;
    const auto out = (dir / "out").string();
    const auto refused = [&](const fs::path& hf, const std::string& message) {
        CHECK_THROWS_WITH_AS(convert_hf_to_ckpt(hf.string(), out, o), doctest::Contains(message.c_str()), mds::Error);
        CHECK_FALSE(fs::exists(out));
        for (const auto& e : fs::directory_iterator(dir)) CHECK_MESSAGE(e.path().filename().string().find(".out.tmp") == std::string::npos, e.path());
    };
    fs::create_directories(dir / "empty");
    refused(dir / "empty", "config.json: no such file");
    const auto hf = make_gpt2(dir / "hf");
    write_text(hf / "config.json", "{\"model_type\": \"llama\"}");
    refused(hf, "model_type \"llama\"");
    write_text(hf / "config.json", gpt2_config(", \"n_embd\": 9"));
    refused(hf, "not a multiple of the 2 attention heads");
    write_text(hf / "config.json", gpt2_config(", \"tie_word_embeddings\": false"));
    refused(hf, "tie_word_embeddings false");
    write_text(hf / "config.json", gpt2_config(", \"activation_function\": \"relu\""));
    refused(hf, "activation_function 'relu'");
    write_text(hf / "config.json", gpt2_config(", \"n_inner\": 12"));
    refused(hf, "has shape [8, 16]; config.json");
    write_text(hf / "config.json", gpt2_config());
    o.target_tp = 4;
    refused(hf, "2 attention heads do not split over --target-tp 4");
    o.target_tp = 1;
    o.target_pp = 3;
    refused(hf, "cannot fill --target-pp 3");
    o.target_pp = 1;
    const auto short_hf = make_gpt2(dir / "short", /*drop_one=*/true);
    refused(short_hf, "missing: 'transformer.ln_f.bias'");
    // A truncated safetensors file.
    const auto st = hf / "model.safetensors";
    fs::resize_file(st, fs::file_size(st) - 3);
    refused(hf, "model.safetensors");
    // A .bin that is not a torch.save zip (the legacy format starts with a pickle).
    fs::remove(st);
    write_text(hf / "pytorch_model.bin", std::string("\x80\x02\x8a\x0alegacy", 10));
    refused(hf, "legacy torch.save format");
    fs::remove_all(dir);
}
