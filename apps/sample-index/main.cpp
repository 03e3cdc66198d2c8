// mds-sample-index: build (or check) the GPT sample-index .npy files Megatron-DeepSpeed's rank 0
// would build at start-up (doc_idx, sample_idx, shuffle_idx per dataset and split), on a CPU node,
// and print training samples as Megatron would feed them. docs/mds-sample-index.md has every flag.
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "mds/data/gpt_datasets.h"  // GptDatasets, format_summary, summary_json
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-sample-index", [&]() -> int {
        mds::data::GptDatasetsOptions opt;
        std::optional<std::int64_t> train_samples, train_iters, print_sample;
        std::vector<std::int64_t> rampup;
        std::string data_impl = "mmap";
        bool quiet = false, json = false;

        CLI::App app{"Build the GPT sample index of Megatron-DeepSpeed (doc_idx, sample_idx, shuffle_idx .npy files)\n"
                     "for every --data-path dataset and train/valid/test split, where Megatron's rank 0 would write\n"
                     "them; files that exist are checked and kept. Optionally print a training sample.",
                     "mds-sample-index"};
        mds::add_version_flag(app, "mds-sample-index");
        const CLI::Validator positive = mds::number_in(1, std::numeric_limits<double>::infinity());
        app.option_defaults()->group("Data (Megatron flags)");
        app.add_option("--data-path", opt.data_path, "Dataset prefix (PREFIX.bin/.idx), or weight/prefix pairs to "
                                                     "blend: W1 PREFIX1 W2 PREFIX2 ...")
            ->required()->type_name("[W] PREFIX...");
        app.add_option("--split", opt.split, "Train/valid/test proportions of the documents, comma or '/' separated")
            ->default_str("969, 30, 1");
        app.add_option("--seq-length", opt.seq_length, "Tokens per sample (each sample holds seq-length + 1 ids)")
            ->required()->check(mds::number_in(2, 1 << 30));
        app.add_option("--seed", opt.seed, "Seed of numpy's RandomState for the shuffles")->default_str("1234")
            ->check(mds::number_in(0, 4294967295.0));
        app.add_option("--last-epoch-cutoff", opt.cutoff_last_epoch, "Not a Megatron flag: shuffle the last epoch "
                                                                     "separately below this fraction of an epoch; 0.80 "
                                                                     "reproduces Megatron-DeepSpeed before 2021-11-03")
            ->default_str("0.95")->check(mds::number_in(0, 1));
        app.add_option("--data-impl", data_impl, "Indexed dataset format; only mmap exists here")
            ->check(CLI::IsMember({"mmap", "infer"}))->default_str("mmap");
        app.option_defaults()->group("Sample counts (Megatron flags)");
        app.add_option("--train-samples", train_samples, "Training samples (or give --train-iters)")->check(positive);
        app.add_option("--train-iters", train_iters, "Training iterations: train samples = iters x global batch size")
            ->check(positive);
        app.add_option("--global-batch-size", opt.num_samples.global_batch_size, "Global batch size")->required()
            ->check(positive);
        app.add_option("--rampup-batch-size", rampup, "START INCREMENT SAMPLES of a batch-size ramp-up; with "
                                                      "--train-samples it changes the iteration count and so the "
                                                      "validation sample count")->expected(3)->type_name("INT")
            ->check(mds::non_negative_number());
        app.add_option("--eval-interval", opt.num_samples.eval_interval, "Iterations between evaluations")
            ->default_str("1000")->check(positive);
        app.add_option("--eval-iters", opt.num_samples.eval_iters, "Iterations per evaluation")->default_str("100")
            ->check(mds::non_negative_number());
        app.option_defaults()->group("Output");
        app.add_flag("--verify", opt.verify, "Rebuild existing index files in memory and compare them element by "
                                             "element (default: check their headers, shapes and value ranges only)");
        app.add_option("--print-sample", print_sample, "Print the token ids of training sample N (after blending, "
                                                       "as Megatron's sampler reads index N) on stdout")
            ->type_name("N")->check(mds::non_negative_number());
        mds::add_quiet_flag(app, quiet);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        opt.num_samples.train_samples = train_samples;
        opt.num_samples.train_iters = train_iters;
        if (!rampup.empty()) opt.num_samples.rampup_batch_size = std::array<std::int64_t, 3>{rampup[0], rampup[1], rampup[2]};
        (void)mds::data::parse_split(opt.split);  // a wrong --split is a usage error before any file is opened
        if (!quiet && !json) opt.log = [](const std::string& m) { mds::print_info(m); };

        mds::data::GptDatasets datasets(opt);
        std::vector<std::int64_t> sample;
        if (print_sample) sample = datasets.train_sample(*print_sample);

        if (json) {
            std::printf("%s\n", mds::data::summary_json(datasets.summary(), print_sample, print_sample ? &sample : nullptr).c_str());
            return mds::kExitOk;
        }
        if (!quiet) std::fputs(mds::data::format_summary(datasets.summary()).c_str(), stderr);
        if (print_sample) {
            std::string line;
            for (std::size_t k = 0; k < sample.size(); ++k) line += (k ? " " : "") + std::to_string(sample[k]);
            std::printf("%s\n", line.c_str());
        }
        return mds::kExitOk;
    });
}
