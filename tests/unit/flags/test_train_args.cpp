// mds-train's flag layer (mds/flags/train_args.h, deepspeed_config.h) against the argument lists of
// BigScience's tr1-13B (train/tr1-13B-base/tr1-13B-round1.slurm) and tr11-176B
// (train/tr11-176B-ml/tr11-176B-ml.slurm), shell variables expanded to plausible paths.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "mds/flags/train_args.h"
#include "mds/util/error.h"
#include "test_support.h"
#include "flag_parse.h"

using mds::test::contains;

using namespace mds::flags;
using mds::flags_test::parse;

namespace {

std::string write_file(const std::string& name, const std::string& text) {
    static const auto dir = mds::test::scratch_dir("train-args");
    auto path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
}

std::string error_of_parse(std::vector<std::string> argv) {
    TrainArgs args;
    try {
        parse(args, std::move(argv));
    } catch (const CLI::ParseError& e) {
        return e.what();
    }
    return "";
}

// tr1-13B-round1.slurm (final version): ds_config.json with MICRO_BATCH_SIZE=1, GLOBAL_BATCH_SIZE=1024, ZERO_STAGE=1.
const char* kTr1DsConfig = R"({
  "train_micro_batch_size_per_gpu": 1,
  "train_batch_size": 1024,
  "gradient_clipping": 1.0,
  "zero_optimization": {
    "stage": 1
  },
  "fp16": {
    "enabled": true,
    "loss_scale": 0,
    "loss_scale_window": 500,
    "hysteresis": 2,
    "min_loss_scale": 1,
    "initial_scale_power": 12
  },
  "steps_per_print": 2000,
  "wall_clock_breakdown": false
})";

std::vector<std::string> tr1_argv(const std::string& ds_config) {
    const std::string out = "/scratch/checkpoints/tr1-13B";
    const std::string repo = "/work/code/tr1-13B/Megatron-DeepSpeed-tr1-13B";
    return {
        "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4",
        // GPT_ARGS
        "--num-layers", "40", "--hidden-size", "5120", "--ffn-hidden-size", "20480", "--num-attention-heads", "32",
        "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "1",
        "--rampup-batch-size", "16", "16", "5_000_000", "--global-batch-size", "1024", "--train-samples", "300_000_000",
        "--vocab-file", repo + "/data/gpt2-vocab.json", "--merge-file", repo + "/data/gpt2-merges.txt",
        "--loss-scale", "12", "--clip-grad", "1.0", "--fp16", "--checkpoint-activations", "--seed", "42",
        // OPTIMIZER_ARGS
        "--optimizer", "adam", "--adam-beta1", "0.9", "--adam-beta2", "0.999", "--adam-eps", "1e-8", "--lr", "1e-4",
        "--min-lr", "1e-5", "--lr-decay-style", "cosine", "--lr-decay-samples", "126_953_125",
        "--lr-warmup-samples", "216_320", "--clip-grad", "1.0", "--weight-decay", "1e-1",
        // EXIT_OPTS
        "--exit-duration-in-mins", "1190",
        // OUTPUT_ARGS
        "--log-interval", "10", "--save-interval", "1500", "--eval-interval", "1000", "--eval-iters", "5",
        "--codecarbon-dir", out + "/codecarbon", "--tensorboard-dir", out + "/tensorboard", "--tensorboard-queue-size",
        "5", "--log-timers-to-tensorboard", "--log-batch-size-to-tensorboard", "--log-validation-ppl-to-tensorboard",
        // the rest of CMD
        "--save", out + "/checkpoints", "--load", out + "/checkpoints",
        "--data-path", "/work/datasets-custom/oscar-en/meg-gpt2_text_document", "--data-impl", "mmap",
        "--split", "949,50,1", "--distributed-backend", "nccl",
        // DEEPSPEED_ARGS
        "--deepspeed", "--deepspeed_config", ds_config, "--zero-stage", "1", "--deepspeed-activation-checkpointing"};
}

const char* kTr11DsConfig = R"({
  "train_micro_batch_size_per_gpu": 2,
  "train_batch_size": 2048,
  "gradient_clipping": 1.0,
  "zero_optimization": {
    "stage": 0
  },
  "bf16": {
    "enabled": true
  },
  "steps_per_print": 2000,
  "wall_clock_breakdown": false
})";

std::vector<std::string> tr11_argv(const std::string& ds_config) {
    const std::string repo = "/work/code/tr11-176B-ml/Megatron-DeepSpeed";
    const std::string logs = "/scratch/checkpoints/tr11-176B-ml/tr11-176B-ml-logs";
    return {
        "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "12",
        // GPT_ARGS (the slurm's 'type:transformer|embedding' loses its quotes in bash -c)
        "--pp-partition-method", "type:transformer|embedding", "--num-layers", "70", "--hidden-size", "14336",
        "--num-attention-heads", "112", "--seq-length", "2048", "--max-position-embeddings", "2048",
        "--micro-batch-size", "2", "--rampup-batch-size", "192", "16", "9_765_625", "--global-batch-size", "2048",
        "--train-samples", "220_000_000", "--tokenizer-type", "PretrainedFromHF", "--tokenizer-name-or-path",
        "bigscience-catalogue-data-dev/byte-level-bpe-tokenizer-no-norm-250k-whitespace-and-eos-regex-alpha-v3-dedup-lines-articles",
        "--init-method-std", "0.0048", "--embed-layernorm", "--sync-tp-duplicated-parameters", "--bf16", "--seed", "42",
        "--position-embedding-type", "alibi", "--checkpoint-activations", "--abort-on-unmet-fused-kernel-constraints",
        "--kill-switch-path", repo + "/kill-switch-tr11-176B-exp1", "--pad-vocab-size-to", "250880",
        // OPTIMIZER_ARGS
        "--optimizer", "adam", "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--adam-eps", "1e-8", "--lr", "6e-5",
        "--min-lr", "6e-6", "--lr-decay-style", "cosine", "--lr-decay-samples", "200_000_000",
        "--lr-warmup-samples", "183_105", "--clip-grad", "1.0", "--weight-decay", "1e-1",
        // EXIT_OPTS
        "--exit-duration-in-mins", "5990",
        // OUTPUT_ARGS
        "--log-interval", "1", "--save-interval", "100", "--eval-interval", "1000", "--eval-iters", "1",
        "--tensorboard-dir", logs + "/tensorboard/main", "--tensorboard-queue-size", "5", "--log-timers-to-tensorboard",
        "--log-batch-size-to-tensorboard", "--log-validation-ppl-to-tensorboard",
        // the rest of CMD
        "--save", "/scratch/checkpoints/tr11-176B-ml/checkpoints/main", "--load",
        "/scratch/checkpoints/tr11-176B-ml/checkpoints/main", "--train-weighted-split-paths-path",
        repo + "/data/train-splits.txt", "--valid-weighted-split-paths-path", repo + "/data/valid-splits.txt",
        "--num-workers", "2", "--valid-num-workers", "0", "--data-impl", "mmap", "--distributed-backend", "nccl",
        // DEEPSPEED_ARGS
        "--deepspeed", "--deepspeed_config", ds_config, "--zero-stage", "0", "--deepspeed-activation-checkpointing"};
}

}  // namespace

TEST_CASE("tr1-13B parses into Megatron's values; DeepSpeed's fp16 section sets the loss scaler") {
    TrainArgs args;
    parse(args, tr1_argv(write_file("tr1-ds_config.json", kTr1DsConfig)));
    args.parallel.world_size = 128;  // 32 nodes × 4 GPUs: dp 16, so the ramp's start of 16 divides
    auto warnings = resolve_train_args(args);

    CHECK(args.model.num_layers == 40);
    CHECK(args.model.hidden_size == 5120);
    CHECK(args.model.num_attention_heads == 32);
    CHECK(args.model.ffn_hidden_size == 20480);
    CHECK(args.model.seq_length == 2048);
    CHECK(args.model.max_position_embeddings == 2048);
    CHECK(args.model.position_embedding_type == "absolute");
    CHECK(args.model.checkpoint_activations);
    CHECK(args.optimizer.micro_batch_size == 1);
    CHECK(args.optimizer.global_batch_size == 1024);
    REQUIRE(args.optimizer.rampup_batch_size);
    CHECK(args.optimizer.rampup_batch_size->ramp_up_samples == 5'000'000);
    CHECK(args.length.train_samples == 300'000'000);
    CHECK_FALSE(args.length.train_iters);
    CHECK(args.optimizer.lr == doctest::Approx(1e-4));
    CHECK(args.optimizer.min_lr == doctest::Approx(1e-5));
    CHECK(args.optimizer.lr_decay_style == "cosine");
    CHECK(args.optimizer.lr_decay_samples == 126'953'125);
    CHECK(args.optimizer.lr_warmup_samples == 216'320);
    CHECK(args.optimizer.adam_beta2 == doctest::Approx(0.999));
    CHECK(args.optimizer.weight_decay == doctest::Approx(0.1));
    CHECK(args.optimizer.fp16);
    CHECK_FALSE(args.optimizer.bf16);
    CHECK(args.seed == 42);
    CHECK(args.exit.exit_duration_in_mins == 1190);
    CHECK(args.logging.log_interval == 10);
    CHECK(args.logging.eval_iters == 5);
    CHECK(args.logging.tensorboard_queue_size == 5);
    CHECK(args.logging.log_validation_ppl_to_tensorboard);
    CHECK(args.checkpoint.save_interval == SaveSchedule::every(1500));
    CHECK(args.data.split == "949,50,1");
    CHECK(args.data.data_path.size() == 1);
    CHECK(args.parallel.tensor_model_parallel_size == 2);
    CHECK(args.parallel.pipeline_model_parallel_size == 4);
    CHECK(args.parallel.data_parallel_size == 16);
    CHECK(args.parallel.zero_stage == 1);
    CHECK(args.steps_per_print == 2000);
    // Under --deepspeed the config's dynamic scaler (power 12, window 500) replaces --loss-scale 12.
    CHECK_FALSE(args.optimizer.loss_scale);
    CHECK(args.optimizer.initial_loss_scale == 4096.0);
    CHECK(args.optimizer.loss_scale_window == 500);
    REQUIRE(warnings.size() == 1);
    CHECK(contains(warnings[0], "--loss-scale 12 is ignored"));
    CHECK(contains(warnings[0], "fp16.loss_scale 0 (dynamic)"));

    auto calc = make_num_micro_batches_calculator(args);
    CHECK(static_cast<long>(calc.rampup_samples_per_increment()) == 79365);
    CHECK(calc.current_global_batch_size() == 16);
}

TEST_CASE("tr11-176B (BLOOM) parses into Megatron's values") {
    TrainArgs args;
    parse(args, tr11_argv(write_file("tr11-ds_config.json", kTr11DsConfig)));
    args.parallel.world_size = 384;  // 48 nodes × 8 GPUs: dp 8
    auto warnings = resolve_train_args(args);
    CHECK(warnings.empty());
    CHECK(args.model.num_layers == 70);
    CHECK(args.model.hidden_size == 14336);
    CHECK(args.model.num_attention_heads == 112);
    CHECK(args.model.ffn_hidden_size == 4 * 14336);
    CHECK(args.model.position_embedding_type == "alibi");
    CHECK(args.model.embed_layernorm);
    CHECK(args.model.sync_tp_duplicated_parameters);
    CHECK(args.model.pad_vocab_size_to == 250880);
    CHECK(args.model.init_method_std == doctest::Approx(0.0048));
    CHECK(args.optimizer.bf16);
    CHECK_FALSE(args.optimizer.fp16);
    CHECK(args.optimizer.micro_batch_size == 2);
    CHECK(args.optimizer.global_batch_size == 2048);
    CHECK(args.optimizer.rampup_batch_size->start_global_batch_size == 192);
    CHECK(args.optimizer.lr_warmup_samples == 183'105);
    CHECK(args.length.train_samples == 220'000'000);
    CHECK(args.data.tokenizer_type == "PretrainedFromHF");
    CHECK(args.data.valid_num_workers == 0);
    CHECK(args.parallel.pp_partition_method == "type:transformer|embedding");
    CHECK(args.parallel.data_parallel_size == 8);
    CHECK(args.parallel.zero_stage == 0);
    CHECK(args.exit.exit_duration_in_mins == 5990);
    CHECK(contains(args.exit.kill_switch_path, "kill-switch-tr11-176B-exp1"));
    CHECK(make_num_micro_batches_calculator(args).num_micro_batches() == 12);  // 192 / (2 × 8)
}

TEST_CASE("Megatron's defaults when a flag is absent") {
    TrainArgs args;
    parse(args, {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "128",
                 "--max-position-embeddings", "128", "--lr", "1e-3", "--train-iters", "10"});
    validate(args);
    CHECK(args.model.ffn_hidden_size == 256);
    CHECK(args.model.make_vocab_size_divisible_by == 128);
    CHECK(args.optimizer.weight_decay == doctest::Approx(0.01));
    CHECK(args.optimizer.adam_beta2 == doctest::Approx(0.999));
    CHECK(args.optimizer.initial_loss_scale == 4294967296.0);
    CHECK(args.optimizer.global_batch_size == 1);
    CHECK(args.logging.log_interval == 100);
    CHECK(args.logging.eval_iters == 100);
    CHECK(args.logging.eval_interval == 1000);
    CHECK(args.logging.log_learning_rate_to_tensorboard);
    CHECK(args.seed == 1234);
    CHECK(args.parallel.zero_stage == 1);
    CHECK(args.data.data_impl == "infer");
}

TEST_CASE("unsupported and unknown flags are errors naming the flag") {
    // --glu-activation takes BMD's four choices only, and the message lists them.
    CHECK(contains(error_of_parse({"--glu-activation", "gelu"}), "--glu-activation"));
    CHECK(contains(error_of_parse({"--glu-activation", "gelu"}), "swiglu"));
    CHECK(error_of_parse({"--glu-activation", "geglu", "--no-bias-gelu-fusion", "--openai-gelu"}).empty());
    CHECK(error_of_parse({"--fp32-residual-connection", "--bf16"}).empty());
    CHECK(contains(error_of_parse({"--batch-size", "4"}), "use --micro-batch-size"));
    CHECK(contains(error_of_parse({"--no-such-flag", "1"}), "--no-such-flag"));
    CHECK(contains(error_of_parse({"--tokenizer-type", "BertWordPieceCase"}), "--tokenizer-type"));
    CHECK(contains(error_of_parse({"--train-samples", "5__0"}), "--train-samples: expected an integer"));
    CHECK(contains(error_of_parse({"--distributed-backend", "mpi"}), "--distributed-backend"));
    CHECK(contains(error_of_parse({"--rampup-batch-size", "16", "16"}), "--rampup-batch-size"));
}

TEST_CASE("a DeepSpeed config that disagrees with the flags is an error naming both") {
    std::string conflicting = kTr1DsConfig;
    conflicting.replace(conflicting.find("\"train_batch_size\": 1024"), 24, "\"train_batch_size\": 2048");
    TrainArgs args;
    parse(args, tr1_argv(write_file("conflict.json", conflicting)));
    args.parallel.world_size = 128;
    try {
        resolve_train_args(args);
        FAIL("expected a conflict");
    } catch (const mds::UsageError& e) {
        CHECK(contains(e.what(), "--global-batch-size 1024 conflicts with"));
        CHECK(contains(e.what(), "conflict.json train_batch_size 2048"));
    }

    TrainArgs bf;
    parse(bf, tr11_argv(write_file("tr1-for-bf16.json", kTr1DsConfig)));  // fp16 config, --bf16 flags
    CHECK_THROWS_WITH_AS(resolve_train_args(bf), doctest::Contains("--micro-batch-size 2 conflicts with"), mds::UsageError);

    TrainArgs z;
    auto argv = tr11_argv(write_file("tr11-ds.json", kTr11DsConfig));
    argv.back() = "--zero-stage";  // replace --deepspeed-activation-checkpointing with a second --zero-stage 1
    argv.push_back("1");
    parse(z, argv);
    CHECK_THROWS_WITH_AS(resolve_train_args(z), doctest::Contains("--zero-stage 1 conflicts with"), mds::UsageError);
}

TEST_CASE("DeepSpeed config: unknown keys are listed, errors name the file and the JSON path") {
    auto ds = parse_deepspeed_config(
        std::string(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1, "overlap_comm": true, "contiguous_gradients": true},
                        "curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 64,
                          "max_difficulty": 2048, "schedule_type": "fixed_linear",
                          "schedule_config": {"total_curriculum_step": 36000, "difficulty_step": 8}},
                        "optimizer": {"type": "Adam"}})"),
        "ds.json");
    CHECK(ds.train_batch_size == 8);
    CHECK(ds.zero_stage == 1);
    CHECK(ds.overlap_comm == true);
    CHECK(!ds.reduce_bucket_size);
    REQUIRE(ds.curriculum_learning);
    CHECK(ds.curriculum_learning->max_difficulty == 2048);
    CHECK(ds.curriculum_learning->total_curriculum_step == 36000);
    CHECK(ds.curriculum_learning->difficulty_step == 8);
    CHECK(ds.unknown_keys == std::vector<std::string>{"zero_optimization.contiguous_gradients", "optimizer"});
    CHECK(parse_deepspeed_config(std::string(R"({"zero_optimization": {"reduce_bucket_size": 5e8}})"), "ds.json").reduce_bucket_size ==
          500000000);
    // Past int64 (the cast was undefined behaviour) or with a fraction: not an integer.
    CHECK_THROWS_WITH_AS(parse_deepspeed_config(std::string(R"({"zero_optimization": {"reduce_bucket_size": 1e50}})"), "ds.json"),
                         doctest::Contains("reduce_bucket_size: expected an integer, found 1e+50"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_deepspeed_config(std::string(R"({"zero_optimization": {"reduce_bucket_size": 5.5}})"), "ds.json"),
                         doctest::Contains("reduce_bucket_size: expected an integer, found 5.5"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_deepspeed_config(std::string(R"({"zero_optimization": {"reduce_bucket_size": 0}})"), "ds.json"),
                         doctest::Contains("ds.json: zero_optimization.reduce_bucket_size: expected a positive number of elements"),
                         mds::Error);

    CHECK_THROWS_WITH_AS(parse_deepspeed_config(std::string(R"({"fp16": {"enabled": "yes"}})"), "ds.json"),
                         "ds.json: fp16.enabled: expected true or false, found \"yes\"", mds::Error);
    CHECK_THROWS_WITH_AS(
        parse_deepspeed_config(std::string(R"({"curriculum_learning": {"curriculum_type": "vocabularydifficulty"}})"), "ds.json"),
        doctest::Contains("ds.json: curriculum_learning.curriculum_type:"), mds::Error);
    CHECK_THROWS_WITH_AS(parse_deepspeed_config(std::string("{"), "ds.json"), doctest::Contains("ds.json: not valid JSON"),
                         mds::Error);
}

TEST_CASE("validation: Megatron's rules between flags") {
    const std::vector<std::string> base{"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                        "--seq-length", "128", "--max-position-embeddings", "128", "--lr", "1e-3"};
    auto fails_with = [&](std::vector<std::string> extra, const std::string& message, std::int64_t world = 1) {
        TrainArgs args;
        auto argv = base;
        argv.insert(argv.end(), extra.begin(), extra.end());
        parse(args, argv);
        args.parallel.world_size = world;
        CHECK_THROWS_WITH_AS(validate(args), doctest::Contains(message.c_str()), mds::UsageError);
    };
    fails_with({}, "one of --train-iters and --train-samples is required");
    fails_with({"--train-iters", "10", "--distributed-timeout-minutes", "0"}, "--distributed-timeout-minutes must be positive");
    fails_with({"--train-iters", "10", "--distributed-timeout-minutes", "1e300"}, "--distributed-timeout-minutes must be positive (and at most 1e9)");
    // Found by fuzz_train_flags: the product was signed overflow.
    fails_with({"--train-iters", "10", "--micro-batch-size", "9000000000000000000"},
               "--micro-batch-size 9000000000000000000 × data-parallel size 16 is past 2^63", 16);
    fails_with({"--train-iters", "10", "--tensor-model-parallel-size", "4611686018427387904", "--pipeline-model-parallel-size", "4"},
               "world size 16 is not divisible by --tensor-model-parallel-size 4611686018427387904", 16);
    fails_with({"--train-iters", "10", "--train-samples", "10"}, "exclude each other");
    fails_with({"--train-iters", "10", "--fp16", "--bf16"}, "--fp16 and --bf16 exclude each other");
    fails_with({"--train-iters", "10", "--hidden-size", "66"}, "--hidden-size 66 is not divisible by --num-attention-heads 4");
    fails_with({"--train-iters", "10", "--glu-activation", "swiglu"}, "--glu-activation swiglu needs --no-bias-gelu-fusion");
    fails_with({"--train-iters", "10", "--kv-channels", "0"}, "--kv-channels must be positive");
    fails_with({"--train-iters", "10", "--fp16-lm-cross-entropy"}, "--fp16-lm-cross-entropy needs --fp16");
    fails_with({"--train-iters", "10", "--fp32-residual-connection"}, "--fp32-residual-connection needs --fp16 or --bf16");
    {  // --kv-channels frees --hidden-size from dividing by the heads, as in Megatron.
        TrainArgs kv;
        auto argv = base;
        for (const char* a : {"--train-iters", "10", "--hidden-size", "66", "--kv-channels", "8"}) argv.push_back(a);
        parse(kv, argv);
        CHECK_NOTHROW(validate(kv));
        CHECK(kv.model.kv() == 8);
    }
    fails_with({"--train-iters", "10", "--seq-length", "256"}, "--max-position-embeddings 128 is smaller than --seq-length 256");
    fails_with({"--train-iters", "10", "--lr-warmup-samples", "5"}, "--lr-warmup-samples needs --train-samples");
    fails_with({"--train-samples", "10", "--lr-decay-iters", "5"}, "--lr-decay-iters needs --train-iters");
    fails_with({"--train-iters", "10", "--min-lr", "1"}, "--min-lr 1 is larger than --lr 0.001");
    fails_with({"--train-iters", "10", "--zero-stage", "2"}, "ZeRO stage 2");
    fails_with({"--train-iters", "10", "--deepspeed"}, "--deepspeed needs --deepspeed_config");
    fails_with({"--train-iters", "10", "--save", "/tmp/x"}, "--save needs --save-interval");
    fails_with({"--train-iters", "10", "--tensor-model-parallel-size", "3"}, "world size 8 is not divisible", 8);
    // Global batch not a multiple of micro batch × dp: optim's message proposes working sizes.
    fails_with({"--train-iters", "10", "--global-batch-size", "100", "--micro-batch-size", "2"}, "nearest that work: 96 or 112", 8);
    TrainArgs missing;
    parse(missing, {"--train-iters", "10"});
    CHECK_THROWS_WITH_AS(validate(missing), "--num-layers is required", mds::UsageError);
}

TEST_CASE("DeepSpeed config: a number beyond double is an mds::Error naming the file") {
    CHECK_THROWS_WITH_AS(mds::flags::parse_deepspeed_config(std::string(R"({"gradient_clipping": 1e400})"), "ds.json"),
                         doctest::Contains("ds.json: not valid JSON"), mds::Error);
}

TEST_CASE("DeepSpeed config: gradient_accumulation_steps against the global batch, overflow included") {
    const std::vector<std::string> base{"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                        "--seq-length", "128", "--max-position-embeddings", "128", "--lr", "1e-3",
                                        "--train-iters", "10", "--deepspeed", "--deepspeed_config", "ds.json"};
    auto apply = [&](const std::string& json) {
        TrainArgs args;
        parse(args, base);
        args.parallel.world_size = 4;
        apply_deepspeed_config(parse_deepspeed_config(json, "ds.json"), args);
        return args;
    };
    CHECK(*apply(R"({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 32, "gradient_accumulation_steps": 4})")
               .optimizer.global_batch_size == 32);
    CHECK_THROWS_WITH_AS(apply(R"({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 32, "gradient_accumulation_steps": 3})"),
                         doctest::Contains("gradient_accumulation_steps 3 gives a global batch of 24 (micro batch × steps × data parallel 4)"),
                         mds::UsageError);
    // 9e18 × 9e18 (found by fuzz_train_flags: the product was signed overflow).
    CHECK_THROWS_WITH_AS(apply(R"({"train_micro_batch_size_per_gpu": 9000000000000000000, "train_batch_size": 9000000000000000000,
                                  "gradient_accumulation_steps": 9000000000000000000})"),
                         doctest::Contains("gives a global batch of more than 2^63"), mds::UsageError);
}
