// The Megatron-DeepSpeed `args` Namespace and the `ds_config` written into every checkpoint
// (private to the trainer area).
#pragma once

#include <string>
#include <vector>

#include "mds/ckpt/pickle.h"
#include "mds/model/gpt_model.h"
#include "mds/flags/train_args.h"
#include "mds/trainer/checkpoint.h"

namespace mds::trainer {

// Megatron-DeepSpeed's args as an argparse.Namespace, as BMD's parse_args and pretrain() leave it.
ckpt::PyValue megatron_args(const flags::TrainArgs& a, const model::GptModel& model, const TrainingProgress& p);
// Python's str() of one of those values: a str as it is, a megatron.enums member as
// `PositionEmbeddingType.absolute`, a deque as `deque([...])`, anything else its repr (cut at `max_chars`). What BMD's
// write_args_to_tensorboard writes for each attribute, and mlflow.log_params(vars(args)) would log.
std::string python_str(const ckpt::PyValue& v, std::size_t max_chars = 1 << 20);
// BMD's _print_args block, which parse_args prints from rank 0 before anything else runs: a header line, then
// "  key ...... value" (dots to column 50, the value as python_str) for every attribute parse_args sets, sorted as
// Python sorts the lines lowercased, then a footer line. The values are the Namespace's at iteration 0, without
// the attributes pretrain(), the tokenizer, the data set-up and the checkpoint's load add later (and mds_version).
std::vector<std::string> megatron_args_lines(const flags::TrainArgs& a, const model::GptModel& model);
// The DeepSpeed config the run used: the --deepspeed_config file's JSON, else the one mds derives.
ckpt::PyValue ds_config(const flags::TrainArgs& a);

}  // namespace mds::trainer
