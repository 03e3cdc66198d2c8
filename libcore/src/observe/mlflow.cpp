// MLflow tracking (mds/observe/mlflow.h): keys, configuration from MLflow's environment variables,
// and the background sender. Only this thread talks to the server; the training thread appends to
// queues under a mutex and never waits for the network.
#include "mds/observe/mlflow.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "mds/util/tool.h"  // print_warning
#include "mlflow_http.h"

namespace mds::observe {

using mlflow_detail::Response;
using mlflow_detail::RestClient;

namespace {

double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::int64_t epoch_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

bool env_true(const char* name) {
    std::string v = env(name);
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return v == "true" || v == "1" || v == "yes";
}

// At most `n` bytes, not cutting a UTF-8 sequence (the server stores text).
std::string cut_utf8(const std::string& s, std::size_t n) {
    if (s.size() <= n) return s;
    std::size_t end = n;
    while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
    return s.substr(0, end);
}

// JSON's numbers have no NaN or infinities; MLflow's protobuf JSON takes them as these strings.
nlohmann::json metric_value(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    return v;
}

// "mds.job.<n>.start_time" → n (0 when the key is not one).
int job_number_of(const std::string& key) {
    const std::string head = "mds.job.", tail = ".start_time";
    if (key.size() <= head.size() + tail.size() || key.compare(0, head.size(), head) != 0 ||
        key.compare(key.size() - tail.size(), tail.size(), tail) != 0)
        return 0;
    const std::string digits = key.substr(head.size(), key.size() - head.size() - tail.size());
    if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return 0;
    return std::stoi(digits);
}

}  // namespace

std::string mlflow_key(std::string_view name) {
    std::string mapped;
    for (char c : name) {
        const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                          c == '-' || c == '.' || c == ' ' || c == '/';
        mapped += keep ? c : '_';
    }
    // posixpath.normpath(key) must be the key: no empty, "." or ".." segment, no leading or trailing '/'.
    std::string key;
    std::size_t i = 0;
    while (i <= mapped.size()) {
        const std::size_t j = std::min(mapped.find('/', i), mapped.size());
        std::string seg = mapped.substr(i, j - i);
        i = j + 1;
        if (seg.empty()) continue;
        if (seg.find_first_not_of('.') == std::string::npos) std::fill(seg.begin(), seg.end(), '_');
        if (!key.empty()) key += '/';
        key += seg;
    }
    if (key.empty()) key = "_";
    if (key.size() > kMlflowMaxKeyLength) {
        key.resize(kMlflowMaxKeyLength);
        while (key.size() > 1 && key.back() == '/') key.pop_back();
        if (key.size() > 1 && key.back() == '.' && key.find_last_not_of('.') != std::string::npos &&
            key[key.find_last_not_of('.')] == '/')
            key.back() = '_';  // a cut ending in "/." or "/..": still a dots-only segment
    }
    return key;
}

const char* mlflow_status_name(MlflowRunStatus status) {
    switch (status) {
    case MlflowRunStatus::Finished: return "FINISHED";
    case MlflowRunStatus::Failed: return "FAILED";
    case MlflowRunStatus::Killed: return "KILLED";
    }
    return "FAILED";
}

std::string mlflow_uri_problem(const std::string& uri) {
    const bool http = uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0;
    if (!http)
        return "--mlflow-tracking-uri / MLFLOW_TRACKING_URI '" + uri +
               "' is not an MLflow tracking server's http:// or https:// address (mds sends over MLflow's REST API; "
               "file:, sqlite: and databricks: stores are not supported)";
    const auto host_start = uri.find("//") + 2;
    if (host_start >= uri.size() || uri[host_start] == '/' || uri[host_start] == ':')
        return "--mlflow-tracking-uri '" + uri + "' names no host";
    return {};
}

MlflowConfig mlflow_config_from_environment(const std::string& tracking_uri_flag, const std::string& experiment_flag,
                                            const std::string& run_name_flag) {
    MlflowConfig c;
    c.tracking_uri = !tracking_uri_flag.empty() ? tracking_uri_flag : env("MLFLOW_TRACKING_URI");
    c.experiment_name = !experiment_flag.empty() ? experiment_flag : env("MLFLOW_EXPERIMENT_NAME");
    // The flag names an experiment by name; $MLFLOW_EXPERIMENT_ID counts only without it.
    if (experiment_flag.empty()) c.experiment_id = env("MLFLOW_EXPERIMENT_ID");
    c.run_name = run_name_flag;
    c.run_id = env("MLFLOW_RUN_ID");
    c.token = env("MLFLOW_TRACKING_TOKEN");
    c.username = env("MLFLOW_TRACKING_USERNAME");
    c.password = env("MLFLOW_TRACKING_PASSWORD");
    c.insecure_tls = env_true("MLFLOW_TRACKING_INSECURE_TLS");
    c.ca_cert_path = env("MLFLOW_TRACKING_SERVER_CERT_PATH");
    return c;
}

// ---- the logger -------------------------------------------------------------------------------

MlflowLogger::MlflowLogger(MlflowConfig config) : config_(std::move(config)) {
    run_id_ = config_.run_id;  // known before the server answers: a checkpoint saved meanwhile keeps it
    http_ = std::make_unique<RestClient>(config_, abort_);
    thread_ = std::thread([this] { run_thread(); });
}

MlflowLogger::~MlflowLogger() {
    if (!finished_) (void)finish(MlflowRunStatus::Failed, 5.0);
}

void MlflowLogger::log_metric(const std::string& key, double value, std::int64_t step, double wall_time) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || disabled_) return;
    if (metrics_.size() >= config_.max_queued_metrics) {
        ++metrics_dropped_;
        if (!drop_warned_) {
            drop_warned_ = true;
            print_warning("MLflow: " + std::to_string(metrics_.size()) +
                          " metrics are waiting for the server: new ones are dropped until it catches up (the "
                          "count is given at the end)");
        }
        return;
    }
    metrics_.push_back({key, value, step, static_cast<std::int64_t>(std::llround(wall_time * 1000.0))});
}

void MlflowLogger::log_param(const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_ && !disabled_) params_.emplace_back(key, cut_utf8(value, kMlflowMaxParamValueLength));
}

void MlflowLogger::set_tag(const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!disabled_) tags_.emplace_back(key, cut_utf8(value, kMlflowMaxTagValueLength));
}

void MlflowLogger::set_job_tag(const std::string& suffix, const std::string& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!disabled_) job_tags_.emplace_back(suffix, cut_utf8(value, kMlflowMaxTagValueLength));
}

std::string MlflowLogger::run_id() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return run_id_;
}

std::string MlflowLogger::wait_for_run_id(double timeout_seconds) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, std::chrono::duration<double>(std::max(0.0, timeout_seconds)),
                   [this] { return resolved_ || disabled_ || stopping_ || !run_id_.empty(); });
    return run_id_;
}

std::string MlflowLogger::job_key(const std::string& suffix) const {
    return mlflow_key("mds.job." + std::to_string(job_number_) + "." + suffix);
}

void MlflowLogger::warn(const std::string& kind, const std::string& message) {
    // One message per kind a minute: a server down for hours must not fill the log.
    const double now = steady_seconds();
    auto it = last_warning_.find(kind);
    if (it != last_warning_.end() && now - it->second < 60.0) {
        ++suppressed_[kind];
        return;
    }
    last_warning_[kind] = now;
    std::string m = "MLflow: " + message;
    if (const int n = std::exchange(suppressed_[kind], 0); n > 0)
        m += " (" + std::to_string(n) + " similar message" + (n > 1 ? "s" : "") + " in the last minute not shown)";
    print_warning(m);
}

void MlflowLogger::wait_backoff(int failures) {
    const double wait = std::min(config_.max_backoff_seconds, 0.5 * std::pow(2.0, std::min(failures - 1, 16)));
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, std::chrono::duration<double>(wait), [this] { return abort_.load(); });
}

bool MlflowLogger::resolve_run() {
    std::string id = config_.run_id;
    if (!id.empty()) {
        const Response r = http_->get("runs/get", "run_id", id);
        if (r.retryable()) {
            warn("connect", "cannot reach " + config_.tracking_uri + " (" + r.describe() + "); retrying, the training goes on");
            return false;
        }
        const auto j = r.json();
        const bool active = r.ok() && j.contains("run") && j["run"]["info"].value("lifecycle_stage", "") == "active";
        if (!active) {
            print_warning("MLflow: run " + id + " cannot be continued (" +
                          (r.ok() ? std::string("it was deleted") : r.describe()) + "): starting a new run");
            config_.run_id.clear();
            std::lock_guard<std::mutex> lock(mutex_);
            run_id_.clear();
            return false;  // the next round creates one
        }
        const auto& data = j["run"].value("data", nlohmann::json::object());
        int jobs = 0;
        for (const auto& p : data.value("params", nlohmann::json::array()))
            run_params_[p.value("key", "")] = p.value("value", "");
        for (const auto& t : data.value("tags", nlohmann::json::array())) jobs = std::max(jobs, job_number_of(t.value("key", "")));
        const Response u = http_->post("runs/update", {{"run_id", id}, {"status", "RUNNING"}});
        if (!u.ok()) {
            warn("connect", "cannot mark run " + id + " RUNNING (" + u.describe() + "); retrying");
            return false;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        run_id_ = id;
        job_number_ = jobs + 1;
        resolved_ = true;
        wake_.notify_all();  // wait_for_run_id
        return true;
    }
    std::string experiment = config_.experiment_id;
    if (experiment.empty()) {
        Response r = http_->get("experiments/get-by-name", "experiment_name", config_.experiment_name);
        if (r.status == 404 || r.error_code() == "RESOURCE_DOES_NOT_EXIST") {
            r = http_->post("experiments/create", {{"name", config_.experiment_name}});
            if (r.error_code() == "RESOURCE_ALREADY_EXISTS") return false;  // created meanwhile: look it up again
            if (r.ok()) experiment = r.json().value("experiment_id", "");
        } else if (r.ok()) {
            experiment = r.json()["experiment"].value("experiment_id", "");
        }
        if (experiment.empty()) return setup_failed(r.retryable(), r.describe(), "experiment '" + config_.experiment_name + "'");
    }
    nlohmann::json body = {{"experiment_id", experiment}, {"start_time", epoch_ms()}};
    if (!config_.run_name.empty()) body["run_name"] = config_.run_name;
    auto tags = nlohmann::json::array();
    for (const auto& [k, v] : config_.run_tags) tags.push_back({{"key", k}, {"value", v}});
    body["tags"] = tags;
    const Response r = http_->post("runs/create", body);
    const auto j = r.json();
    if (r.ok() && j.contains("run")) {
        std::lock_guard<std::mutex> lock(mutex_);
        run_id_ = j["run"]["info"].value("run_id", "");
        job_number_ = 1;
        resolved_ = !run_id_.empty();
        wake_.notify_all();  // wait_for_run_id
        return resolved_;
    }
    return setup_failed(r.retryable(), r.describe(), "creating a run in experiment " + experiment);
}

// A request on the way to the run failed: retried later when the server may come back (connection
// errors, 5xx, 429), else MLflow is off for this job. Always false (resolve_run's "not yet").
bool MlflowLogger::setup_failed(bool retryable, const std::string& why, const std::string& what) {
    if (retryable) {
        warn("connect", "cannot reach " + config_.tracking_uri + " (" + why + "); retrying, the training goes on");
        return false;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        disabled_ = true;
        wake_.notify_all();
    }
    print_warning("MLflow: " + what + " at " + config_.tracking_uri + ": " + why + ": nothing is sent to MLflow in this job");
    return false;
}

bool MlflowLogger::send_batch() {
    // Take a batch from the fronts of the queues (only this thread removes from them).
    nlohmann::json params = nlohmann::json::array(), tags = nlohmann::json::array(), metrics = nlohmann::json::array();
    std::size_t n_params = 0, n_tags = 0, n_metrics = 0, bytes = 0;
    std::vector<std::pair<std::string, std::string>> new_params;
    const std::size_t max_bytes = 800 * 1000;  // MLflow refuses log-batch bodies over 1 MB
    {
        std::lock_guard<std::mutex> lock(mutex_);
        while (!job_tags_.empty()) {
            tags_.emplace_back(job_key(job_tags_.front().first), job_tags_.front().second);
            job_tags_.pop_front();
        }
        // Params the run has with another value become tags of this job (MLflow's params are immutable).
        for (auto& [k, v] : params_) {
            auto it = run_params_.find(k);
            if (it != run_params_.end() && it->second != v) {
                tags_.emplace_back(job_key("param." + k), v);
                k.clear();
            } else if (it != run_params_.end()) {
                k.clear();  // already there with this value
            }
        }
        while (n_params < params_.size() && n_params < kMlflowMaxParamsTagsPerBatch && bytes < max_bytes) {
            const auto& [k, v] = params_[n_params++];
            if (k.empty()) continue;
            params.push_back({{"key", k}, {"value", v}});
            new_params.emplace_back(k, v);
            bytes += k.size() + v.size() + 32;
        }
        while (n_tags < tags_.size() && n_tags < kMlflowMaxParamsTagsPerBatch && bytes < max_bytes) {
            const auto& [k, v] = tags_[n_tags++];
            tags.push_back({{"key", k}, {"value", v}});
            bytes += k.size() + v.size() + 32;
        }
        const std::size_t room = kMlflowMaxEntitiesPerBatch - params.size() - tags.size();
        while (n_metrics < metrics_.size() && n_metrics < std::min(room, kMlflowMaxMetricsPerBatch) && bytes < max_bytes) {
            const auto& m = metrics_[n_metrics++];
            metrics.push_back({{"key", m.key}, {"value", metric_value(m.value)}, {"timestamp", m.timestamp_ms}, {"step", m.step}});
            bytes += m.key.size() + 80;
        }
    }
    Response r;
    if (!params.empty() || !tags.empty() || !metrics.empty()) {
        r = http_->post("runs/log-batch", {{"run_id", run_id_}, {"params", params}, {"tags", tags}, {"metrics", metrics}});
        if (r.retryable()) {
            warn("connect", "cannot send to " + config_.tracking_uri + " (" + r.describe() + "); " +
                                std::to_string(metrics_.size()) + " metrics wait, retrying; the training goes on");
            return false;
        }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    params_.erase(params_.begin(), params_.begin() + static_cast<std::ptrdiff_t>(n_params));
    tags_.erase(tags_.begin(), tags_.begin() + static_cast<std::ptrdiff_t>(n_tags));
    metrics_.erase(metrics_.begin(), metrics_.begin() + static_cast<std::ptrdiff_t>(n_metrics));
    if (params.empty() && tags.empty() && metrics.empty()) return true;
    if (r.ok()) {
        metrics_sent_ += metrics.size();
        for (auto& [k, v] : new_params) run_params_[k] = v;
        return true;
    }
    // Refused for good (a 4xx): retrying the same batch cannot help; it is dropped and said.
    metrics_dropped_ += metrics.size();
    warn("refused", "the server refused a batch of " + std::to_string(metrics.size()) + " metrics, " +
                        std::to_string(params.size()) + " params and " + std::to_string(tags.size()) +
                        " tags: " + r.describe());
    return true;
}

bool MlflowLogger::send_status() {
    const Response r = http_->post("runs/update", {{"run_id", run_id_},
                                                   {"status", mlflow_status_name(*final_status_)},
                                                   {"end_time", epoch_ms()}});
    if (r.ok() || !r.retryable()) {
        if (!r.ok()) warn("refused", "cannot set the run's status: " + r.describe());
        return true;
    }
    warn("connect", "cannot set the run's status (" + r.describe() + "); retrying");
    return false;
}

void MlflowLogger::run_thread() {
    int failures = 0;
    while (!abort_) {
        bool resolved, disabled, stopping, work;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            // Batches form while the thread sleeps: a log interval's scalars go in one request.
            if (resolved_ && !stopping_ && !disabled_ && metrics_.size() < kMlflowMaxMetricsPerBatch)
                wake_.wait_for(lock, std::chrono::seconds(1), [this] {
                    return stopping_ || abort_.load() || metrics_.size() >= kMlflowMaxMetricsPerBatch;
                });
            resolved = resolved_;
            disabled = disabled_;
            stopping = stopping_;
            work = !metrics_.empty() || !params_.empty() || !tags_.empty() || !job_tags_.empty();
            if (disabled) {
                metrics_dropped_ += metrics_.size();
                metrics_.clear();
                params_.clear();
                tags_.clear();
                job_tags_.clear();
                if (stopping) return;
                wake_.wait(lock, [this] { return stopping_ || abort_.load(); });
                continue;
            }
        }
        bool ok = true;
        if (!resolved) ok = resolve_run();
        else if (work) ok = send_batch();
        else if (stopping && !status_sent_) {
            ok = send_status();
            std::lock_guard<std::mutex> lock(mutex_);
            status_sent_ = ok;
        } else if (stopping) {
            return;
        }
        if (ok) {
            failures = 0;
        } else {
            std::lock_guard<std::mutex> lock(mutex_);
            if (disabled_) continue;
        }
        if (!ok) wait_backoff(++failures);
    }
}

bool MlflowLogger::finish(MlflowRunStatus status, double timeout_seconds) {
    if (finished_) return false;
    finished_ = true;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        final_status_ = status;
    }
    wake_.notify_all();
    // The thread ends when all is sent and the status set; past the deadline it is stopped.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, timeout_seconds));
    bool done = false;
    {
        std::unique_lock<std::mutex> lock(mutex_);
        while (!done && std::chrono::steady_clock::now() < deadline) {
            done = (disabled_ || status_sent_) && metrics_.empty();
            if (!done) wake_.wait_for(lock, std::chrono::milliseconds(20));
        }
    }
    abort_ = true;
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t left = metrics_.size();
    metrics_dropped_ += left;
    const bool complete = !disabled_ && status_sent_ && left == 0 && params_.empty() && tags_.empty();
    if (!disabled_ && !complete) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", timeout_seconds);
        print_warning("MLflow: not everything reached " + config_.tracking_uri + " within the flush timeout of " +
                      secs + " s (--mlflow-flush-timeout): " + std::to_string(left) + " metrics left" +
                      (status_sent_ ? "" : ", run status not set"));
    }
    if (metrics_dropped_ > 0)
        print_warning("MLflow: " + std::to_string(metrics_dropped_.load()) + " metrics of this job were not sent (" +
                      std::to_string(metrics_sent_.load()) + " were)");
    return complete;
}

}  // namespace mds::observe
