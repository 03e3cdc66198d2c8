// Fuzzes mds-train's flag layer (mds/flags/train_args.h, deepspeed_config.h), everything between the
// command line and the first file or rendezvous. Byte 0 picks:
//   even: the rest is a DeepSpeed config JSON, parsed, merged into a small valid command line
//         (--deepspeed) and validated, as resolve_train_args does with --deepspeed_config;
//   odd:  the rest is a command line, one argument per line (at most 64), parsed as CLI11 parses
//         mds-train's and validated for byte 1's world size (1 to 16 ranks).
// Invariants: only mds::Error escapes (CLI11's own parse errors are a refused command line too); a
// configuration that validates has positive sizes, a data-parallel size that divides the world, and a
// global batch that is a whole number of micro batches of every data-parallel rank.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "mds/flags/deepspeed_config.h"
#include "mds/flags/train_args.h"

namespace {

using mds::flags::TrainArgs;

bool parse_command_line(TrainArgs& args, std::vector<std::string> argv) {
    CLI::App app("mds-train");
    mds::flags::add_train_flags(app, args);
    argv.insert(argv.begin(), "mds-train");
    std::vector<char*> ptrs;
    for (auto& a : argv) ptrs.push_back(a.data());
    try {
        app.parse(static_cast<int>(ptrs.size()), ptrs.data());
    } catch (const CLI::ParseError&) {
        return false;  // mds-train prints CLI11's message and exits 2
    }
    return true;
}

void check_validated(const TrainArgs& a) {
    MDS_FUZZ_CHECK(a.model.hidden_size > 0 && a.model.num_attention_heads > 0 && a.model.seq_length > 0);
    MDS_FUZZ_CHECK(a.optimizer.micro_batch_size > 0);
    const std::int64_t dp = a.parallel.data_parallel_size;
    MDS_FUZZ_CHECK(dp > 0 && a.parallel.world_size && *a.parallel.world_size % dp == 0);
    MDS_FUZZ_CHECK(a.global_batch_size() > 0);
    MDS_FUZZ_CHECK(a.global_batch_size() % (a.optimizer.micro_batch_size * dp) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
    if (data[0] % 2 == 0) {
        mds::fuzz::only_mds_errors([&] {
            const auto config = mds::flags::parse_deepspeed_config(std::string(text), "ds.json");
            TrainArgs args;
            const bool base_parses = parse_command_line(
                args, {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "128",
                       "--max-position-embeddings", "128", "--lr", "1e-3", "--train-iters", "10", "--deepspeed",
                       "--deepspeed_config", "ds.json"});
            MDS_FUZZ_CHECK(base_parses);
            args.parallel.world_size = 1 + data[1] % 16;
            mds::flags::apply_deepspeed_config(config, args);
            mds::flags::validate(args);
            check_validated(args);
        });
        return 0;
    }
    std::vector<std::string> argv;
    std::size_t start = 0;
    while (start <= text.size() && argv.size() < 64) {
        const std::size_t nl = text.find('\n', start);
        argv.emplace_back(text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
        if (nl == std::string_view::npos) break;
        start = nl + 1;
    }
    mds::fuzz::only_mds_errors([&] {
        TrainArgs args;
        if (!parse_command_line(args, argv)) return;
        args.parallel.world_size = 1 + data[1] % 16;
        mds::flags::validate(args);
        check_validated(args);
    });
    return 0;
}
