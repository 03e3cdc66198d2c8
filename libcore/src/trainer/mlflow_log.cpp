// MLflow from mds-train (docs/mlflow.md): which run (MLFLOW_RUN_ID, else the one the checkpoint names,
// else a new one), the run's params (the checkpoint's args Namespace and the mds-only flags), this
// job's tags from what the run ledger knows, and at the end the job's last tags and the run's status.
// Only the last rank talks to MLflow (as it alone writes TensorBoard); the scalars go through tb_
// (metrics_log.h).
#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "mds/flags/flag_table.h"  // flag_table, namespace_value
#include "mds/util/error.h"
#include "mds/util/cli.h"  // mds_version
#include "mds/util/tool.h"  // print_info, print_warning
#include "megatron_args.h"
#include "trainer_loop.h"

namespace mds::trainer {
namespace {

// Attributes of the args Namespace that are progress, not settings: they change at every save.
bool progress_key(const std::string& key) {
    static const char* const kProgress[] = {"iteration", "consumed_train_samples", "consumed_valid_samples",
                                            "consumed_train_tokens", "gigaflos_no_embeds", "skip_train_iteration_range",
                                            "save_interval"};
    for (const char* k : kProgress)
        if (key == k) return true;
    return false;
}

// The experiment when neither the flag nor MLFLOW_EXPERIMENT_NAME / _ID names one: the --save
// folder's name (a training's checkpoints and its runs go together), else "mds".
std::string default_experiment(const std::string& save) {
    if (save.empty()) return "mds";
    auto p = std::filesystem::path(save).lexically_normal();
    std::string name = p.filename().string();
    if (name.empty()) name = p.parent_path().filename().string();
    return name.empty() || name == "." || name == ".." ? "mds" : name;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
    std::string s;
    for (const auto& i : items) s += (s.empty() ? "" : sep) + i;
    return s;
}

}  // namespace

std::unique_ptr<observe::MlflowLogger> Trainer::make_mlflow_logger() {
    const auto& lg = args_.logging;
    auto config = observe::mlflow_config_from_environment(lg.mlflow_tracking_uri, lg.mlflow_experiment_name, lg.mlflow_run_name);
    if (config.tracking_uri.empty()) return nullptr;
    if (!(lg.mlflow_flush_timeout >= 0))
        throw UsageError("--mlflow-flush-timeout must be 0 or more seconds, got " + std::to_string(lg.mlflow_flush_timeout));
    if (const auto problem = observe::mlflow_uri_problem(config.tracking_uri); !problem.empty()) {
        // A wrong address must not cost the training: it runs without MLflow.
        if (log_rank_) print_warning("MLflow is off in this job: " + problem);
        return nullptr;
    }
    mlflow_on_ = true;
    if (!log_rank_) return nullptr;
    if (config.experiment_name.empty() && config.experiment_id.empty())
        config.experiment_name = default_experiment(args_.checkpoint.save);
    // MLFLOW_RUN_ID wins; else the run the loaded checkpoint logged to (a resubmitted job continues it).
    if (config.run_id.empty()) config.run_id = resumed_.mlflow_run_id;
    config.run_tags = {{"mlflow.source.name", "mds-train"}, {"mlflow.source.type", "JOB"}};
    if (const char* user = std::getenv("USER"); user && *user) config.run_tags.emplace_back("mlflow.user", user);
    print_info("MLflow: logging to " + config.tracking_uri + ", " +
               (config.run_id.empty() ? "a new run in experiment " +
                                            (config.experiment_id.empty() ? "'" + config.experiment_name + "'"
                                                                          : config.experiment_id)
                                      : "run " + config.run_id));
    return std::make_unique<observe::MlflowLogger>(std::move(config));
}

void Trainer::start_mlflow(const ckpt::PyValue* args) {
    if (!mlflow_on_) return;
    const auto hosts = ledger_hosts();  // every rank joins
    if (!tb_ || !tb_->mlflow() || !args) return;
    auto& ml = *tb_->mlflow();
    // Params: the Namespace the checkpoint holds (what BMD's `vars(args)` has), then mds's own flags.
    for (const auto& [k, v] : args->namespace_attributes().items()) {
        if (k.type() != ckpt::PyType::Str || progress_key(k.as_str())) continue;
        ml.log_param(observe::mlflow_key(k.as_str()), python_str(v, observe::kMlflowMaxParamValueLength));
    }
    for (const auto& row : flags::flag_table()) {
        // mds-only rows (no Namespace key); a --no-X row shares its slot with --X and is left out.
        if (!row.key.empty() || !row.slot || !(row.tools & flags::kToolTrain) || !row.store ||
            row.status == flags::FlagStatus::Refused || row.status == flags::FlagStatus::Undeclared)
            continue;
        std::string name = row.long_name().substr(2);
        for (auto& c : name)
            if (c == '-') c = '_';
        try {
            ml.log_param(observe::mlflow_key(name),
                         python_str(flags::namespace_value(row, args_), observe::kMlflowMaxParamValueLength));
        } catch (const Error&) {
            // A row whose value only the Namespace writer derives: it is in the Namespace above.
        }
    }
    // This job, as the run ledger sees it (docs/run-ledger.md).
    ml.set_job_tag("start_time", iso8601_utc_now());
    if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job) ml.set_job_tag("slurm_job_id", job);
    ml.set_job_tag("hosts", join(hosts, ","));
    std::string layout = "TP " + std::to_string(tp_size_) + " x PP " + std::to_string(pp_size_) + " x DP " +
                         std::to_string(dp_) + " = " + std::to_string(world_) + " process";
    if (world_ > 1) layout += "es";
    ml.set_job_tag("layout", layout);
    ml.set_job_tag("resumed_iteration", std::to_string(resumed_.iteration));
    ml.set_job_tag("resumed_consumed_samples", std::to_string(resumed_.consumed_train_samples));
    if (!loaded_dir_.empty()) ml.set_job_tag("loaded", loaded_dir_);
    ml.set_job_tag("mds_version", mds_version());
    ml.set_job_tag("command_line", join(options_.command_line, " "));
    if (const auto ledger = resolve_ledger_path(options_.run_ledger, args_.checkpoint.save); !ledger.empty())
        ml.set_job_tag("run_ledger", ledger);
}

// The run id that the checkpoint keeps: the last rank's, on every rank (data-parallel rank 0 of each
// model-parallel rank writes its mp_rank file). A job without MLflow keeps the id it loaded.
std::string Trainer::mlflow_run_id_for_checkpoint() {
    if (!mlflow_on_) return resumed_.mlflow_run_id;
    // The first save may come before the server has created the run (a short job, a slow server): it
    // waits for the id, once, up to 30 s (a loaded server took over 5 s to create the run, and the
    // job's checkpoints then lacked the id, so its next job started a new run); a server that answers
    // or fails ends the wait at once. Later saves take what is known.
    constexpr double kFirstSaveWaitSeconds = 30.0;
    const double wait_s = std::exchange(mlflow_id_waited_, true) ? 0.0 : kFirstSaveWaitSeconds;
    const std::string mine = tb_ && tb_->mlflow() ? tb_->mlflow()->wait_for_run_id(wait_s) : std::string();
    if (world_ == 1) return mine;
    constexpr std::int64_t kLen = 64;  // MLflow's run ids are 32 hex characters
    at::Tensor t = at::zeros({kLen}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr<std::uint8_t>(), mine.data(), std::min<std::size_t>(mine.size(), kLen - 1));
    for (const auto& g : comm_->all_gather(t, Group::World)) {
        const at::Tensor c = g.to(at::kCPU).contiguous();
        const auto* s = reinterpret_cast<const char*>(c.data_ptr<std::uint8_t>());
        std::string id(s, ::strnlen(s, kLen));
        if (!id.empty()) return id;
    }
    return {};
}

void Trainer::finish_mlflow(Stop stop) {
    if (!tb_ || !tb_->mlflow()) return;
    auto& ml = *tb_->mlflow();
    ml.set_job_tag("end_time", iso8601_utc_now());
    ml.set_job_tag("iteration", std::to_string(iteration_));
    ml.set_job_tag("consumed_samples", std::to_string(consumed_));
    ml.set_job_tag("stop", summary_.exit_reason);
    // FINISHED when the training reached its end; a job stopped before (an exit flag, a signal, the
    // kill switch) leaves the run KILLED until a resubmitted job sets it RUNNING again.
    ml.finish(stop == Stop::Finished ? observe::MlflowRunStatus::Finished : observe::MlflowRunStatus::Killed,
              args_.logging.mlflow_flush_timeout);
}

void Trainer::record_mlflow_error(const std::string& message) {
    if (!tb_ || !tb_->mlflow()) return;
    auto& ml = *tb_->mlflow();
    ml.set_job_tag("end_time", iso8601_utc_now());
    ml.set_job_tag("iteration", std::to_string(iteration_));
    ml.set_job_tag("stop", "error: " + message);
    ml.finish(observe::MlflowRunStatus::Failed, args_.logging.mlflow_flush_timeout);
}

}  // namespace mds::trainer
