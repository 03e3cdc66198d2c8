#include "mds/tokenizer/tokenizer_train.h"

#include <unistd.h>  // isatty, rmdir

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "mds/util/error.h"
#include "mds/util/files.h"        // AtomicOutput, file_exists, file_size, sync_directory
#include "mds/util/json_line.h"
#include "mds/util/line_reader.h"
#include "mds/util/safe_paths.h"   // check_output_dir, prepare_output_dir
#include "mds/util/tool.h"         // print_info, print_warning

namespace mds::tok {

namespace {

struct Batch {
    LineBatch lines;
    std::string name;  // input path, for messages
};

// One counting thread's state and tallies.
struct CountWorker {
    JsonLineParser parser;
    PieceCounter counter;
    std::vector<std::string> values;
    std::uint64_t lines = 0, blank = 0, bad = 0;
    std::vector<std::string> bad_messages;  // first few, for warnings

    explicit CountWorker(const std::vector<std::string>& keys) : parser(keys) {}

    void count(const Batch& b, const TokenizerTrainOptions& o) {
        auto bad_line = [&](std::string where) {
            if (!o.skip_bad_lines) throw Error(where + " (use --skip-bad-lines to skip such lines)");
            ++bad;
            if (bad_messages.size() < 10) bad_messages.push_back(std::move(where));
        };
        // "file:line", made only for a line that is reported.
        auto line_name = [&](std::size_t i) { return b.name + ":" + std::to_string(b.lines.first_line_number + i); };
        for (std::size_t i = 0; i < b.lines.size(); ++i) {
            if (const std::uint64_t n = b.lines.lines[i].too_long_bytes) {
                bad_line(line_name(i) + ": " + too_long_line_reason(n, o.max_document_bytes) + "; raise it to count the line");
                continue;
            }
            std::string_view line = b.lines.line(i);
            if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) {
                ++blank;
                continue;
            }
            try {
                parser.parse(line, values);
            } catch (const JsonError& e) {
                bad_line(line_name(i) + ":" + std::to_string(e.offset() + 1) + ": " + e.reason());
                continue;
            }
            ++lines;
            for (auto& v : values) {
                counter.add_text(v);
                if (v.capacity() > (std::size_t{16} << 20)) std::string().swap(v);  // a huge document's text
            }
        }
    }
};

// The folders that create_directories(dir) would make, outermost first.
std::vector<std::filesystem::path> missing_folders(const std::string& dir) {
    std::vector<std::filesystem::path> missing;
    std::error_code ec;
    for (std::filesystem::path p = std::filesystem::absolute(dir, ec).lexically_normal();
         !ec && !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
        if (!p.has_relative_path()) break;  // the root
        if (p.filename().empty()) continue;  // "dir/" normalises to a trailing empty name
        missing.insert(missing.begin(), p);
    }
    return missing;
}

// Writes `files` (name, content) into `dir` so that they appear together or not at all: every
// file is written in full under its temporary name (unbuffered, so a full disk or a size limit
// fails here) before the first is renamed into place. On failure the temporaries, and the folders
// this call created, are removed; a folder that existed is never removed. SIGINT/SIGTERM remove the
// temporaries too (AtomicOutput); those of a killed run are removed by the next one
// (prepare_output_dir). Returns the paths written.
std::vector<std::string> write_output_files(const std::string& dir,
                                            const std::vector<std::pair<std::string, std::string>>& files) {
    const auto created = missing_folders(dir);
    const std::string prefix = dir + (dir.back() == '/' ? "" : "/");
    std::vector<std::string> written;
    try {
        prepare_output_dir(dir, "--output-dir");
        std::vector<std::unique_ptr<AtomicOutput>> outs;
        for (const auto& [name, content] : files) {
            outs.push_back(std::make_unique<AtomicOutput>(prefix + name, 0));
            outs.back()->write(content);
        }
        for (auto& out : outs) {
            out->commit();
            written.push_back(out->final_path());
        }
    } catch (...) {
        for (auto it = created.rbegin(); it != created.rend(); ++it) ::rmdir(it->c_str());  // only if empty
        throw;
    }
    sync_directory(dir);
    return written;
}

std::uint64_t total_input_bytes(const std::vector<std::string>& inputs) {
    std::uint64_t total = 0;
    for (const auto& in : inputs) {
        if (in == "-") return 0;  // unknown
        if (!file_exists(in)) throw Error("cannot open " + in + ": No such file or directory");
        total += file_size(in);
    }
    return total;
}

// Reads every input and counts its pieces on `o.workers` threads. Batches go through a bounded
// queue (2 per worker), so memory stays bounded whatever the input size.
std::vector<std::unique_ptr<CountWorker>> count_pieces(const TokenizerTrainOptions& o, Progress& progress,
                                                       std::uint64_t& input_bytes) {
    std::vector<std::unique_ptr<CountWorker>> workers;
    for (unsigned t = 0; t < o.workers; ++t) workers.push_back(std::make_unique<CountWorker>(o.json_keys));
    std::uint64_t lines_read = 0, raw_before = 0;
    input_bytes = 0;

    if (o.workers == 1) {
        for (const auto& in : o.inputs) {
            LineBatchReader reader(in, o.batch_bytes, o.max_document_bytes);
            Batch b;
            b.name = reader.path();
            while (reader.next(b.lines)) {
                workers[0]->count(b, o);
                lines_read += b.lines.size();
                input_bytes += reader.bytes_read() - b.lines.first_byte_offset;
                progress.update(lines_read, input_bytes, raw_before + reader.raw_consumed());
            }
            raw_before += reader.raw_consumed();
        }
        return workers;
    }

    std::mutex mu;
    std::condition_variable cv_work, cv_space;
    std::deque<std::unique_ptr<Batch>> queue;
    bool done = false;
    std::exception_ptr failure;
    const std::size_t max_queued = 2 * static_cast<std::size_t>(o.workers);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < o.workers; ++t)
        threads.emplace_back([&, w = workers[t].get()] {
            for (;;) {
                std::unique_ptr<Batch> b;
                {
                    std::unique_lock lock(mu);
                    cv_work.wait(lock, [&] { return done || !queue.empty(); });
                    if (queue.empty()) return;
                    b = std::move(queue.front());
                    queue.pop_front();
                }
                cv_space.notify_one();
                try {
                    w->count(*b, o);
                } catch (...) {
                    std::lock_guard lock(mu);
                    if (!failure) failure = std::current_exception();
                    done = true;
                    queue.clear();
                    cv_space.notify_all();
                    cv_work.notify_all();
                    return;
                }
            }
        });
    auto finish = [&] {
        {
            std::lock_guard lock(mu);
            done = true;
        }
        cv_work.notify_all();
        for (auto& th : threads) th.join();
    };
    try {
        for (const auto& in : o.inputs) {
            LineBatchReader reader(in, o.batch_bytes, o.max_document_bytes);
            for (;;) {
                auto b = std::make_unique<Batch>();
                b->name = reader.path();
                if (!reader.next(b->lines)) break;
                lines_read += b->lines.size();
                input_bytes += reader.bytes_read() - b->lines.first_byte_offset;
                {
                    std::unique_lock lock(mu);
                    cv_space.wait(lock, [&] { return failure || queue.size() < max_queued; });
                    if (failure) break;
                    queue.push_back(std::move(b));
                }
                cv_work.notify_one();
                progress.update(lines_read, input_bytes, raw_before + reader.raw_consumed());
            }
            raw_before += reader.raw_consumed();
            std::lock_guard lock(mu);
            if (failure) break;
        }
    } catch (...) {
        {
            std::lock_guard lock(mu);
            queue.clear();
        }
        finish();
        throw;
    }
    finish();  // workers drain the queue, then stop
    if (failure) std::rethrow_exception(failure);
    return workers;
}

}  // namespace

TokenizerTrainSummary train_tokenizer(const TokenizerTrainOptions& o) {
    // Every argument is checked before any output exists or any input is read.
    check_jsonl_flags(o.inputs, o.json_keys, o.workers);
    if (o.output_dir.empty()) throw UsageError("--output-dir is required");
    if (o.max_document_bytes < 1) throw UsageError("--max-document-bytes must be at least 1");
    try {
        check_bpe_trainer_config(o.bpe);
    } catch (const Error& e) {
        throw UsageError(e.what());
    }
    const std::size_t fixed = 256 + o.bpe.special_tokens.size();
    // Fail on an unusable output folder before the work, not after it; it is created only when
    // the files are ready to be written.
    check_output_dir(o.output_dir, "--output-dir");

    TokenizerTrainSummary s;
    const bool quiet = o.progress == Progress::Mode::Off;
    PieceCounter counts;
    {
        Progress progress("documents", total_input_bytes(o.inputs), o.progress, o.progress_interval_s);
        auto workers = count_pieces(o, progress, s.input_bytes);
        std::uint64_t warned = 0;
        for (auto& w : workers) {
            s.lines += w->lines;
            s.blank_lines += w->blank;
            s.bad_lines += w->bad;
            for (const auto& m : w->bad_messages)
                if (warned++ < 10) print_warning("skipping " + m);
            counts.merge_from(w->counter);
        }
        progress.finish();
        s.count_seconds = progress.elapsed_s();
    }
    s.pieces = counts.total_pieces();
    s.unique_pieces = counts.unique_pieces();
    if (!quiet)
        print_info("counted " + std::to_string(s.pieces) + " pieces (" + std::to_string(s.unique_pieces) +
                   " distinct); learning up to " +
                   std::to_string(o.bpe.vocab_size - fixed) + " merges");

    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    const bool bar = o.progress == Progress::Mode::Bar ||
                     (o.progress == Progress::Mode::Auto && ::isatty(2));
    bool drawn = false;
    BpeTrainProgress on_progress = [&](std::size_t done, std::size_t wanted) {
        if (quiet) return;
        auto now = std::chrono::steady_clock::now();
        const double since = std::chrono::duration<double>(now - last).count();
        if (since < (bar ? 0.2 : o.progress_interval_s)) return;
        last = now;
        const double t = std::chrono::duration<double>(now - t0).count();
        char line[160];
        std::snprintf(line, sizeof line, "learned %zu of %zu tokens, %s", done, wanted, format_duration(t).c_str());
        if (bar) {
            std::fprintf(stderr, "\r\033[K%s", line);
            std::fflush(stderr);
            drawn = true;
        } else {
            print_info(line);
        }
    };
    TrainedBpe model = train_bpe(counts, o.bpe, on_progress);
    if (drawn) std::fprintf(stderr, "\r\033[K");
    s.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.merges = model.merges.size();
    s.merges_reusing_token = model.merges_reusing_token;
    s.last_merge_count = model.last_merge_count;
    s.vocab_size = model.tokens.size();

    std::vector<std::pair<std::string, std::string>> files{{"vocab.json", model.gpt2_vocab_json()},
                                                           {"merges.txt", model.gpt2_merges_txt()}};
    if (o.write_hf_json) files.emplace_back("tokenizer.json", model.hf_tokenizer_json());
    s.files = write_output_files(o.output_dir, files);
    return s;
}

}  // namespace mds::tok
