// mds-sample-text: which text trained iteration N. From the training's flags (a run ledger line, or
// mds-train's command line after `--`) and iterations, consumed samples or sample ids, prints the
// samples each iteration / micro batch / data-parallel rank read, their dataset (blending), document
// pieces and decoded text, walking mds-train's own data path (mds/trainer/sample_map.h).
// docs/mds-sample-text.md has every flag.
#include <unistd.h>  // chdir

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "mds/flags/train_args.h"
#include "mds/flags/train_tokenizer.h"
#include "mds/trainer/run_ledger.h"
#include "mds/trainer/sample_map.h"
#include "mds/trainer/sample_print.h"
#include "mds/util/cli.h"
#include "mds/util/error.h"
#include "mds/util/int_range.h"
#include "mds/util/tool.h"

namespace {

using mds::Error;
using mds::UsageError;

// A whole number >= 0 (an id or a bound of a range).
std::int64_t parse_int(const std::string& text, const std::string& flag) {
    const auto v = mds::parse_whole_number(text);
    if (!v) throw UsageError(flag + " " + mds::whole_number_problem(text));
    return *v;
}

// "A", "A-B" or the two values "A" "B".
mds::IntRange parse_range(const std::vector<std::string>& values, const std::string& flag, bool single_allowed) {
    if (values.size() == 2) {
        const mds::IntRange r{parse_int(values[0], flag), parse_int(values[1], flag)};
        if (r.last < r.first) throw UsageError(flag + ": the range ends (" + values[1] + ") before it starts (" + values[0] + ")");
        return r;
    }
    if (values.size() != 1) throw UsageError(flag + ": expected A-B or A B");
    const auto p = mds::parse_int_range(values[0], single_allowed);
    if (!p.problem.empty()) throw UsageError(flag + " " + values[0] + ": " + p.problem);
    return p.range;
}

std::vector<std::int64_t> parse_ids(const std::string& text) {
    std::vector<std::int64_t> ids;
    std::size_t start = 0;
    while (start <= text.size()) {
        const auto comma = text.find(',', start);
        const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        ids.push_back(parse_int(part, "--sample-ids"));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return ids;
}

std::string describe_entries(const std::vector<mds::trainer::LedgerEntry>& entries) {
    std::string out;
    for (const auto& e : entries) {
        out += "\n  line " + std::to_string(e.line) + ": " + e.status + ", iterations " +
               std::to_string(e.resumed_iteration + 1) + "-" + std::to_string(e.iteration) + ", consumed samples " +
               std::to_string(e.resumed_consumed_samples) + "-" + std::to_string(e.consumed_samples);
    }
    return out.empty() ? " it has no lines" : out;
}

}  // namespace

int main(int argc, char** argv) {
    return mds::run_tool("mds-sample-text", [&]() -> int {
        int split = argc;  // everything after `--` is mds-train's command line
        for (int i = 1; i < argc; ++i)
            if (std::strcmp(argv[i], "--") == 0) {
                split = i;
                break;
            }
        std::string ledger, format = "text", sample_ids;
        std::vector<std::string> iterations, consumed;
        std::optional<std::int64_t> dp_flag, resume_flag, resume_consumed_flag;
        std::int64_t max_chars = -1;
        bool tokens = false, quiet = false;
        CLI::App app{"Print the training samples an iteration read, as mds-train (and Megatron-DeepSpeed) fed them: per "
                     "micro batch and data-parallel rank, the sample id, its dataset (blending), document pieces and "
                     "decoded text.\n"
                     "  mds-sample-text --ledger runs.jsonl --iterations A[-B] [options]\n"
                     "  mds-sample-text [--data-parallel-size D] [--resume-iteration R] (--iterations A[-B] | "
                     "--consumed-samples A-B | --sample-ids N[,M...]) [options] -- <mds-train's flags>",
                     "mds-sample-text"};
        mds::add_version_flag(app, "mds-sample-text");
        const char* sel = "What to print";
        const char* run = "The training run";
        app.add_option("--iterations", iterations, "Iterations A or A-B (inclusive)")->type_name("A[-B]")
            ->expected(1, 2)->group(sel);
        app.add_option("--consumed-samples", consumed, "Samples whose consumed-samples count is in [A, B), as "
                                                       "BigScience's tools/sample_idxs_to_text.py --sample-id-range A B")
            ->type_name("A-B")->expected(1, 2)->group(sel);
        app.add_option("--sample-ids", sample_ids, "Training dataset sample ids (after the sampler), comma separated")
            ->type_name("N[,M...]")->group(sel);
        app.add_option("--ledger", ledger, "mds-train's run ledger (runs.jsonl): the training flags, data-parallel size "
                                           "and resumed iteration of the job that trained --iterations A")
            ->type_name("PATH")->group(run);
        app.add_option("--data-parallel-size", dp_flag, "Data-parallel ranks of the run (with `--`; default 1)")
            ->type_name("D")->check(mds::number_in(1, 1 << 20))->group(run);
        app.add_option("--resume-iteration", resume_flag, "Iteration of the checkpoint the launch resumed from (with "
                                                          "`--`; default 0: a fresh start)")
            ->type_name("R")->check(mds::non_negative_number())->group(run);
        app.add_option("--resume-consumed-samples", resume_consumed_flag,
                       "Consumed samples of that checkpoint (default: the batch sizes replayed through the ramp-up)")
            ->type_name("C")->check(mds::non_negative_number())->group(run);
        app.option_defaults()->group("Output");
        app.add_option("--format", format, "text (a header line per sample, then its text) or jsonl (one object per "
                                           "sample)")
            ->type_name("text|jsonl")->check(CLI::IsMember({"text", "jsonl"}))->default_str("text");
        app.add_flag("--tokens", tokens, "Also print the seq-length + 1 token ids of each sample");
        app.add_option("--max-chars", max_chars, "Cut each text to N bytes (default: all)")
            ->check(mds::non_negative_number())->type_name("N");
        app.add_flag("-q,--quiet", quiet, "No data set-up messages on stderr");
        if (auto rc = mds::parse_cli(app, split, argv)) return *rc;

        const int selections = (iterations.empty() ? 0 : 1) + (consumed.empty() ? 0 : 1) + (sample_ids.empty() ? 0 : 1);
        if (selections != 1) throw UsageError("give exactly one of --iterations, --consumed-samples, --sample-ids");
        std::optional<mds::IntRange> its, cons;
        if (!iterations.empty()) {
            its = parse_range(iterations, "--iterations", true);
            if (its->first < 1) throw UsageError("--iterations: iterations count from 1");
        }
        if (!consumed.empty()) cons = parse_range(consumed, "--consumed-samples", false);

        // ---- the training's flags, data-parallel size and resumed iteration ----
        std::vector<std::string> train_flags(argv + (split < argc ? split + 1 : argc), argv + argc);
        std::int64_t dp = dp_flag.value_or(1), resumed = resume_flag.value_or(0);
        std::optional<std::int64_t> resumed_consumed = resume_consumed_flag;
        std::optional<std::int64_t> job_last;  // last iteration the ledger line's job trained (stopped lines)
        std::string where = "the flags after --";
        if (!ledger.empty()) {
            if (split < argc) throw UsageError("--ledger takes the training's flags from the ledger: give no `--` flags");
            if (dp_flag || resume_flag || resume_consumed_flag)
                throw UsageError("--ledger gives the data-parallel size and the resumed iteration: drop "
                                 "--data-parallel-size / --resume-iteration / --resume-consumed-samples");
            const auto entries = mds::trainer::read_ledger(ledger);
            const mds::trainer::LedgerEntry* e = nullptr;
            std::string wanted;
            if (its) {
                e = mds::trainer::find_ledger_entry(entries, its->first);
                wanted = "trained iteration " + std::to_string(its->first);
            } else if (cons) {
                for (const auto& x : entries)
                    if (x.resumed_consumed_samples <= cons->first &&
                        (cons->first < x.consumed_samples || x.status == "running"))
                        e = &x;
                wanted = "consumed sample " + std::to_string(cons->first);
            } else if (!entries.empty()) {
                e = &entries.back();
            }
            if (!e) throw Error("no line of the ledger " + ledger + (wanted.empty() ? "" : " " + wanted) + ":" +
                                describe_entries(entries));
            where = ledger + " line " + std::to_string(e->line);
            train_flags = e->command_line;
            dp = e->layout.dp;
            resumed = e->resumed_iteration;
            resumed_consumed = e->resumed_consumed_samples;
            if (e->status != "running") job_last = e->iteration;
            if (!e->cwd.empty() && ::chdir(e->cwd.c_str()) != 0)
                throw Error(where + ": cannot enter its working directory " + e->cwd + ": " + std::strerror(errno));
            if (!quiet) mds::print_info("the training of " + where + ": iterations " + std::to_string(resumed + 1) + "-" +
                                        (job_last ? std::to_string(*job_last) : std::string("(running)")) +
                                        ", data-parallel size " + std::to_string(dp) + ", in " + e->cwd);
        } else if (split >= argc) {
            throw UsageError("give the training's flags: --ledger PATH, or `--` followed by mds-train's command line");
        }

        mds::flags::TrainArgs args;
        {
            CLI::App t{"mds-train's flags", "mds-train"};
            mds::flags::add_train_flags(t, args);
            t.allow_extras();  // mds-train's own flags (--device, --alert-command, ...) do not change the data
            std::vector<std::string> all{"mds-train"};
            all.insert(all.end(), train_flags.begin(), train_flags.end());
            std::vector<char*> ptrs;
            for (auto& s : all) ptrs.push_back(s.data());
            if (auto rc = mds::parse_cli(t, static_cast<int>(ptrs.size()), ptrs.data())) {
                if (*rc == 0) return 0;
                throw UsageError("the training flags (" + where + ") do not parse");
            }
        }
        args.parallel.world_size = dp * args.parallel.tensor_model_parallel_size * args.parallel.pipeline_model_parallel_size;
        (void)mds::flags::resolve_train_args(args);  // mds-train prints its warnings; the data is what matters here

        mds::trainer::SampleMapOptions mopt;
        mopt.data_parallel_size = dp;
        mopt.resumed_iteration = resumed;
        mopt.resumed_consumed_samples = resumed_consumed;
        if (!quiet) mopt.log = [](const std::string& m) { mds::print_info(m); };
        const mds::trainer::SampleMap map(args, mopt);
        const auto tokenizer = mds::flags::load_tokenizer(args.data);
        const mds::trainer::SamplePrinter p(map, tokenizer, {format == "jsonl", tokens, max_chars});
        const auto print = [](const std::string& s) { std::fputs(s.c_str(), stdout); };
        const std::int64_t mbs = args.optimizer.micro_batch_size;

        if (!sample_ids.empty()) {
            for (auto id : parse_ids(sample_ids)) {
                if (id >= map.dataset_size())
                    throw Error("sample " + std::to_string(id) + " is beyond the training dataset's " +
                                std::to_string(map.dataset_size()) + " samples");
                print(p.sample(id, nullptr, map.seq_length()));
            }
            return 0;
        }
        if (its) {
            if (its->first <= resumed)
                throw UsageError("iteration " + std::to_string(its->first) + " was trained before the launch resumed at " +
                                 std::to_string(resumed) + " (" + where + "): give the launch that trained it" +
                                 (ledger.empty() ? " (its --resume-iteration)" : ""));
            if (its->last > map.train_iters())
                throw UsageError("iteration " + std::to_string(its->last) + " is beyond the training's " +
                                 std::to_string(map.train_iters()) + " iterations");
            if (job_last && its->last > *job_last)
                throw Error("iteration " + std::to_string(its->last) + " was not trained by the job of " + where +
                            ": it stopped at iteration " + std::to_string(*job_last));
            map.walk(its->last, [&](const mds::trainer::MappedIteration& it) {
                if (it.iteration < its->first) return true;
                print(p.iteration_header(it, dp, mbs));
                for (const auto& s : it.samples) print(p.sample(s.sample, &s, it.seqlen));
                return true;
            });
            return 0;
        }
        // --consumed-samples [A, B): the run's consumed samples are checked before anything is printed.
        if (cons->first < map.resumed_consumed_samples())
            throw UsageError("consumed sample " + std::to_string(cons->first) + " was read before the launch resumed with " +
                             std::to_string(map.resumed_consumed_samples()) + " consumed samples (" + where + ")");
        std::int64_t total = map.resumed_consumed_samples();
        map.walk(map.train_iters(), [&](const mds::trainer::MappedIteration& it) {
            total = it.consumed_before + it.batch_size;
            return total < cons->last;
        });
        if (total < cons->last)
            throw UsageError("--consumed-samples ends at " + std::to_string(cons->last) + ", beyond the training's " +
                             std::to_string(total) + " samples");
        map.walk(map.train_iters(), [&](const mds::trainer::MappedIteration& it) {
            if (it.consumed_before >= cons->last) return false;
            bool header = false;
            for (const auto& s : it.samples) {
                if (s.consumed < cons->first || s.consumed >= cons->last) continue;
                if (!header) print(p.iteration_header(it, dp, mbs));
                header = true;
                print(p.sample(s.sample, &s, it.seqlen));
            }
            return true;
        });
        return 0;
    });
}
