// MLflow's REST calls over libcurl (mlflow_http.h).
#include "mlflow_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>

#include "mds/util/error.h"

namespace mds::observe::mlflow_detail {
namespace {

std::size_t append_body(char* data, std::size_t size, std::size_t n, void* out) {
    auto* s = static_cast<std::string*>(out);
    // An MLflow answer is small (a run with its params and tags); a server sending without end is cut.
    if (s->size() > (std::size_t{64} << 20)) return 0;
    s->append(data, size * n);
    return size * n;
}

int abort_check(void* flag, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<const std::atomic<bool>*>(flag)->load() ? 1 : 0;
}

std::string cut(std::string s, std::size_t n) {
    for (auto& c : s)
        if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    if (s.size() > n) s = s.substr(0, n) + "...";
    return s;
}

}  // namespace

std::string Response::error_code() const {
    const auto j = json();
    if (j.is_object() && j.contains("error_code") && j["error_code"].is_string()) return j["error_code"].get<std::string>();
    return {};
}

std::string Response::describe() const {
    if (status == 0) return cut(error.empty() ? std::string("no answer") : error, 300);
    std::string s = "HTTP " + std::to_string(status);
    const auto j = json();
    if (j.is_object() && j.contains("message") && j["message"].is_string()) {
        const std::string code = error_code();
        s += (code.empty() ? ": " : " " + code + ": ") + j["message"].get<std::string>();
    } else if (!body.empty()) {
        s += ": " + body;
    }
    return cut(s, 300);
}

nlohmann::json Response::json() const {
    return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
}

RestClient::RestClient(const MlflowConfig& config, const std::atomic<bool>& abort) : config_(config), abort_(abort) {
    base_ = config.tracking_uri;
    while (!base_.empty() && base_.back() == '/') base_.pop_back();
    base_ += "/api/2.0/mlflow/";
    curl_ = curl_easy_init();  // in the constructing thread: it runs curl_global_init once
    if (!curl_) throw Error("MLflow: libcurl could not start (curl_easy_init)");
}

RestClient::~RestClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

Response RestClient::get(const std::string& endpoint, const std::string& name, const std::string& value) {
    auto* curl = static_cast<CURL*>(curl_);
    char* escaped = curl_easy_escape(curl, value.c_str(), static_cast<int>(value.size()));
    std::string url = base_ + endpoint + "?" + name + "=" + (escaped ? escaped : "");
    curl_free(escaped);
    return perform("GET", url, {});
}

Response RestClient::post(const std::string& endpoint, const nlohmann::json& body) {
    return perform("POST", base_ + endpoint, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Response RestClient::perform(const std::string& method, const std::string& url, const std::string& body) {
    Response r;
    if (abort_) {
        r.error = "aborted (flush timeout)";
        return r;
    }
    auto* curl = static_cast<CURL*>(curl_);
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // a background thread: no SIGALRM for DNS timeouts
    const auto timeout_ms = static_cast<long>(std::max(1.0, config_.request_timeout_seconds * 1000.0));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "mds-train");
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, abort_check);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(&abort_));
    if (config_.insecure_tls) {
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (!config_.ca_cert_path.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, config_.ca_cert_path.c_str());
    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "Content-Type: application/json");  // the server refuses POSTs without it
    std::string auth;
    if (!config_.token.empty()) {
        auth = "Authorization: Bearer " + config_.token;
        headers = curl_slist_append(headers, auth.c_str());
    } else if (!config_.username.empty()) {
        curl_easy_setopt(curl, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
        curl_easy_setopt(curl, CURLOPT_USERNAME, config_.username.c_str());
        curl_easy_setopt(curl, CURLOPT_PASSWORD, config_.password.c_str());
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    if (method == "POST") {
        curl_easy_setopt(curl, CURLOPT_POST, 1L);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
    const CURLcode rc = curl_easy_perform(curl);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
        r.error = rc == CURLE_ABORTED_BY_CALLBACK ? "aborted (flush timeout)" : curl_easy_strerror(rc);
        r.body.clear();
        return r;
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
    return r;
}

}  // namespace mds::observe::mlflow_detail
