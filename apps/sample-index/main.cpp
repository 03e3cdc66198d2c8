// mds-sample-index: build (or check) the GPT sample-index .npy files Megatron-DeepSpeed's rank 0
// would build at start-up (doc_idx, sample_idx, shuffle_idx per dataset and split), on a CPU node,
// and print training samples as Megatron would feed them. docs/mds-sample-index.md has every flag.
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "mds/data/gpt_datasets.h"  // GptDatasets, format_summary, summary_json
#include "mds/flags/flag_table.h"   // add_table_flags
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/tool.h"

int main(int argc, char** argv) {
    return mds::run_tool("mds-sample-index", [&]() -> int {
        mds::data::GptDatasetsOptions opt;
        std::optional<std::int64_t> print_sample;
        bool quiet = false, json = false;

        CLI::App app{"Build the GPT sample index of Megatron-DeepSpeed (doc_idx, sample_idx, shuffle_idx .npy files)\n"
                     "for every --data-path dataset and train/valid/test split, where Megatron's rank 0 would write\n"
                     "them; files that exist are checked and kept. Optionally print a training sample.",
                     "mds-sample-index"};
        mds::add_version_flag(app, "mds-sample-index");
        const CLI::Validator positive = mds::number_in(1, std::numeric_limits<double>::infinity());
        // The Megatron flags this tool shares with mds-train, declared by the flag table (their names,
        // help and parsing are mds-train's); here some are required and all get this tool's ranges.
        mds::flags::TrainArgs megatron;
        mds::flags::add_table_flags(app, megatron, mds::flags::kToolSampleIndex);
        const char* data = "Data (Megatron flags)";
        const char* counts = "Sample counts (Megatron flags)";
        const auto shared = [&app](const char* name, const char* group, const char* help) {
            return app.get_option(name)->group(group)->description(help);
        };
        shared("--data-path", data, "Dataset prefix (PREFIX.bin/.idx), or weight/prefix pairs to blend: W1 PREFIX1 W2 PREFIX2 ...")
            ->required()->type_name("[W] PREFIX...");
        shared("--split", data, "Train/valid/test proportions of the documents, comma or '/' separated")
            ->default_str("969, 30, 1");  // GptDatasetsOptions' default, BigScience's
        shared("--seq-length", data, "Tokens per sample (each sample holds seq-length + 1 ids)")->required()
            ->check(mds::number_in(2, 1 << 30));
        shared("--seed", data, "Seed of numpy's RandomState for the shuffles")->default_str("1234")
            ->check(mds::number_in(0, 4294967295.0));
        shared("--data-impl", data, "Indexed dataset format; only mmap exists here")->default_str("mmap");
        shared("--train-samples", counts, "Training samples (or give --train-iters)")->check(positive);
        shared("--train-iters", counts, "Training iterations: train samples = iters x global batch size")->check(positive);
        shared("--global-batch-size", counts, "Global batch size")->required()->check(positive);
        shared("--rampup-batch-size", counts, "START INCREMENT SAMPLES of a batch-size ramp-up; with --train-samples it changes "
                                              "the iteration count and so the validation sample count")
            ->type_name("INT")->check(mds::non_negative_number());
        shared("--eval-interval", counts, "Iterations between evaluations")->default_str("1000")->check(positive);
        shared("--eval-iters", counts, "Iterations per evaluation")->default_str("100")->check(mds::non_negative_number());
        app.add_option("--last-epoch-cutoff", opt.cutoff_last_epoch, "Not a Megatron flag: shuffle the last epoch "
                                                                     "separately below this fraction of an epoch; 0.80 "
                                                                     "reproduces Megatron-DeepSpeed before 2021-11-03")
            ->default_str("0.95")->check(mds::number_in(0, 1))->group(data);
        app.option_defaults()->group("Output");
        app.add_flag("--verify", opt.verify, "Rebuild existing index files in memory and compare them element by "
                                             "element (default: check their headers, shapes and value ranges only)");
        app.add_option("--print-sample", print_sample, "Print the token ids of training sample N (after blending, "
                                                       "as Megatron's sampler reads index N) on stdout")
            ->type_name("N")->check(mds::non_negative_number());
        mds::add_quiet_flag(app, quiet);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        opt.data_path = megatron.data.data_path;
        if (megatron.data.split) opt.split = *megatron.data.split;
        opt.seq_length = static_cast<std::int32_t>(megatron.model.seq_length);
        opt.seed = megatron.seed;
        opt.num_samples.train_samples = megatron.length.train_samples;
        opt.num_samples.train_iters = megatron.length.train_iters;
        opt.num_samples.global_batch_size = megatron.optimizer.global_batch_size.value_or(0);
        if (const auto& r = megatron.optimizer.rampup_batch_size)
            opt.num_samples.rampup_batch_size = std::array<std::int64_t, 3>{r->start_global_batch_size, r->batch_size_increment,
                                                                            r->ramp_up_samples};
        opt.num_samples.eval_interval = megatron.logging.eval_interval;
        opt.num_samples.eval_iters = megatron.logging.eval_iters;
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
