// The checkpoint's `args` Namespace (libcore/src/trainer/megatron_args.cpp) for three flag sets,
// compared key by key, in order, with a golden dump (megatron_args_golden.txt beside this file) taken
// from the code before the flag table drove it: the real Megatron-DeepSpeed and the crosscheck
// tests unpickle these values, so their names, Python types and order must not drift.
// MDS_WRITE_GOLDEN=1 rewrites the golden file from the code under test.
#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../../libcore/src/trainer/megatron_args.h"  // private to the trainer area
#include "mds/model/gpt_model.h"
#include "tiny_gpt.h"
#include "train_flags_support.h"
#include "mds/flags/train_args.h"
#include "mds/util/files.h"  // remove_tree: std::filesystem::remove_all resolves into libtorch's copy and crashes

namespace fs = std::filesystem;

namespace {

const fs::path kGolden = fs::path(__FILE__).parent_path() / "megatron_args_golden.txt";

mds::flags::TrainArgs parse(std::vector<std::string> argv, std::int64_t world_size) {
    return mds::trainer_test::parse_train_flags(std::move(argv), true, world_size);
}

// One line per attribute, "key = repr", mds_version left out (it follows the release).
std::string dump(const std::string& name, const mds::flags::TrainArgs& args, bool embed_layernorm) {
    const mds::model::GptModel model(tiny_gpt(embed_layernorm), c10::Device(at::kCPU), 42);
    mds::trainer::TrainingProgress p;
    p.iteration = 7;
    p.consumed_train_samples = 56;
    p.consumed_valid_samples = 16;
    p.consumed_train_tokens = 3584;
    p.gigaflos_no_embeds = 1.5;
    p.train_iters = 10;
    p.do_valid = true;
    const auto ns = mds::trainer::megatron_args(args, model, p);
    std::ostringstream out;
    out << "## " << name << "\n";
    for (const auto& [key, value] : ns.namespace_attributes().items())
        if (key.as_str() != "mds_version") out << key.as_str() << " = " << value.repr() << "\n";
    return out.str();
}

std::string all_dumps() {
    const fs::path dir = fs::temp_directory_path() / ("mds-test-golden-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string ds = (dir / "ds.json").string();
    std::ofstream(ds) << R"({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 8, "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 1}, "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 500,
        "hysteresis": 2, "min_loss_scale": 1, "initial_scale_power": 12}, "steps_per_print": 2000})";
    std::string text;
    // tr1-13B's shape: GPT-2 tokenizer, fp16 under DeepSpeed, iterations, one dataset.
    text += dump("tr1-13B", parse({"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                   "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "1",
                                   "--global-batch-size", "8", "--train-iters", "10", "--lr", "1e-4", "--min-lr",
                                   "1e-5", "--lr-decay-style", "cosine", "--lr-decay-iters", "8", "--lr-warmup-iters",
                                   "2", "--clip-grad", "1.0", "--weight-decay", "1e-1", "--adam-beta1", "0.9",
                                   "--adam-beta2", "0.999", "--adam-eps", "1e-8", "--fp16", "--loss-scale", "12",
                                   "--data-path", "/d/meg-gpt2_text_document", "--vocab-file", "/t/vocab.json",
                                   "--merge-file", "/t/merges.txt", "--split", "949,50,1", "--save", "/c", "--load",
                                   "/c", "--save-interval", "5", "--tensorboard-dir", "/tb", "--log-interval", "1",
                                   "--eval-interval", "5", "--eval-iters", "2", "--deepspeed", "--deepspeed_config",
                                   ds, "--zero-stage", "1", "--deepspeed-activation-checkpointing",
                                   "--checkpoint-activations", "--kill-switch-path", "/k", "--seed", "42",
                                   "--exit-duration-in-mins", "1190", "--log-params-norm", "--num-workers", "3"},
                                  8),
                 false);
    // tr11-176B's shape: BLOOM, bf16, samples, ramp-up, blended data, HF tokenizer, loss-scale flags given.
    text += dump("tr11-176B", parse({"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                     "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "1",
                                     "--global-batch-size", "16", "--rampup-batch-size", "4", "4", "1_000",
                                     "--train-samples", "5_000", "--lr", "6e-5", "--lr-decay-samples", "4000",
                                     "--lr-warmup-samples", "100", "--bf16", "--position-embedding-type", "alibi",
                                     "--embed-layernorm", "--pad-vocab-size-to", "512", "--tokenizer-type",
                                     "PretrainedFromHF", "--tokenizer-name-or-path", "bigscience/tokenizer",
                                     "--data-path", "0.7", "/d/en", "0.3", "/d/fr", "--initial-loss-scale", "4096",
                                     "--min-loss-scale", "2", "--loss-scale-window", "200", "--hysteresis", "3",
                                     "--no-save-optim", "--no-load-rng", "--pp-partition-method", "type:transformer",
                                     "--log-level", "info", "--log-level-replica", "error", "--codecarbon-dir", "/cc",
                                     "--no-log-learnig-rate-to-tensorboard", "--sync-tp-duplicated-parameters",
                                     "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                                     "--distributed-backend", "gloo", "--optimizer", "adam", "--init-method-std",
                                     "0.0048", "--ffn-hidden-size", "256"},
                                    16),
                 true);
    // Data loading Mode 2 (weighted split paths), defaults elsewhere.
    text += dump("mode2", parse({"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                 "--seq-length", "64", "--max-position-embeddings", "64", "--train-iters", "3",
                                 "--lr", "1e-3", "--train-weighted-split-paths", "TRAIN: 0.6 0:0.9 /d/a, 0.4 0:0.9 /d/b",
                                 "--valid-weighted-split-paths", "VA: 1 0.9:1 /d/a", "VB: 1 0.9:1 /d/b"},
                                1),
                 false);
    mds::remove_tree(dir.string());
    // The config's path differs from run to run.
    for (auto at = text.find(ds); at != std::string::npos; at = text.find(ds)) text.replace(at, ds.size(), "DS_JSON");
    return text;
}

}  // namespace

TEST_CASE("megatron_args: the checkpoint's args Namespace keeps its keys, order, types and values") {
    const std::string text = all_dumps();
    if (std::getenv("MDS_WRITE_GOLDEN")) {
        std::ofstream(kGolden) << text;
        return;
    }
    std::ifstream in(kGolden);
    DOCTEST_REQUIRE_MESSAGE(in.good(), "missing " << kGolden.string());
    std::stringstream golden;
    golden << in.rdbuf();
    // Line by line, so a failure names the attribute that drifted.
    std::istringstream want(golden.str()), got(text);
    std::string w, g;
    int line = 0;
    while (true) {
        const bool more_w = static_cast<bool>(std::getline(want, w));
        const bool more_g = static_cast<bool>(std::getline(got, g));
        ++line;
        if (!more_w && !more_g) break;
        DOCTEST_CHECK_MESSAGE(w == g, "line " << line << ": golden `" << w << "`, now `" << g << "`");
        if (w != g) break;
    }
}

TEST_CASE("megatron_args_lines: parse_args' arguments block, its values as parsed") {
    const auto args = parse({"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
                             "--max-position-embeddings", "64", "--micro-batch-size", "1", "--global-batch-size", "8",
                             "--train-iters", "10", "--lr", "1e-4", "--data-path", "/d/x_text_document", "--vocab-file",
                             "/t/vocab.json", "--merge-file", "/t/merges.txt", "--local_rank", "3"},
                            8);
    const mds::model::GptModel model(tiny_gpt(false), c10::Device(at::kCPU), 42);
    const auto lines = mds::trainer::megatron_args_lines(args, model);
    DOCTEST_REQUIRE(lines.size() > 100);
    DOCTEST_CHECK(lines.front() == "------------------------ arguments ------------------------");
    DOCTEST_CHECK(lines.back() == "-------------------- end of arguments ---------------------");
    const auto has = [&](const std::string& line) { return std::find(lines.begin(), lines.end(), line) != lines.end(); };
    // "  key", dots to column 50, the value as Python's str(); sorted as Python sorts the lines lowercased.
    DOCTEST_CHECK(has("  hidden_size ..................................... 64"));
    DOCTEST_CHECK(has("  data_path ....................................... ['/d/x_text_document']"));
    DOCTEST_CHECK(has("  world_size ...................................... 8"));
    // As parse_args leaves them: --local_rank as given, the decay length not yet filled in, gigaflos an int.
    DOCTEST_CHECK(has("  local_rank ...................................... 3"));
    DOCTEST_CHECK(has("  lr_decay_iters .................................. None"));
    DOCTEST_CHECK(has("  gigaflos_no_embeds .............................. 0"));
    for (std::size_t i = 2; i + 1 < lines.size(); ++i) {
        std::string a = lines[i - 1], b = lines[i];
        for (auto* s : {&a, &b})
            for (auto& c : *s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        DOCTEST_CHECK_MESSAGE(a <= b, "out of order: " << lines[i - 1] << " / " << lines[i]);
    }
    // pretrain(), the tokenizer and mds add these later: not in the block.
    for (const char* key : {"  iteration ", "  padded_vocab_size ", "  do_train ", "  mds_version ", "  data_prefixes "})
        DOCTEST_CHECK_MESSAGE(std::none_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(key, 0) == 0; }),
                              key);
}
