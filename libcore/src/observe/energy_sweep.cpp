// mds-energy-sweep's runs (energy_sweep.h): one child mds-train per runnable setting, its output in
// <output-dir>/<setting>/train.log and its carbon tracker's emissions.csv beside it, then the
// measurement of each from those files.
#include "mds/observe/energy_sweep.h"

#include <unistd.h>  // access

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "mds/util/error.h"
#include "mds/util/files.h"        // read_file, write_file_atomic, file_exists
#include "mds/util/process.h"      // run_process
#include "mds/util/shell_quote.h"  // shell_quote, shell_join
#include "mds/util/text.h"         // trim

namespace mds::observe {

namespace fs = std::filesystem;

namespace {

bool is_executable(const std::string& path) {
    std::error_code ec;
    return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

// The mds-train to run: --mds-train as given (a bare name is looked up in PATH), else the one beside
// this program. Throws mds::Error when it is not an executable file.
std::string resolve_mds_train(const std::string& given) {
    if (given.empty()) {
        const std::string beside = sibling_executable("mds-train");
        if (!is_executable(beside))
            throw Error("mds-train not found beside this program (" + beside +
                        " is not an executable file); give its path with --mds-train");
        return beside;
    }
    if (given.find('/') == std::string::npos) {
        const char* path = std::getenv("PATH");
        std::string dirs = path ? path : "";
        std::size_t start = 0;
        while (start <= dirs.size()) {
            std::size_t colon = dirs.find(':', start);
            if (colon == std::string::npos) colon = dirs.size();
            const std::string dir = dirs.substr(start, colon - start);
            const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + given;
            if (is_executable(candidate)) return candidate;
            start = colon + 1;
        }
        throw Error("--mds-train " + given + ": not found in PATH");
    }
    if (!is_executable(given)) throw Error("--mds-train " + given + ": not an executable file");
    return given;
}

void create_folder(const std::string& path) {
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec || !fs::is_directory(path)) throw Error("cannot create folder " + path + ": " + ec.message());
}

// The last line of mds-train's output that reports an error, to say why a setting failed.
std::string last_error_line(const std::string& log_path) {
    std::string text;
    try {
        text = read_file(log_path);
    } catch (const Error&) {
        return {};
    }
    std::string found;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const std::string_view line(text.data() + start, end - start);
        if (line.find("error:") != std::string_view::npos) found = trim(line);
        start = end + 1;
    }
    return found.size() > 300 ? found.substr(0, 300) + "..." : found;
}

// Runs one setting and fills its row (status, note, measurement, source, totals).
void run_setting(const EnergySweepOptions& options, const SweepTrainFlags& info, const std::string& mds_train,
                 SweepRow& row) {
    const std::string dir = (fs::path(options.output_dir) / row.setting.slug()).string();
    create_folder(dir);
    row.log_path = dir + "/train.log";
    row.emissions_path = dir + "/emissions.csv";
    // A previous sweep's files would be appended to (emissions.csv) or read as this run's.
    std::error_code ec;
    fs::remove(row.emissions_path, ec);
    const std::vector<std::string> argv =
        sweep_train_argv(mds_train, options.train_flags, info, row.setting, options.train_iters, dir);
    {
        std::ofstream log(row.log_path, std::ios::trunc);
        log << "# mds-energy-sweep: " << shell_join(argv) << "\n";
        if (!log) throw Error("cannot write " + row.log_path);
    }
    // The child writes straight into its log (run_process would hold the output in memory until it
    // ends); the shell only redirects, then becomes mds-train.
    std::vector<std::string> shell{"/bin/sh", "-c", "exec \"$0\" \"$@\" >>" + shell_quote(row.log_path) + " 2>&1"};
    shell.insert(shell.end(), argv.begin(), argv.end());
    ProcessOptions po;
    if (options.timeout_s > 0)
        // At most ~31 years: past int64 the cast would be undefined (run_process caps the deadline further).
        po.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::min(options.timeout_s, 1e9) * 1000.0));
    const ProcessResult pr = run_process(shell, po);
    if (!pr.ok()) {
        row.status = SweepStatus::failed;
        const std::string why = last_error_line(row.log_path);
        row.note = "mds-train " + pr.describe() + (why.empty() ? "" : ": " + why) + " (log: " + row.log_path + ")";
        return;
    }
    try {
        const std::string log = read_file(row.log_path);
        row.measurement = measure_steady_window(parse_sweep_log(log), row.log_path);
        std::int64_t gpus = 0;
        if (file_exists(row.emissions_path)) {
            row.run_totals = read_emissions_totals(read_file(row.emissions_path), row.emissions_path);
            gpus = row.run_totals->gpu_count;
        }
        row.source = parse_energy_source(log, gpus);
        row.status = SweepStatus::ok;
    } catch (const Error& e) {
        row.status = SweepStatus::failed;
        row.note = e.what();
        row.measurement.reset();
    }
}

}  // namespace

std::string sibling_executable(const std::string& name) {
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (ec) throw Error("cannot find this program's folder (/proc/self/exe: " + ec.message() + ")");
    return (self.parent_path() / name).string();
}

SweepResult run_energy_sweep(const EnergySweepOptions& options) {
    if (options.micro_batch_sizes.empty()) throw UsageError("--micro-batch-sizes is empty; expected a list such as 1,2,4");
    if (options.global_batch_sizes.empty()) throw UsageError("--global-batch-sizes is empty; expected a list such as 8,16");
    if (options.train_iters < 2)
        throw UsageError("--train-iters " + std::to_string(options.train_iters) +
                         ": at least 2 (the first logged iteration is subtracted as warm-up)");
    const SweepTrainFlags info = inspect_sweep_train_flags(options.train_flags, !options.recompute.empty());
    const std::vector<SweepSetting> settings =
        plan_sweep(options.micro_batch_sizes, options.global_batch_sizes, options.recompute);
    std::size_t runnable = 0;
    for (const SweepSetting& s : settings) runnable += s.runnable() ? 1 : 0;
    if (runnable == 0)
        throw UsageError("no valid combination: every global batch size must be a multiple of a micro batch size (" +
                         settings.front().skip_reason + (settings.size() > 1 ? ", ..." : "") + ")");
    const std::string mds_train = resolve_mds_train(options.mds_train);
    create_folder(options.output_dir);

    SweepResult result;
    result.train_iters = options.train_iters;
    result.seq_length = info.seq_length;
    auto progress = [&](const std::string& m) {
        if (options.progress) options.progress(m);
    };
    for (std::size_t k = 0; k < settings.size(); ++k) {
        SweepRow row;
        row.setting = settings[k];
        const std::string head =
            "setting " + std::to_string(k + 1) + "/" + std::to_string(settings.size()) + ": " + row.setting.label();
        if (!row.setting.runnable()) {
            row.status = SweepStatus::skipped;
            row.note = row.setting.skip_reason;
            progress(head + ": skipped: " + row.note);
        } else {
            progress(head + ": running mds-train (log: " + (fs::path(options.output_dir) / row.setting.slug()).string() +
                     "/train.log)");
            run_setting(options, info, mds_train, row);
            if (row.status == SweepStatus::ok)
                progress(head + ": " + format_ms_per_iteration(row.measurement->ms_per_iteration()) + " ms/iteration, " +
                         format_tokens_per_second(row.measurement->tokens_per_second()) + " tokens/s, " +
                         format_per_million_tokens(row.measurement->kwh_per_million_tokens()) +
                         " kWh per million tokens");
            else
                progress(head + ": failed: " + row.note);
        }
        result.rows.push_back(std::move(row));
    }
    return result;
}

std::vector<std::string> write_sweep_outputs(const SweepResult& result, const std::string& output_dir) {
    const std::string dir = output_dir.empty() ? "." : output_dir;
    const std::vector<std::pair<std::string, std::string>> files{
        {dir + "/sweep.csv", sweep_csv(result)},
        {dir + "/sweep.json", sweep_json(result)},
        {dir + "/sweep.svg", sweep_svg(result)},
    };
    std::vector<std::string> paths;
    for (const auto& [path, content] : files) {
        write_file_atomic(path, content);
        paths.push_back(path);
    }
    return paths;
}

}  // namespace mds::observe
