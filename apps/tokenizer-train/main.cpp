// mds-tokenizer-train: train a GPT-2-style byte-level BPE tokenizer on jsonl documents, as
// BigScience trained BLOOM's; writes vocab.json + merges.txt (Megatron's --vocab-file and
// --merge-file) and tokenizer.json. docs/mds-tokenizer-train.md describes every flag.
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>  // --json summary

#include "mds/tokenizer/tokenizer_train.h"
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/json_line.h"  // add_max_document_bytes_flag
#include "mds/util/tool.h"

namespace {

void print_summary(const mds::tok::TokenizerTrainSummary& s, const mds::tok::TokenizerTrainOptions& opt, bool json) {
    if (json) {
        nlohmann::json j = {{"lines", s.lines}, {"blank_lines", s.blank_lines}, {"bad_lines", s.bad_lines},
                            {"input_bytes", s.input_bytes}, {"pieces", s.pieces}, {"unique_pieces", s.unique_pieces},
                            {"merges", s.merges}, {"merges_reusing_token", s.merges_reusing_token},
                            {"last_merge_count", s.last_merge_count}, {"vocab_size", s.vocab_size},
                            {"count_seconds", s.count_seconds}, {"train_seconds", s.train_seconds}, {"files", s.files}};
        std::printf("%s\n", j.dump().c_str());
        return;
    }
    const double mb = static_cast<double>(s.input_bytes) / 1e6;
    std::fprintf(stderr, "mds-tokenizer-train: %llu documents, %.1f MB read and counted in %.2f s (%.1f MB/s)\n",
                 static_cast<unsigned long long>(s.lines), mb, s.count_seconds,
                 s.count_seconds > 0 ? mb / s.count_seconds : 0.0);
    if (s.blank_lines || s.bad_lines)
        std::fprintf(stderr, "mds-tokenizer-train: skipped %llu blank and %llu malformed lines\n",
                     static_cast<unsigned long long>(s.blank_lines), static_cast<unsigned long long>(s.bad_lines));
    std::fprintf(stderr, "mds-tokenizer-train: %llu merges in %.2f s (the last of a pair seen %llu times); "
                         "vocabulary of %llu tokens\n",
                 static_cast<unsigned long long>(s.merges), s.train_seconds,
                 static_cast<unsigned long long>(s.last_merge_count), static_cast<unsigned long long>(s.vocab_size));
    if (s.vocab_size < opt.bpe.vocab_size)
        std::fprintf(stderr, "mds-tokenizer-train: stopped before --vocab-size %llu: no pair left that occurs "
                             "--min-frequency %llu times\n",
                     static_cast<unsigned long long>(opt.bpe.vocab_size),
                     static_cast<unsigned long long>(opt.bpe.min_frequency));
    for (const auto& f : s.files) std::fprintf(stderr, "mds-tokenizer-train: wrote %s\n", f.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    return mds::run_tool("mds-tokenizer-train", [&]() -> int {
        mds::tok::TokenizerTrainOptions opt;
        mds::ProgressFlags progress;
        bool json = false, no_hf_json = false;

        CLI::App app{"Train a byte-level BPE tokenizer (GPT-2 pre-tokenization and byte symbols) on jsonl documents.\n"
                     "Writes vocab.json and merges.txt (for --vocab-file/--merge-file of mds-preprocess and Megatron)\n"
                     "and tokenizer.json (Hugging Face) into --output-dir.",
                     "mds-tokenizer-train"};
        mds::add_version_flag(app, "mds-tokenizer-train");
        app.option_defaults()->group("Input and output");
        app.add_option("--input", opt.inputs, "Input .jsonl or .jsonl.zst (zstd detected by content); - reads stdin. "
                                              "Repeat to read several files")->type_name("FILE")->required();
        app.add_option("--json-keys", opt.json_keys, "Fields whose text is counted")
            ->default_str("text")->type_name("KEY...");
        app.add_option("--output-dir", opt.output_dir, "Directory for vocab.json, merges.txt and tokenizer.json "
                                                       "(created if missing; files replaced atomically)")
            ->type_name("DIR")->required();
        app.add_flag("--no-tokenizer-json", no_hf_json, "Write only vocab.json and merges.txt");
        app.option_defaults()->group("Model");
        app.add_option("--vocab-size", opt.bpe.vocab_size, "Size of the vocabulary: 256 byte symbols + learned tokens + "
                                                           "special tokens (at most 2097152)")->type_name("N")->required()
            ->check(mds::number_in(257, std::numeric_limits<double>::infinity()));  // the upper bound: check_bpe_trainer_config
        app.add_option("--min-frequency", opt.bpe.min_frequency, "Stop when the most frequent pair occurs fewer times")
            ->default_str("2")->type_name("N")->check(mds::positive_number());
        app.add_option("--special-tokens", opt.bpe.special_tokens, "Tokens appended after the learned ones, in order "
                                                                   "(the first is the end-of-document token)")
            ->default_str("<|endoftext|>")->type_name("TOKEN...")->expected(0, CLI::detail::expected_max_vector_size);
        app.option_defaults()->group("Execution");
        app.add_option("--workers", opt.workers, "Counting threads; the output does not depend on it")
            ->default_str("1")->type_name("N")->check(mds::number_in(1, 1024));
        mds::add_skip_bad_lines_flag(app, opt.skip_bad_lines);
        mds::add_max_document_bytes_flag(app, opt.max_document_bytes, "Longest input line counted; a longer one is a malformed line");
        mds::add_progress_flags(app, progress);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        opt.write_hf_json = !no_hf_json;
        opt.progress = progress.resolved();
        opt.progress_interval_s = progress.interval_s;
        const bool quiet = progress.quiet;

        auto summary = mds::tok::train_tokenizer(opt);
        if (json)
            print_summary(summary, opt, true);
        else if (!quiet)
            print_summary(summary, opt, false);
        return mds::kExitOk;
    });
}
