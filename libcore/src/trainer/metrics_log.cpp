// The trainer's scalar fan-out (metrics_log.h).
#include "metrics_log.h"

#include <utility>

namespace mds::trainer {

MetricsLog::MetricsLog(std::unique_ptr<observe::TensorBoardWriter> tensorboard,
                       std::unique_ptr<observe::MlflowLogger> mlflow)
    : tensorboard_(std::move(tensorboard)), mlflow_(std::move(mlflow)) {}

void MetricsLog::add_scalar(std::string_view tag, double value, std::int64_t step, double wall_time) {
    if (tensorboard_) tensorboard_->add_scalar(tag, value, step, wall_time);
    if (!mlflow_) return;
    auto it = keys_.find(std::string(tag));
    if (it == keys_.end()) it = keys_.emplace(std::string(tag), observe::mlflow_key(tag)).first;
    mlflow_->log_metric(it->second, value, step, wall_time);
}

void MetricsLog::flush(bool sync) {
    if (tensorboard_) tensorboard_->flush(sync);
}

}  // namespace mds::trainer
