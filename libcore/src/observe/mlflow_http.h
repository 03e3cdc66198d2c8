// The few HTTP calls of MLflow's REST API 2.0 (private to observe/mlflow*.cpp): one libcurl handle
// reused between requests (keep-alive), JSON bodies, a timeout per request, and an abort flag that
// stops a request in flight within a second (the end-of-training flush deadline).
#pragma once

#include <atomic>
#include <string>

#include <nlohmann/json.hpp>

#include "mds/observe/mlflow.h"

namespace mds::observe::mlflow_detail {

struct Response {
    long status = 0;     // 0: no HTTP answer (`error` says why)
    std::string body;
    std::string error;   // transport error

    bool ok() const { return status >= 200 && status < 300; }
    // Worth trying again later: no answer, 408, 429 or 5xx.
    bool retryable() const { return status == 0 || status == 408 || status == 429 || status >= 500; }
    // MLflow's error_code ("RESOURCE_DOES_NOT_EXIST"), "" when the body has none.
    std::string error_code() const;
    // "HTTP 400 INVALID_PARAMETER_VALUE: <message>" or the transport error, at most 300 characters.
    std::string describe() const;
    nlohmann::json json() const;  // the body parsed; null when it is not JSON
};

class RestClient {
public:
    RestClient(const MlflowConfig& config, const std::atomic<bool>& abort);
    ~RestClient();
    RestClient(const RestClient&) = delete;
    RestClient& operator=(const RestClient&) = delete;

    // GET {uri}/api/2.0/mlflow/{endpoint}?{name}={value} (the value URL-encoded).
    Response get(const std::string& endpoint, const std::string& name, const std::string& value);
    // POST {uri}/api/2.0/mlflow/{endpoint} with a JSON body.
    Response post(const std::string& endpoint, const nlohmann::json& body);

private:
    Response perform(const std::string& method, const std::string& url, const std::string& body);

    const MlflowConfig& config_;
    const std::atomic<bool>& abort_;
    std::string base_;
    void* curl_ = nullptr;  // CURL*
};

}  // namespace mds::observe::mlflow_detail
