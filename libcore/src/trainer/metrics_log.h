// Where mds-train's scalars go (the Trainer's tb_): TensorBoard's event file (--tensorboard-dir)
// and MLflow (--mlflow-tracking-uri), with TensorBoardWriter's call API so that every
// `tb_->add_scalar(tag, value, step)` of the trainer feeds both. MLflow gets each tag as
// observe::mlflow_key(tag), with the same step and wall time as the event.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "mds/observe/mlflow.h"
#include "mds/observe/tensorboard_writer.h"

namespace mds::trainer {

class MetricsLog {
public:
    // Either may be null (the Trainer makes a MetricsLog when at least one is on).
    MetricsLog(std::unique_ptr<observe::TensorBoardWriter> tensorboard, std::unique_ptr<observe::MlflowLogger> mlflow);

    void add_scalar(std::string_view tag, double value, std::int64_t step, double wall_time);
    void add_scalar(std::string_view tag, double value, std::int64_t step) {
        add_scalar(tag, value, step, observe::wall_time_now());
    }
    // Writes TensorBoard's buffered events (with `sync`, fsyncs them); MLflow's thread sends on its own.
    void flush(bool sync = false);

    observe::TensorBoardWriter* tensorboard() { return tensorboard_.get(); }
    observe::MlflowLogger* mlflow() { return mlflow_.get(); }

private:
    std::unique_ptr<observe::TensorBoardWriter> tensorboard_;
    std::unique_ptr<observe::MlflowLogger> mlflow_;
    std::unordered_map<std::string, std::string> keys_;  // tag -> MLflow key, computed once
};

}  // namespace mds::trainer
