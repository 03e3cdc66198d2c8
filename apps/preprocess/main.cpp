// mds-preprocess: jsonl / jsonl.zst -> Megatron indexed dataset (.bin/.idx), byte-identical to
// Megatron-DeepSpeed's tools/preprocess_data.py; or, with --datasets, merge partial outputs.
// docs/mds-preprocess.md describes every flag.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>  // --json summary

#include "mds/data/indexed_dataset_builder.h"  // merge_datasets
#include "mds/data/preprocess.h"
#include "mds/flags/flag_table.h"  // add_table_flags: the tokenizer flags
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/json_line.h"  // add_max_document_bytes_flag
#include "mds/util/tool.h"

namespace {

void print_summary(const mds::data::PreprocessSummary& s, bool json) {
    if (json) {
        nlohmann::json j = {{"lines", s.lines}, {"blank_lines", s.blank_lines}, {"bad_lines", s.bad_lines},
                            {"input_bytes", s.input_bytes}, {"seconds", s.seconds}, {"tokenizer", s.tokenizer},
                            {"dtype", s.dtype}, {"outputs", nlohmann::json::array()}};
        for (const auto& k : s.keys)
            j["outputs"].push_back({{"key", k.key}, {"prefix", k.prefix}, {"documents", k.documents},
                                    {"empty_documents", k.empty}, {"tokens", k.tokens}});
        if (s.sft) j["empty_examples"] = s.empty_examples;
        // Paths need not be UTF-8 (a Latin-1 file name): replace bad bytes rather than throw after
        // the outputs are already in place.
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return;
    }
    double mb_s = s.seconds > 0 ? static_cast<double>(s.input_bytes) / 1e6 / s.seconds : 0;
    std::fprintf(stderr, "mds-preprocess: %llu documents, %.1f MB in %.2f s (%.1f MB/s, %.0f documents/s)\n",
                 static_cast<unsigned long long>(s.lines), static_cast<double>(s.input_bytes) / 1e6, s.seconds, mb_s,
                 s.seconds > 0 ? static_cast<double>(s.lines) / s.seconds : 0.0);
    if (s.blank_lines || s.bad_lines)
        std::fprintf(stderr, "mds-preprocess: skipped %llu blank and %llu malformed lines\n",
                     static_cast<unsigned long long>(s.blank_lines), static_cast<unsigned long long>(s.bad_lines));
    if (s.sft)
        std::fprintf(stderr, "mds-preprocess: %llu examples written, %llu with an empty prompt or answer skipped\n",
                     static_cast<unsigned long long>(s.keys.empty() ? 0 : s.keys[0].documents),
                     static_cast<unsigned long long>(s.empty_examples));
    for (const auto& k : s.keys)
        std::fprintf(stderr, "mds-preprocess: %s.bin/.idx: %llu documents, %llu tokens (%s), %llu empty skipped\n",
                     k.prefix.c_str(), static_cast<unsigned long long>(k.documents),
                     static_cast<unsigned long long>(k.tokens), s.dtype.c_str(), static_cast<unsigned long long>(k.empty));
}

}  // namespace

int main(int argc, char** argv) {
    return mds::run_tool("mds-preprocess", [&]() -> int {
        mds::data::PreprocessOptions opt;
        std::vector<std::string> datasets;
        std::string dataset_impl = "mmap";
        mds::ProgressFlags progress;
        mds::data::SftFlags sft;
        bool json = false, split_sentences = false;

        CLI::App app{"Tokenize jsonl documents into a Megatron indexed dataset ({prefix}_{key}_document.bin/.idx),\n"
                     "byte-identical to Megatron-DeepSpeed's tools/preprocess_data.py; or merge datasets (--datasets).",
                     "mds-preprocess"};
        mds::add_version_flag(app, "mds-preprocess");
        app.option_defaults()->group("Input and output");
        app.add_option("--input", opt.inputs, "Input .jsonl or .jsonl.zst (zstd detected by content); - reads stdin. "
                                              "Repeat to concatenate several files in order")->type_name("FILE");
        app.add_option("--output-prefix", opt.output_prefix, "Output prefix: writes {prefix}_{key}_document.bin/.idx")
            ->type_name("PREFIX");
        app.add_option("--json-keys", opt.json_keys, "Fields to tokenize, each into its own dataset")
            ->default_str("text")->type_name("KEY...");
        app.add_option("--datasets", datasets, "Merge mode: concatenate these dataset prefixes (e.g. the outputs of "
                                               "several runs over chunks) into --output-prefix")->type_name("PREFIX...");
        app.add_option("--dataset-impl", dataset_impl, "Dataset format; only mmap is written")
            ->check(CLI::IsMember({"mmap"}))->default_str("mmap");
        app.option_defaults()->group("Tokenizer");
        // The tokenizer flags mds-train takes too, declared by the flag table (names, parsing, choices);
        // the help says what they mean here.
        mds::flags::TrainArgs megatron;
        mds::flags::add_table_flags(app, megatron, mds::flags::kToolPreprocess);
        const auto shared = [&app](const char* name, const std::string& help) {
            return app.get_option(name)->description(help)->group("Tokenizer");
        };
        shared("--tokenizer-type", "GPT2BPETokenizer (with --vocab-file/--merge-file) or PretrainedFromHF (with "
                                   "--tokenizer-file); inferred when omitted");
        shared("--vocab-file", "GPT-2 vocabulary (gpt2-vocab.json)")->type_name("FILE");
        shared("--merge-file", "GPT-2 merges (gpt2-merges.txt)")->type_name("FILE");
        shared("--tokenizer-file", "Hugging Face tokenizer.json with a byte-level BPE model (BLOOM's, GPT-2's), a folder "
                                   "holding one, or a Hub name (ORG/NAME) in the local Hugging Face cache")
            ->type_name("FILE");
        app.add_option("--eod-token", opt.eod_token, "End-of-document token for --append-eod (default <|endoftext|>, "
                                                     "or </s> for tokenizer.json files that have it)")->type_name("TOKEN");
        app.add_flag("--append-eod", opt.append_eod, "Append the end-of-document token to every non-empty document "
                                                     "(SFT data: to every answer only)");
        app.add_flag("--prepend-space", opt.prepend_space, "Put one space before each text (SFT data: before each "
                                                           "answer), as xP3's targets were made");
        shared("--make-vocab-size-divisible-by", "Accepted for Megatron compatibility; does not change the output")
            ->default_str("128")->check(mds::number_in(1, 1 << 30));
        app.add_flag("--split-sentences", split_sentences, "Not supported (needs NLTK punkt); an error if given");
        app.option_defaults()->group("Supervised fine-tuning data");
        app.add_flag("--sft", sft.sft, "Each line is one example: its prompt and answer go to {prefix}_inputs_document "
                                       "and {prefix}_targets_document (implied by the flags below)");
        app.add_option("--prompt-key", sft.prompt_key, "Field holding the prompt")->default_str("prompt")->type_name("KEY");
        app.add_option("--answer-key", sft.answer_key, "Field holding the answer")->default_str("answer")->type_name("KEY");
        app.add_option("--messages-key", sft.messages_key, "Field holding a chat list of {\"role\", \"content\"} "
                                                           "messages; the last assistant message is the answer")
            ->type_name("KEY");
        app.add_option("--chat-template", sft.chat_template, "Rendering of message lists: chatml or zephyr")
            ->default_str("chatml")->type_name("NAME");
        app.add_option("--chat-message", sft.chat_message, "Each message before the answer ({role}, {content}; \\n "
                                                           "for a newline)")->type_name("TEXT");
        app.add_option("--chat-answer-prefix", sft.chat_answer_prefix, "Text that ends the prompt")->type_name("TEXT");
        app.add_option("--chat-answer-suffix", sft.chat_answer_suffix, "Text that ends the answer")->type_name("TEXT");
        app.add_flag("--strict", sft.strict, "An example with an empty prompt or answer is an error (default: skipped "
                                             "and counted)");
        app.option_defaults()->group("Execution");
        app.add_option("--workers", opt.workers, "Tokenizing threads; the output does not depend on it")
            ->default_str("1")->check(mds::number_in(1, 1024));
        mds::add_skip_bad_lines_flag(app, opt.skip_bad_lines);
        mds::add_max_document_bytes_flag(app, opt.max_document_bytes, "Longest input line (one JSON document) tokenized; a longer one is a malformed line");
        mds::add_progress_flags(app, progress);
        mds::add_json_flag(app, json);
        if (auto rc = mds::parse_cli(app, argc, argv)) return *rc;

        const std::string tokenizer_type = megatron.data.tokenizer_type.value_or("");
        opt.vocab_file = megatron.data.vocab_file;
        opt.merge_file = megatron.data.merge_file;
        opt.tokenizer_file = megatron.data.tokenizer_name_or_path;
        if (split_sentences)
            throw mds::UsageError("--split-sentences is not supported: mds writes one sequence per document");
        if (tokenizer_type == "GPT2BPETokenizer" && !opt.tokenizer_file.empty())
            throw mds::UsageError("--tokenizer-type GPT2BPETokenizer takes --vocab-file and --merge-file, not --tokenizer-file");
        if (tokenizer_type == "PretrainedFromHF" && opt.tokenizer_file.empty())
            throw mds::UsageError("--tokenizer-type PretrainedFromHF needs --tokenizer-file (a tokenizer.json)");
        if (opt.output_prefix.empty()) throw mds::UsageError("--output-prefix is required");
        opt.sft = mds::data::resolve_sft_flags(sft, app.count("--json-keys") > 0);
        opt.progress = progress.resolved();
        opt.progress_interval_s = progress.interval_s;
        const bool quiet = progress.quiet;

        if (!datasets.empty()) {
            if (!opt.inputs.empty()) throw mds::UsageError("--datasets (merge) and --input cannot be used together");
            // An SFT pair is merged as two datasets: --datasets A_inputs_document B_inputs_document, then targets.
            if (opt.sft.enabled) throw mds::UsageError("--datasets merges one dataset; merge the inputs and the targets "
                                                       "of SFT data in two runs");
            mds::data::check_output_prefix(opt.output_prefix);
            mds::data::merge_datasets(datasets, opt.output_prefix);
            if (!quiet)
                mds::print_info("merged " + std::to_string(datasets.size()) + " datasets into " + opt.output_prefix +
                                ".bin/.idx");
            return mds::kExitOk;
        }
        auto summary = mds::data::preprocess(opt);
        if (json)
            print_summary(summary, true);
        else if (!quiet)
            print_summary(summary, false);
        return mds::kExitOk;
    });
}
