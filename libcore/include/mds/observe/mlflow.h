// MLflow tracking over its REST API 2.0 (docs/mlflow.md): the run's parameters, metrics with their
// steps and tags, sent by a background thread so that the training never waits for the server.
// Metrics are queued (bounded; what does not fit is counted and said once), sent in runs/log-batch
// requests within MLflow's limits, retried with backoff on connection errors, 5xx and 429; a server
// that is down gives rate-limited warnings and nothing else. At the end, a flush bounded in time
// and the run's status (FINISHED, KILLED, FAILED).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace mds::observe {

namespace mlflow_detail {
class RestClient;
}

// MLflow's limits (mlflow/utils/validation.py).
constexpr std::size_t kMlflowMaxMetricsPerBatch = 1000;
constexpr std::size_t kMlflowMaxParamsTagsPerBatch = 100;
constexpr std::size_t kMlflowMaxEntitiesPerBatch = 1000;
constexpr std::size_t kMlflowMaxKeyLength = 250;
constexpr std::size_t kMlflowMaxParamValueLength = 6000;
constexpr std::size_t kMlflowMaxTagValueLength = 8000;

// A TensorBoard tag (or any name) as a valid MLflow metric / param / tag key: every character other
// than ASCII letters, digits, '_', '-', '.', ' ' and '/' becomes '_' (the colon too: servers on
// Windows refuse it); the key must not change under POSIX path normalization, so empty path
// segments are dropped and a segment of only dots has its dots replaced by '_'; at most 250
// characters. "steps-vs-samples/y=steps,x=samples" → "steps-vs-samples/y_steps_x_samples".
std::string mlflow_key(std::string_view name);

// How a run ended, as MLflow's RunStatus names it.
enum class MlflowRunStatus { Finished, Failed, Killed };
const char* mlflow_status_name(MlflowRunStatus status);

struct MlflowConfig {
    std::string tracking_uri;     // http(s)://host[:port][/prefix]
    std::string experiment_name;  // used unless experiment_id is set
    std::string experiment_id;    // $MLFLOW_EXPERIMENT_ID
    std::string run_name;         // a new run's name ("" : the server picks one)
    std::string run_id;           // continue this run ("" : create one)
    // Authentication ($MLFLOW_TRACKING_TOKEN, or _USERNAME / _PASSWORD) and TLS
    // ($MLFLOW_TRACKING_INSECURE_TLS, $MLFLOW_TRACKING_SERVER_CERT_PATH).
    std::string token, username, password;
    bool insecure_tls = false;
    std::string ca_cert_path;
    double request_timeout_seconds = 10;  // one HTTP request, connection included
    double max_backoff_seconds = 30;      // retries wait 0.5, 1, 2, ... s up to this
    std::size_t max_queued_metrics = 200000;
    // Tags of a new run (mlflow.source.name, mlflow.user, ...).
    std::vector<std::pair<std::string, std::string>> run_tags;
};

// The tracking URI from the flag, else $MLFLOW_TRACKING_URI; the rest of the config from MLflow's
// environment variables. Empty tracking_uri: MLflow is off.
MlflowConfig mlflow_config_from_environment(const std::string& tracking_uri_flag, const std::string& experiment_flag,
                                            const std::string& run_name_flag);

// Why `uri` is not a tracking server mds can send to ("" when it is one): mds speaks MLflow's
// REST API over http(s) only (no file:, sqlite:, databricks: stores).
std::string mlflow_uri_problem(const std::string& uri);

// Sends to one MLflow run from a background thread. Every method returns at once (a mutex and a
// queue); the run is created or found by the thread, so `run_id()` is empty until the server has
// answered (or the configured id). Messages go to the `warn` function, at most one per kind a minute.
class MlflowLogger {
public:
    explicit MlflowLogger(MlflowConfig config);
    // Without finish(): the run is marked FAILED within a few seconds (an exception ended the training).
    ~MlflowLogger();
    MlflowLogger(const MlflowLogger&) = delete;
    MlflowLogger& operator=(const MlflowLogger&) = delete;

    // `key` must be valid (mlflow_key); `wall_time` in seconds since the epoch.
    void log_metric(const std::string& key, double value, std::int64_t step, double wall_time);
    // Parameters of this job: a key the run already has with another value (a resubmitted job with
    // other flags) becomes the tag mds.job.<n>.param.<key>, since MLflow's params cannot change.
    void log_param(const std::string& key, const std::string& value);
    void set_tag(const std::string& key, const std::string& value);
    // A tag of this job: mds.job.<n>.<suffix>, n = 1 + the jobs the run already has (counted from its
    // mds.job.<n>.start_time tags when the thread finds the run).
    void set_job_tag(const std::string& suffix, const std::string& value);

    // The run's id, once known ("" before, or when MLflow was given up on).
    std::string run_id() const;
    // The run's id, waiting at most `timeout_seconds` for the server to create or find the run (a
    // checkpoint saved in a job's first seconds must still name it).
    std::string wait_for_run_id(double timeout_seconds);

    // Sends what is queued, then marks the run with `status`, waiting at most `timeout_seconds`;
    // what is left then is dropped with a warning. Returns true when everything was sent. Once.
    bool finish(MlflowRunStatus status, double timeout_seconds);

    // Counters, for messages and tests.
    std::uint64_t metrics_sent() const { return metrics_sent_; }
    std::uint64_t metrics_dropped() const { return metrics_dropped_; }

private:
    struct Metric {
        std::string key;
        double value;
        std::int64_t step;
        std::int64_t timestamp_ms;
    };
    void run_thread();
    bool resolve_run();       // find or create the run; false: retry later (or gave up: disabled_)
    bool setup_failed(bool retryable, const std::string& why, const std::string& what);
    bool send_batch();        // one log-batch of what is queued; false: failed (retry later)
    bool send_status();       // runs/update
    void warn(const std::string& kind, const std::string& message);
    void wait_backoff(int failures);
    std::string job_key(const std::string& suffix) const;

    MlflowConfig config_;
    std::unique_ptr<mlflow_detail::RestClient> http_;

    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Metric> metrics_;
    std::deque<std::pair<std::string, std::string>> params_, tags_;
    std::deque<std::pair<std::string, std::string>> job_tags_;  // suffixes until the job number is known
    std::string run_id_;
    bool resolved_ = false;
    bool disabled_ = false;        // a permanent error: nothing more is sent
    bool stopping_ = false;        // finish() or the destructor: send what is left, then the status
    std::optional<MlflowRunStatus> final_status_;
    bool status_sent_ = false;
    bool drop_warned_ = false;
    int job_number_ = 0;
    std::map<std::string, std::string> run_params_;  // what the run already has (resolve_run)
    std::map<std::string, double> last_warning_;     // kind -> steady time in seconds
    std::map<std::string, int> suppressed_;
    std::atomic<bool> abort_{false};                 // the flush deadline passed: stop any request
    std::atomic<std::uint64_t> metrics_sent_{0}, metrics_dropped_{0};
    bool finished_ = false;
    std::thread thread_;
};

}  // namespace mds::observe
