#include "mds/data/preprocess.h"

#include <sys/stat.h>  // stat
#include <unistd.h>    // access

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "mds/data/indexed_dataset_builder.h"
#include "mds/tokenizer/long_text.h"  // encode_long_text
#include "mds/tokenizer/hf_name.h"
#include "mds/tokenizer/tokenizer.h"
#include "mds/util/error.h"
#include "mds/util/json_line.h"
#include "mds/util/line_reader.h"
#include "mds/util/safe_paths.h"  // in_quotes, system_error_message
#include "mds/util/tool.h"        // print_warning

namespace mds::data {

std::string document_prefix(const std::string& output_prefix, const std::string& key) {
    return output_prefix + "_" + key + "_document";
}

void check_output_prefix(const std::string& output_prefix) {
    // As preprocess_data.py, the folder is not created: a typo should not leave a new folder.
    const auto slash = output_prefix.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : output_prefix.substr(0, slash);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0)
        throw Error(system_error_message("--output-prefix " + in_quotes(output_prefix) + ": cannot use its folder", dir, errno));
    if (!S_ISDIR(st.st_mode))
        throw Error("--output-prefix " + in_quotes(output_prefix) + ": " + in_quotes(dir) + " is not a folder");
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        throw Error(system_error_message("--output-prefix " + in_quotes(output_prefix) + ": cannot write into its folder",
                                         dir, errno));
    // Probes that a file can be made there, and removes the temporaries of runs that were killed.
    for (const auto& name : prepare_output_dir(dir, "--output-prefix folder"))
        print_warning("removed " + printable(name) + ", left in " + printable(dir) + " by a process that is gone");
}

namespace {

// What one batch of lines became.
struct BatchResult {
    struct Key {
        std::vector<std::int32_t> ids;         // all non-empty documents back to back
        std::vector<std::uint32_t> doc_sizes;  // tokens of each (EOD included)
        std::uint64_t empty = 0;
    };
    std::vector<Key> keys;
    std::uint64_t lines = 0, blank = 0, bad = 0, bytes = 0;
    std::uint64_t empty_examples = 0;       // SFT mode: skipped, prompt or answer empty
    std::vector<std::string> bad_messages;  // first few, for warnings
    std::uint64_t raw_consumed = 0;
};

// Decompressed input bytes a batch covers, terminators included ("\r\n" counts 2, a missing final
// newline 0): the reader's position after the batch minus its position before.
std::uint64_t batch_input_bytes(const LineBatchReader& reader, const LineBatch& batch) {
    return reader.bytes_read() - batch.first_byte_offset;
}

bool is_blank(std::string_view line) {
    for (char c : line)
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
    return true;
}

// Per-thread state: parser and encoder with its cache.
struct Worker {
    JsonLineParser parser;
    std::optional<SftExampleParser> sft;  // SFT mode
    SftExampleParser::Example example;
    const tok::Tokenizer& tokenizer;
    tok::Encoder encoder;
    std::vector<std::string> values;
    Worker(const PreprocessOptions& o, const tok::Tokenizer& t) : parser(o.json_keys), tokenizer(t), encoder(t) {
        if (o.sft.enabled) sft.emplace(o.sft, o.prepend_space);
    }
};

// SFT mode: one line is one example, written to both outputs or to neither, so that document i of
// the inputs and of the targets always belong together (Megatron's "empty document skipped" rule,
// applied per key, would shift one of them).
void process_sft_line(const std::function<std::string()>& where, Worker& w, const PreprocessOptions& o, std::int32_t eod,
                      BatchResult& r) {
    auto& in = r.keys[0];
    auto& tg = r.keys[1];
    const std::size_t in_before = in.ids.size(), tg_before = tg.ids.size();
    tok::encode_long_text(w.encoder, w.tokenizer, w.example.prompt, in.ids);
    tok::encode_long_text(w.encoder, w.tokenizer, w.example.answer, tg.ids);
    const bool no_prompt = in.ids.size() == in_before;
    if (no_prompt || w.example.answer_empty || tg.ids.size() == tg_before) {
        in.ids.resize(in_before);
        tg.ids.resize(tg_before);
        std::string why = where() + ": " + (no_prompt ? "the prompt" : "the answer") + " is empty";
        if (o.sft.strict) throw Error(why + " (--strict; without it such examples are skipped and counted)");
        ++r.empty_examples;
        if (r.bad_messages.size() < 5)
            r.bad_messages.push_back(why + " (examples with an empty prompt or answer are skipped; --strict stops instead)");
    } else {
        if (o.append_eod) tg.ids.push_back(eod);  // after the answer only (xP3)
        in.doc_sizes.push_back(static_cast<std::uint32_t>(in.ids.size() - in_before));
        tg.doc_sizes.push_back(static_cast<std::uint32_t>(tg.ids.size() - tg_before));
    }
    // A huge example's text is not kept for the rest of the run.
    for (std::string* text : {&w.example.prompt, &w.example.answer})
        if (text->capacity() > (std::size_t{16} << 20)) std::string().swap(*text);
}

BatchResult process_batch(const LineBatch& batch, const std::string& name, Worker& w, const PreprocessOptions& o,
                          std::int32_t eod) {
    BatchResult r;
    r.keys.resize(o.json_keys.size());
    auto bad_line = [&](std::string where) {
        if (!o.skip_bad_lines) throw Error(where + " (use --skip-bad-lines to skip such lines)");
        ++r.bad;
        if (r.bad_messages.size() < 5) r.bad_messages.push_back(std::move(where));
    };
    // "file:line", made only for a line that is reported.
    auto line_name = [&](std::size_t i) { return name + ":" + std::to_string(batch.first_line_number + i); };
    for (std::size_t i = 0; i < batch.size(); ++i) {
        if (const std::uint64_t n = batch.lines[i].too_long_bytes) {
            bad_line(line_name(i) + ": " + too_long_line_reason(n, o.max_document_bytes) + "; raise it to tokenize the line");
            continue;
        }
        std::string_view line = batch.line(i);
        if (is_blank(line)) {
            ++r.blank;
            continue;
        }
        try {
            if (w.sft) w.sft->parse(line, w.example);
            else w.parser.parse(line, w.values);
        } catch (const JsonError& e) {
            bad_line(line_name(i) + ":" + std::to_string(e.offset() + 1) + ": " + e.reason());
            continue;
        }
        ++r.lines;
        if (w.sft) {
            process_sft_line([&] { return line_name(i); }, w, o, eod, r);
            continue;
        }
        for (std::size_t k = 0; k < o.json_keys.size(); ++k) {
            if (o.prepend_space) w.values[k].insert(0, 1, ' ');
            auto& out = r.keys[k];
            std::size_t before = out.ids.size();
            // A long document's ids go into room reserved once (a token covers at least a byte, so
            // the text length bounds them nearly always; untouched pages cost nothing), not into a
            // vector that doubles and copies itself while it grows.
            if (w.values[k].size() > (std::size_t{1} << 20)) out.ids.reserve(before + w.values[k].size() + 16);
            tok::encode_long_text(w.encoder, w.tokenizer, w.values[k], out.ids);
            // A huge document's text is not kept for the rest of the run.
            if (w.values[k].capacity() > (std::size_t{16} << 20)) std::string().swap(w.values[k]);
            if (out.ids.size() == before) {
                ++out.empty;  // Megatron writes nothing for a document without tokens, not even EOD
                continue;
            }
            if (o.append_eod) out.ids.push_back(eod);
            out.doc_sizes.push_back(static_cast<std::uint32_t>(out.ids.size() - before));
        }
    }
    return r;
}

tok::Tokenizer load_tokenizer(const PreprocessOptions& o) {
    bool gpt2 = !o.vocab_file.empty() || !o.merge_file.empty();
    if (gpt2 && !o.tokenizer_file.empty())
        throw UsageError("give either --vocab-file/--merge-file or --tokenizer-file, not both");
    if (gpt2 && (o.vocab_file.empty() || o.merge_file.empty()))
        throw UsageError("the GPT-2 tokenizer needs both --vocab-file and --merge-file");
    if (!gpt2 && o.tokenizer_file.empty())
        throw UsageError("no tokenizer: give --vocab-file and --merge-file (GPT-2 BPE) or --tokenizer-file (tokenizer.json)");
    // A tokenizer.json, a Hugging Face model folder holding one, or a Hub name in the local cache.
    tok::Tokenizer t = gpt2 ? tok::Tokenizer::from_gpt2_files(o.vocab_file, o.merge_file)
                            : tok::Tokenizer::from_hf_json(tok::hf_tokenizer_json(o.tokenizer_file, "--tokenizer-file"));
    if (!o.eod_token.empty()) t.set_eod_token(o.eod_token);
    if (o.append_eod && t.eod_id() < 0)
        throw UsageError("--append-eod: the tokenizer has no end-of-document token; name one with --eod-token");
    return t;
}

// Inputs are opened one after the other; the progress total is their summed size (0, unknown,
// when one is stdin).
std::uint64_t total_input_bytes(const std::vector<std::string>& inputs) {
    std::uint64_t total_raw = 0;
    for (const auto& in : inputs) {
        if (in == "-") return 0;
        if (!file_exists(in)) throw Error("cannot open " + in + ": No such file or directory");
        total_raw += file_size(in);
    }
    return total_raw;
}

// One builder per JSON key, each named in the summary.
std::vector<std::unique_ptr<IndexedDatasetBuilder>> open_builders(const PreprocessOptions& o, const tok::Tokenizer& tokenizer,
                                                                  PreprocessSummary& summary) {
    const DType dtype = dtype_for_vocab(tokenizer.vocab_size());
    summary.tokenizer = tokenizer.describe();
    summary.dtype = dtype_name(dtype);
    std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
    for (const auto& key : o.json_keys) {
        PreprocessKeySummary ks;
        ks.key = key;
        ks.prefix = document_prefix(o.output_prefix, key);
        builders.push_back(std::make_unique<IndexedDatasetBuilder>(ks.prefix, dtype));
        summary.keys.push_back(ks);
    }
    return builders;
}

// The outputs: the builders, the summary that counts into them, and the progress. Made in this
// order (members in declaration order): the outputs are opened before the inputs are looked at.
class Outputs {
public:
    Outputs(const PreprocessOptions& o, const tok::Tokenizer& tokenizer)
        : builders_(open_builders(o, tokenizer, summary_)),
          progress_("documents", total_input_bytes(o.inputs), o.progress, o.progress_interval_s) {}

    // Appends a batch's documents (batches arrive in input order), counts them, warns about the
    // first bad lines, and reports progress.
    void write(const BatchResult& r) {
        for (std::size_t k = 0; k < r.keys.size(); ++k) {
            const auto& kr = r.keys[k];
            std::size_t off = 0;
            for (std::uint32_t n : kr.doc_sizes) {
                builders_[k]->add_item(std::span<const std::int32_t>(kr.ids.data() + off, n));
                builders_[k]->end_document();
                off += n;
            }
            summary_.keys[k].documents += kr.doc_sizes.size();
            summary_.keys[k].empty += kr.empty;
            summary_.keys[k].tokens += kr.ids.size();
        }
        summary_.lines += r.lines;
        summary_.empty_examples += r.empty_examples;
        summary_.blank_lines += r.blank;
        summary_.bad_lines += r.bad;
        summary_.input_bytes += r.bytes;
        for (const auto& m : r.bad_messages)
            if (warned_++ < 10) print_warning("skipping " + m);
        progress_.update(summary_.lines, summary_.input_bytes, raw_done_before_ + r.raw_consumed);
    }

    // An input is finished: the progress of the next counts from here.
    void input_done(std::uint64_t raw_consumed) { raw_done_before_ += raw_consumed; }

    PreprocessSummary finish() {
        // All outputs appear together (the SFT pair must never be half replaced): see finalize_datasets.
        std::vector<IndexedDatasetBuilder*> all;
        for (auto& b : builders_) all.push_back(b.get());
        finalize_datasets(all);
        progress_.finish();
        summary_.seconds = progress_.elapsed_s();
        return summary_;
    }

private:
    PreprocessSummary summary_;
    std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders_;
    Progress progress_;
    std::uint64_t raw_done_before_ = 0;  // raw bytes of inputs already finished
    std::uint64_t warned_ = 0;
};

// --workers 1: batches tokenized on this thread as they are read.
void tokenize_serial(const PreprocessOptions& o, const tok::Tokenizer& tokenizer, Outputs& out) {
    Worker w(o, tokenizer);
    for (const auto& in : o.inputs) {
        LineBatchReader reader(in, o.batch_bytes, o.max_document_bytes);
        LineBatch batch;
        while (reader.next(batch)) {
            BatchResult r = process_batch(batch, reader.path(), w, o, tokenizer.eod_id());
            r.raw_consumed = reader.raw_consumed();
            r.bytes = batch_input_bytes(reader, batch);
            out.write(r);
        }
        out.input_done(reader.raw_consumed());
    }
}

// A fixed pool of workers taking batches from a queue; each batch's result comes back through its
// own future, so that results can be written in input order.
class BatchPool {
public:
    struct Job {
        std::shared_ptr<LineBatch> batch;
        std::string name;
        std::promise<BatchResult> promise;
    };

    BatchPool(const PreprocessOptions& o, const tok::Tokenizer& tokenizer) {
        try {
            for (unsigned t = 0; t < o.workers; ++t)
                threads_.emplace_back([this, &o, &tokenizer] { work(o, tokenizer); });
        } catch (...) {  // a thread that cannot start: the others are joined, not left running
            shutdown();
            throw;
        }
    }
    ~BatchPool() { shutdown(); }
    BatchPool(const BatchPool&) = delete;
    BatchPool& operator=(const BatchPool&) = delete;

    void submit(Job* job) {
        {
            std::lock_guard lock(mu_);
            queue_.push_back(job);
        }
        cv_.notify_one();
    }

    // Drops the jobs not started and joins the workers (idempotent).
    void shutdown() {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
            queue_.clear();
        }
        cv_.notify_all();
        for (auto& th : threads_)
            if (th.joinable()) th.join();
    }

private:
    void work(const PreprocessOptions& o, const tok::Tokenizer& tokenizer) {
        Worker w(o, tokenizer);
        for (;;) {
            Job* job;
            {
                std::unique_lock lock(mu_);
                cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
                if (queue_.empty()) return;
                job = queue_.front();
                queue_.pop_front();
            }
            try {
                job->promise.set_value(process_batch(*job->batch, job->name, w, o, tokenizer.eod_id()));
            } catch (...) {
                job->promise.set_exception(std::current_exception());
            }
        }
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job*> queue_;
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

// --workers N: batches read here, tokenized by the pool, written in order. At most 2 * workers
// batches are in flight, which bounds memory.
void tokenize_parallel(const PreprocessOptions& o, const tok::Tokenizer& tokenizer, Outputs& out) {
    struct InFlight {
        std::unique_ptr<BatchPool::Job> job;
        std::future<BatchResult> result;
        std::uint64_t raw_consumed;  // input position when the batch was read, for progress
        std::uint64_t bytes;         // decompressed input bytes of the batch
    };
    std::deque<InFlight> inflight;  // outlives the pool: its destructor joins the workers first
    BatchPool pool(o, tokenizer);
    auto write_oldest = [&] {
        BatchResult r = inflight.front().result.get();
        r.raw_consumed = inflight.front().raw_consumed;
        r.bytes = inflight.front().bytes;
        inflight.pop_front();
        out.write(r);
    };
    for (const auto& in : o.inputs) {
        LineBatchReader reader(in, o.batch_bytes, o.max_document_bytes);
        for (;;) {
            auto batch = std::make_shared<LineBatch>();
            if (!reader.next(*batch)) break;
            auto job = std::make_unique<BatchPool::Job>();
            job->batch = std::move(batch);
            job->name = reader.path();
            auto result = job->promise.get_future();
            BatchPool::Job* queued = job.get();
            const std::uint64_t bytes = batch_input_bytes(reader, *job->batch);
            inflight.push_back({std::move(job), std::move(result), reader.raw_consumed(), bytes});
            pool.submit(queued);
            while (inflight.size() >= 2 * static_cast<std::size_t>(o.workers)) write_oldest();
        }
        out.input_done(reader.raw_consumed());
    }
    while (!inflight.empty()) write_oldest();
    pool.shutdown();
}

}  // namespace

PreprocessSummary preprocess(const PreprocessOptions& options) {
    PreprocessOptions sft_options;
    if (options.sft.enabled) {
        if (!options.sft.messages_key.empty()) check_chat_template(options.sft.chat);
        sft_options = options;
        sft_options.json_keys = {"inputs", "targets"};  // BMD's names: {prefix}_inputs_document, _targets_document
    }
    const PreprocessOptions& o = options.sft.enabled ? sft_options : options;
    check_jsonl_flags(o.inputs, o.json_keys, o.workers);
    if (o.output_prefix.empty()) throw UsageError("--output-prefix is required");
    if (o.max_document_bytes < 1) throw UsageError("--max-document-bytes must be at least 1");
    check_output_prefix(o.output_prefix);
    const tok::Tokenizer tokenizer = load_tokenizer(o);
    Outputs out(o, tokenizer);
    if (o.workers == 1) tokenize_serial(o, tokenizer, out);
    else tokenize_parallel(o, tokenizer, out);
    PreprocessSummary summary = out.finish();
    summary.sft = o.sft.enabled;
    return summary;
}

}  // namespace mds::data
