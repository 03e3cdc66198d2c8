// MLflow tracking without a server (tests/integration/test_mlflow.py runs against a real one): the key
// rule, the URI check, MLflow's environment variables, and a logger whose server is unreachable — it
// never blocks its caller, drops what its queue cannot hold (counted), and ends within its flush bound.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "mds/observe/mlflow.h"

using namespace mds::observe;

TEST_CASE("mlflow_key maps TensorBoard tags to keys MLflow accepts") {
    CHECK(mlflow_key("steps-vs-samples/y=steps,x=samples") == "steps-vs-samples/y_steps_x_samples");
    CHECK(mlflow_key("lm-loss-training/lm loss vs gigaflos (without embeddings)") ==
          "lm-loss-training/lm loss vs gigaflos _without embeddings_");
    CHECK(mlflow_key("lm-loss-validation/lm loss validation") == "lm-loss-validation/lm loss validation");
    CHECK(mlflow_key("curriculum_seqlen") == "curriculum_seqlen");
    CHECK(mlflow_key("a:b") == "a_b");                 // colons: servers on Windows refuse them
    CHECK(mlflow_key("/a//b/") == "a/b");              // posixpath.normpath must leave the key as it is
    CHECK(mlflow_key("a/./b/../c") == "a/_/b/__/c");
    CHECK(mlflow_key("") == "_");
    CHECK(mlflow_key("é") == "__");                    // non-ASCII bytes
    const std::string longer(300, 'x');
    CHECK(mlflow_key(longer).size() == kMlflowMaxKeyLength);
}

TEST_CASE("mlflow_uri_problem accepts http(s) servers only") {
    CHECK(mlflow_uri_problem("http://127.0.0.1:5000").empty());
    CHECK(mlflow_uri_problem("https://mlflow.example/prefix").empty());
    CHECK(mlflow_uri_problem("file:///tmp/mlruns").find("http://") != std::string::npos);
    CHECK(!mlflow_uri_problem("/tmp/mlruns").empty());
    CHECK(!mlflow_uri_problem("databricks").empty());
    CHECK(!mlflow_uri_problem("http://").empty());
}

TEST_CASE("mlflow_config_from_environment: the flags win over MLflow's variables") {
    ::setenv("MLFLOW_TRACKING_URI", "http://env:1", 1);
    ::setenv("MLFLOW_EXPERIMENT_NAME", "env-exp", 1);
    ::setenv("MLFLOW_EXPERIMENT_ID", "7", 1);
    ::setenv("MLFLOW_RUN_ID", "abc", 1);
    ::setenv("MLFLOW_TRACKING_INSECURE_TLS", "true", 1);
    auto c = mlflow_config_from_environment("", "", "");
    CHECK(c.tracking_uri == "http://env:1");
    CHECK(c.experiment_name == "env-exp");
    CHECK(c.experiment_id == "7");
    CHECK(c.run_id == "abc");
    CHECK(c.insecure_tls);
    c = mlflow_config_from_environment("http://flag:2", "flag-exp", "name");
    CHECK(c.tracking_uri == "http://flag:2");
    CHECK(c.experiment_name == "flag-exp");
    CHECK(c.experiment_id.empty());  // a name from the flag: the variable's id does not count
    CHECK(c.run_name == "name");
    for (const char* v : {"MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID",
                          "MLFLOW_TRACKING_INSECURE_TLS"})
        ::unsetenv(v);
}

TEST_CASE("MlflowLogger with no server: never blocks, bounded queue, bounded end") {
    MlflowConfig c;
    c.tracking_uri = "http://127.0.0.1:9";  // discard port: nothing answers
    c.experiment_name = "unreachable-server";
    c.request_timeout_seconds = 0.5;
    c.max_queued_metrics = 10;
    const auto t0 = std::chrono::steady_clock::now();
    MlflowLogger logger(c);
    for (int i = 0; i < 25; ++i) logger.log_metric("m", i, i, 1.7e9);
    logger.log_param("p", "1");
    logger.set_job_tag("start_time", "now");
    const double queued_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(queued_s < 0.5);
    CHECK(logger.metrics_dropped() == 15);
    CHECK(logger.run_id().empty());
    const auto t1 = std::chrono::steady_clock::now();
    CHECK_FALSE(logger.finish(MlflowRunStatus::Finished, 1.0));
    const double finish_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    CHECK(finish_s < 3.0);  // the deadline, plus an aborted request
    CHECK(logger.metrics_dropped() == 25);
    CHECK(logger.metrics_sent() == 0);
}

TEST_CASE("MlflowLogger keeps a given run id before the server answers") {
    MlflowConfig c;
    c.tracking_uri = "http://127.0.0.1:9";
    c.run_id = "0123456789abcdef0123456789abcdef";
    c.request_timeout_seconds = 0.5;
    MlflowLogger logger(c);
    CHECK(logger.run_id() == c.run_id);
    CHECK_FALSE(logger.finish(MlflowRunStatus::Killed, 0.2));
}
