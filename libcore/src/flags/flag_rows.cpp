// The rows of mds-train's flag table (mds/flags/flag_table.h): Megatron-DeepSpeed's flags as BigScience's
// fork declares them (megatron/arguments.py, DeepSpeed's add_config_arguments), in mds-train's help order,
// then the BMD flags mds-train does not declare yet (their Namespace attributes only). `bmd_value` is
// the attribute's value after BMD's parse_args when the flag is not given (Python source); the
// checkpoint writes it for Fixed rows, so it must stay what BMD writes.
#include "flag_rows.h"

namespace mds::flags {
namespace {

// Where TrainArgs keeps a flag: a captureless function, so a row stays a plain value.
#define MDS_SLOT(member) [](TrainArgs& a) -> FlagSlot { return &a.member; }

const std::string kRefused = "Megatron flags not supported";
const std::string kUndeclared = "Megatron flags not declared by mds-train";
const std::vector<std::string> kLogLevels{"debug", "info", "warning", "error", "critical"};

void model_rows(std::vector<FlagRow>& t) {
    const std::string g = "Model";
    t.push_back({.names = "--num-layers", .group = g, .help = "Number of transformer layers (required)",
                 .key = "num_layers", .bmd_value = "None", .slot = MDS_SLOT(model.num_layers)});
    t.push_back({.names = "--hidden-size", .group = g, .help = "Transformer hidden size (required)",
                 .key = "hidden_size", .bmd_value = "None", .slot = MDS_SLOT(model.hidden_size)});
    t.push_back({.names = "--ffn-hidden-size", .group = g,
                 .help = "Hidden size of the MLP [default: 4 × --hidden-size]", .key = "ffn_hidden_size",
                 .bmd_value = "None", .py = PyForm::Derived, .slot = MDS_SLOT(model.ffn_hidden_size)});
    t.push_back({.names = "--num-attention-heads", .group = g, .help = "Number of attention heads (required)",
                 .key = "num_attention_heads", .bmd_value = "None", .slot = MDS_SLOT(model.num_attention_heads)});
    t.push_back({.names = "--seq-length", .group = g, .help = "Tokens per training sample (required)",
                 .key = "seq_length", .bmd_value = "None", .slot = MDS_SLOT(model.seq_length),
                 .tools = kToolTrain | kToolSampleIndex});
    t.push_back({.names = "--max-position-embeddings", .group = g,
                 .help = "Largest sequence length the position embeddings cover (required; >= --seq-length)",
                 .key = "max_position_embeddings", .bmd_value = "None", .py = PyForm::Derived,
                 .slot = MDS_SLOT(model.max_position_embeddings)});
    t.push_back({.names = "--make-vocab-size-divisible-by", .group = g,
                 .help = "Pad the vocabulary to a multiple of this times --tensor-model-parallel-size",
                 .key = "make_vocab_size_divisible_by", .bmd_value = "128",
                 .slot = MDS_SLOT(model.make_vocab_size_divisible_by), .tools = kToolTrain | kToolPreprocess});
    t.push_back({.names = "--pad-vocab-size-to", .group = g,
                 .help = "Pad the vocabulary to exactly this size (overrides --make-vocab-size-divisible-by)",
                 .key = "pad_vocab_size_to", .bmd_value = "None", .slot = MDS_SLOT(model.pad_vocab_size_to)});
    t.push_back({.names = "--init-method-std", .group = g,
                 .help = "Standard deviation of the normal weight initialization", .key = "init_method_std",
                 .bmd_value = "0.02", .slot = MDS_SLOT(model.init_method_std)});
    t.push_back({.names = "--position-embedding-type", .group = g,
                 .help = "Position embeddings: absolute (GPT) or alibi (BLOOM); rotary is refused (not implemented)",
                 .key = "position_embedding_type",
                 .bmd_value = "PositionEmbeddingType.absolute", .py = PyForm::Derived,
                 .slot = MDS_SLOT(model.position_embedding_type), .choices = {"absolute", "rotary", "alibi"}});
    t.push_back({.names = "--embed-layernorm", .group = g, .help = "Layer norm right after the word embeddings (BLOOM)",
                 .key = "embed_layernorm", .bmd_value = "False", .slot = MDS_SLOT(model.embed_layernorm)});
    t.push_back({.names = "--layernorm-epsilon", .group = g, .help = "Layer norm epsilon", .key = "layernorm_epsilon",
                 .bmd_value = "1e-05", .slot = MDS_SLOT(model.layernorm_epsilon)});
    t.push_back({.names = "--attention-dropout", .group = g, .help = "Dropout on the attention probabilities",
                 .key = "attention_dropout", .bmd_value = "0.1", .slot = MDS_SLOT(model.attention_dropout)});
    t.push_back({.names = "--hidden-dropout", .group = g, .help = "Dropout at the end of each attention and MLP block",
                 .key = "hidden_dropout", .bmd_value = "0.1", .slot = MDS_SLOT(model.hidden_dropout)});
    t.push_back({.names = "--sync-tp-duplicated-parameters", .group = g,
                 .help = "Average the parameters every tensor-parallel rank holds a copy of (layer norms, biases)",
                 .key = "sync_tp_duplicated_parameters", .bmd_value = "False",
                 .slot = MDS_SLOT(model.sync_tp_duplicated_parameters),
                 .doc = "(as BMD, the LayerNorm weights and biases are averaged over the tensor-parallel group before "
                        "every step and evaluation; no effect on one process)"});
    t.push_back({.names = "--checkpoint-activations", .group = g,
                 .help = "Recompute layer activations in the backward pass", .key = "checkpoint_activations",
                 .bmd_value = "False", .slot = MDS_SLOT(model.checkpoint_activations)});
    t.push_back({.names = "--checkpoint-num-layers", .group = g, .help = "Layers per activation checkpoint",
                 .key = "checkpoint_num_layers", .bmd_value = "1", .slot = MDS_SLOT(model.checkpoint_num_layers)});
    t.push_back({.names = "--deepspeed-activation-checkpointing", .group = g,
                 .help = "Activation checkpointing through DeepSpeed's implementation (same result in mds)",
                 .key = "deepspeed_activation_checkpointing", .bmd_value = "False",
                 .slot = MDS_SLOT(model.deepspeed_activation_checkpointing)});
    t.push_back({.names = "--abort-on-unmet-fused-kernel-constraints", .group = g,
                 .help = "Megatron's: fail when a fused kernel's constraints are unmet (accepted for compatibility; no effect in "
                         "mds, which has no fused kernels)",
                 .status = FlagStatus::NoEffect, .key = "abort_on_unmet_fused_kernel_constraints", .bmd_value = "False",
                 .slot = MDS_SLOT(model.abort_on_unmet_fused_kernel_constraints)});
}

void data_rows(std::vector<FlagRow>& t) {
    const std::string g = "Data";
    t.push_back({.names = "--data-path", .group = g, .help = "Dataset prefix, or weight prefix pairs for blending",
                 .key = "data_path", .bmd_value = "None", .slot = MDS_SLOT(data.data_path),
                 .tools = kToolTrain | kToolSampleIndex});
    t.push_back({.names = "--split", .group = g, .help = "Train,valid,test proportions of --data-path, e.g. 949,50,1",
                 .key = "split", .bmd_value = "None", .py = PyForm::Derived, .slot = MDS_SLOT(data.split),
                 .tools = kToolTrain | kToolSampleIndex});
    t.push_back({.names = "--train-weighted-split-paths", .group = g,
                 .help = "The training dataset group \"NAME: W1 START:END P1, W2 START:END P2, ...\" (instead of "
                         "--data-path)", .key = "train_weighted_split_paths", .bmd_value = "None",
                 .py = PyForm::Derived, .slot = MDS_SLOT(data.weighted_split_paths[0]),
                 .doc = "(see Weighted split paths below)"});
    t.push_back({.names = "--valid-weighted-split-paths", .group = g,
                 .help = "Validation dataset groups, each evaluated on its own under its NAME",
                 .key = "valid_weighted_split_paths", .bmd_value = "None", .py = PyForm::Derived,
                 .slot = MDS_SLOT(data.weighted_split_paths[1]),
                 .doc = "(one quoted argument each)"});
    t.push_back({.names = "--test-weighted-split-paths", .group = g,
                 .help = "Test dataset groups, each evaluated on its own under its NAME at the end of training",
                 .key = "test_weighted_split_paths", .bmd_value = "None", .py = PyForm::Derived,
                 .slot = MDS_SLOT(data.weighted_split_paths[2])});
    t.push_back({.names = "--train-weighted-split-paths-path", .group = g,
                 .help = "File with --train-weighted-split-paths' group on one line, double-quoted",
                 .key = "train_weighted_split_paths_path", .bmd_value = "None", .py = PyForm::Fixed,
                 .slot = MDS_SLOT(data.weighted_split_paths_path[0]),
                 .doc = "(tr11-176B-ml's `train-splits.txt`)"});
    t.push_back({.names = "--valid-weighted-split-paths-path", .group = g,
                 .help = "File with --valid-weighted-split-paths' groups on one line, each double-quoted",
                 .key = "valid_weighted_split_paths_path", .bmd_value = "None", .py = PyForm::Fixed,
                 .slot = MDS_SLOT(data.weighted_split_paths_path[1]),
                 .doc = "(`\"G1\" \"G2\" ...`)"});
    t.push_back({.names = "--test-weighted-split-paths-path", .group = g,
                 .help = "File with --test-weighted-split-paths' groups on one line, each double-quoted",
                 .key = "test_weighted_split_paths_path", .bmd_value = "None", .py = PyForm::Fixed,
                 .slot = MDS_SLOT(data.weighted_split_paths_path[2])});
    t.push_back({.names = "--vocab-file,--vocab", .group = g, .help = "GPT-2 vocab.json", .key = "vocab_file",
                 .bmd_value = "None", .slot = MDS_SLOT(data.vocab_file),
                 .tools = kToolTrain | kToolPreprocess | kToolCkptToHf});
    t.push_back({.names = "--merge-file", .group = g, .help = "GPT-2 merges.txt", .key = "merge_file",
                 .bmd_value = "None", .slot = MDS_SLOT(data.merge_file),
                 .tools = kToolTrain | kToolPreprocess | kToolCkptToHf});
    t.push_back({.names = "--tokenizer-type", .group = g, .help = "GPT2BPETokenizer or PretrainedFromHF",
                 .key = "tokenizer_type", .bmd_value = "None", .py = PyForm::Derived,
                 .slot = MDS_SLOT(data.tokenizer_type), .choices = {"GPT2BPETokenizer", "PretrainedFromHF"},
                 .tools = kToolTrain | kToolPreprocess});
    t.push_back({.names = "--tokenizer-name-or-path,--tokenizer-file", .group = g,
                 .help = "Hugging Face tokenizer for PretrainedFromHF: a tokenizer.json, a folder holding one, or a "
                         "Hub name (ORG/NAME) in the local Hugging Face cache", .key = "tokenizer_name_or_path",
                 .bmd_value = "None", .slot = MDS_SLOT(data.tokenizer_name_or_path),
                 .tools = kToolTrain | kToolPreprocess,
                 .doc = "(see Porting a Megatron-DeepSpeed script)"});
    t.push_back({.names = "--data-impl", .group = g,
                 .help = "Indexed dataset implementation: mmap or infer [default: infer]", .key = "data_impl",
                 .bmd_value = "'infer'", .py = PyForm::Str, .slot = MDS_SLOT(data.data_impl),
                 .choices = {"mmap", "infer"}, .tools = kToolTrain | kToolSampleIndex});
    t.push_back({.names = "--num-workers", .group = g,
                 .help = "Data loader workers for training (accepted for compatibility; no effect in mds)",
                 .status = FlagStatus::NoEffect, .key = "num_workers", .bmd_value = "2",
                 .slot = MDS_SLOT(data.num_workers)});
    t.push_back({.names = "--valid-num-workers", .group = g,
                 .help = "Data loader workers for validation (accepted for compatibility; no effect in mds)",
                 .status = FlagStatus::NoEffect, .key = "valid_num_workers", .bmd_value = "2",
                 .slot = MDS_SLOT(data.valid_num_workers)});
}

void batch_rows(std::vector<FlagRow>& t) {
    const std::string g = "Batch size and length";
    t.push_back({.names = "--micro-batch-size", .group = g,
                 .help = "Samples per data-parallel rank per forward/backward", .key = "micro_batch_size",
                 .bmd_value = "None", .slot = MDS_SLOT(optimizer.micro_batch_size)});
    t.push_back({.names = "--global-batch-size", .group = g,
                 .help = "Samples per optimizer step over all ranks [default: micro batch × data parallel]",
                 .key = "global_batch_size", .bmd_value = "None", .py = PyForm::Derived,
                 .slot = MDS_SLOT(optimizer.global_batch_size), .tools = kToolTrain | kToolSampleIndex});
    t.push_back({.names = "--rampup-batch-size", .group = g,
                 .help = "START INCREMENT SAMPLES: grow the global batch size from START by INCREMENT over SAMPLES "
                         "samples", .key = "rampup_batch_size", .bmd_value = "None", .py = PyForm::Derived,
                 .slot = MDS_SLOT(optimizer.rampup_batch_size), .tools = kToolTrain | kToolSampleIndex});
    t.push_back({.names = "--train-iters", .group = g, .help = "Iterations to train (excludes --train-samples)",
                 .key = "train_iters", .bmd_value = "None", .py = PyForm::Derived, .slot = MDS_SLOT(length.train_iters),
                 .tools = kToolTrain | kToolSampleIndex});
    t.push_back({.names = "--train-samples", .group = g, .help = "Samples to train (excludes --train-iters)",
                 .key = "train_samples", .bmd_value = "None", .slot = MDS_SLOT(length.train_samples),
                 .tools = kToolTrain | kToolSampleIndex});
}

void optimizer_rows(std::vector<FlagRow>& t) {
    const std::string g = "Optimizer and learning rate";
    t.push_back({.names = "--optimizer", .group = g, .help = "adam or sgd [default: adam]; sgd is refused (mds-train implements adam only)",
                 .key = "optimizer",
                 .bmd_value = "'adam'", .py = PyForm::Str, .slot = MDS_SLOT(optimizer.optimizer),
                 .choices = {"adam", "sgd"}});
    t.push_back({.names = "--lr", .group = g, .help = "Peak learning rate (required)", .key = "lr", .bmd_value = "None",
                 .slot = MDS_SLOT(optimizer.lr)});
    t.push_back({.names = "--min-lr", .group = g, .help = "Floor of the decayed learning rate", .key = "min_lr",
                 .bmd_value = "0.0", .slot = MDS_SLOT(optimizer.min_lr)});
    t.push_back({.names = "--lr-decay-style", .group = g, .help = "constant, linear or cosine [default: linear]",
                 .key = "lr_decay_style", .bmd_value = "'linear'", .py = PyForm::Str,
                 .slot = MDS_SLOT(optimizer.lr_decay_style), .choices = {"constant", "linear", "cosine"}});
    t.push_back({.names = "--lr-decay-iters", .group = g, .help = "Iterations to decay over [default: --train-iters]",
                 .key = "lr_decay_iters", .bmd_value = "None", .py = PyForm::Derived,
                 .slot = MDS_SLOT(optimizer.lr_decay_iters)});
    t.push_back({.names = "--lr-decay-samples", .group = g, .help = "Samples to decay over [default: --train-samples]",
                 .key = "lr_decay_samples", .bmd_value = "None", .py = PyForm::Derived,
                 .slot = MDS_SLOT(optimizer.lr_decay_samples)});
    t.push_back({.names = "--lr-decay-tokens", .group = g,
                 .help = "Tokens to decay over (decay follows consumed tokens)", .key = "lr_decay_tokens",
                 .bmd_value = "None", .slot = MDS_SLOT(optimizer.lr_decay_tokens)});
    t.push_back({.names = "--lr-warmup-fraction", .group = g, .help = "Warmup as a fraction of the decay length",
                 .key = "lr_warmup_fraction", .bmd_value = "None", .slot = MDS_SLOT(optimizer.lr_warmup_fraction)});
    t.push_back({.names = "--lr-warmup-iters", .group = g, .help = "Warmup length in iterations",
                 .key = "lr_warmup_iters", .bmd_value = "0", .slot = MDS_SLOT(optimizer.lr_warmup_iters)});
    t.push_back({.names = "--lr-warmup-samples", .group = g, .help = "Warmup length in samples",
                 .key = "lr_warmup_samples", .bmd_value = "0", .slot = MDS_SLOT(optimizer.lr_warmup_samples)});
    t.push_back({.names = "--override-lr-scheduler", .group = g, .help = "On resume, take the schedule from the flags",
                 .key = "override_lr_scheduler", .bmd_value = "False",
                 .slot = MDS_SLOT(optimizer.override_lr_scheduler)});
    t.push_back({.names = "--use-checkpoint-lr-scheduler", .group = g,
                 .help = "On resume, take the schedule from the checkpoint", .key = "use_checkpoint_lr_scheduler",
                 .bmd_value = "False", .slot = MDS_SLOT(optimizer.use_checkpoint_lr_scheduler)});
    t.push_back({.names = "--adam-beta1", .group = g, .help = "Adam beta1", .key = "adam_beta1", .bmd_value = "0.9",
                 .slot = MDS_SLOT(optimizer.adam_beta1)});
    t.push_back({.names = "--adam-beta2", .group = g, .help = "Adam beta2", .key = "adam_beta2", .bmd_value = "0.999",
                 .slot = MDS_SLOT(optimizer.adam_beta2)});
    t.push_back({.names = "--adam-eps", .group = g, .help = "Adam epsilon", .key = "adam_eps", .bmd_value = "1e-08",
                 .slot = MDS_SLOT(optimizer.adam_eps)});
    t.push_back({.names = "--sgd-momentum", .group = g,
                 .help = "SGD momentum (accepted for compatibility; no effect in mds)", .status = FlagStatus::NoEffect,
                 .key = "sgd_momentum", .bmd_value = "0.9", .slot = MDS_SLOT(optimizer.sgd_momentum)});
    t.push_back({.names = "--weight-decay", .group = g, .help = "Decoupled weight decay", .key = "weight_decay",
                 .bmd_value = "0.01", .slot = MDS_SLOT(optimizer.weight_decay)});
    t.push_back({.names = "--clip-grad", .group = g, .help = "Clip gradients to this global L2 norm (0: off)",
                 .key = "clip_grad", .bmd_value = "1.0", .slot = MDS_SLOT(optimizer.clip_grad)});
    t.push_back({.names = "--seed", .group = g, .help = "Random seed", .key = "seed", .bmd_value = "1234",
                 .slot = MDS_SLOT(seed), .tools = kToolTrain | kToolSampleIndex});
}

void precision_rows(std::vector<FlagRow>& t) {
    const std::string g = "Precision";
    t.push_back({.names = "--fp16", .group = g, .help = "Train in fp16 with loss scaling", .key = "fp16",
                 .bmd_value = "False", .slot = MDS_SLOT(optimizer.fp16)});
    t.push_back({.names = "--bf16", .group = g, .help = "Train in bf16", .key = "bf16", .bmd_value = "False",
                 .slot = MDS_SLOT(optimizer.bf16)});
    t.push_back({.names = "--loss-scale", .group = g,
                 .help = "Static loss scale [default: dynamic]; under --deepspeed the config's fp16 section decides",
                 .key = "loss_scale", .bmd_value = "None", .py = PyForm::Derived,
                 .slot = MDS_SLOT(optimizer.loss_scale)});
    t.push_back({.names = "--initial-loss-scale", .group = g, .help = "Initial dynamic loss scale",
                 .key = "initial_loss_scale", .bmd_value = "2 ** 32", .py = PyForm::Derived,
                 .slot = MDS_SLOT(optimizer.initial_loss_scale)});
    t.push_back({.names = "--min-loss-scale", .group = g, .help = "Smallest dynamic loss scale",
                 .key = "min_loss_scale", .bmd_value = "1.0", .py = PyForm::Derived,
                 .slot = MDS_SLOT(optimizer.min_loss_scale)});
    t.push_back({.names = "--loss-scale-window", .group = g, .help = "Overflow-free iterations before the scale grows",
                 .key = "loss_scale_window", .bmd_value = "1000", .py = PyForm::Derived,
                 .slot = MDS_SLOT(optimizer.loss_scale_window)});
    t.push_back({.names = "--hysteresis", .group = g, .help = "Overflows tolerated before the scale shrinks",
                 .key = "hysteresis", .bmd_value = "2", .py = PyForm::Derived, .slot = MDS_SLOT(optimizer.hysteresis)});
}

void logging_rows(std::vector<FlagRow>& t) {
    const std::string g = "Logging and evaluation";
    t.push_back({.names = "--log-interval", .group = g, .help = "Iterations between log lines", .key = "log_interval",
                 .bmd_value = "100", .slot = MDS_SLOT(logging.log_interval)});
    t.push_back({.names = "--eval-interval", .group = g, .help = "Iterations between validation runs",
                 .key = "eval_interval", .bmd_value = "1000", .slot = MDS_SLOT(logging.eval_interval),
                 .tools = kToolTrain | kToolSampleIndex});
    t.push_back({.names = "--eval-iters", .group = g, .help = "Iterations per validation run", .key = "eval_iters",
                 .bmd_value = "100", .slot = MDS_SLOT(logging.eval_iters), .tools = kToolTrain | kToolSampleIndex});
    t.push_back({.names = "--tensorboard-dir", .group = g, .help = "Write TensorBoard events here",
                 .key = "tensorboard_dir", .bmd_value = "None", .slot = MDS_SLOT(logging.tensorboard_dir)});
    t.push_back({.names = "--codecarbon-dir", .group = g, .help = "Write codecarbon emissions.csv here",
                 .key = "codecarbon_dir", .bmd_value = "None", .slot = MDS_SLOT(logging.codecarbon_dir)});
    t.push_back({.names = "--tensorboard-log-interval", .group = g, .help = "Iterations between TensorBoard points",
                 .key = "tensorboard_log_interval", .bmd_value = "1",
                 .slot = MDS_SLOT(logging.tensorboard_log_interval)});
    t.push_back({.names = "--tensorboard-queue-size", .group = g,
                 .help = "Events buffered before a TensorBoard flush (accepted for compatibility; no effect in mds)",
                 .status = FlagStatus::NoEffect, .key = "tensorboard_queue_size", .bmd_value = "1000",
                 .slot = MDS_SLOT(logging.tensorboard_queue_size)});
    t.push_back({.names = "--log-timers-to-tensorboard", .group = g, .help = "Write timers to TensorBoard",
                 .key = "log_timers_to_tensorboard", .bmd_value = "False",
                 .slot = MDS_SLOT(logging.log_timers_to_tensorboard)});
    t.push_back({.names = "--log-batch-size-to-tensorboard", .group = g, .help = "Write the batch size to TensorBoard",
                 .key = "log_batch_size_to_tensorboard", .bmd_value = "False",
                 .slot = MDS_SLOT(logging.log_batch_size_to_tensorboard)});
    t.push_back({.names = "--no-log-learnig-rate-to-tensorboard", .group = g,
                 .help = "Do not write the learning rate to TensorBoard (Megatron's spelling)",
                 .key = "log_learning_rate_to_tensorboard", .bmd_value = "True",
                 .slot = MDS_SLOT(logging.log_learning_rate_to_tensorboard), .store = false});
    t.push_back({.names = "--no-log-loss-scale-to-tensorboard", .group = g,
                 .help = "Do not write the loss scale to TensorBoard", .key = "log_loss_scale_to_tensorboard",
                 .bmd_value = "True", .slot = MDS_SLOT(logging.log_loss_scale_to_tensorboard), .store = false});
    t.push_back({.names = "--log-validation-ppl-to-tensorboard", .group = g,
                 .help = "Write validation perplexity to TensorBoard", .key = "log_validation_ppl_to_tensorboard",
                 .bmd_value = "False", .slot = MDS_SLOT(logging.log_validation_ppl_to_tensorboard)});
    t.push_back({.names = "--log-params-norm", .group = g, .help = "Log the parameter norm", .key = "log_params_norm",
                 .bmd_value = "False", .slot = MDS_SLOT(logging.log_params_norm)});
    t.push_back({.names = "--log-num-zeros-in-grad", .group = g, .help = "Log the number of zeros in the gradient",
                 .key = "log_num_zeros_in_grad", .bmd_value = "False",
                 .slot = MDS_SLOT(logging.log_num_zeros_in_grad)});
    t.push_back({.names = "--log-level", .group = g, .help = "Log level of rank 0", .key = "log_level",
                 .bmd_value = "None", .slot = MDS_SLOT(logging.log_level), .choices = kLogLevels});
    t.push_back({.names = "--log-level-replica", .group = g, .help = "Log level of the other ranks",
                 .key = "log_level_replica", .bmd_value = "None", .slot = MDS_SLOT(logging.log_level_replica),
                 .choices = kLogLevels});
}

void exit_rows(std::vector<FlagRow>& t) {
    const std::string g = "Exit";
    t.push_back({.names = "--exit-interval", .group = g, .help = "Exit after the iteration that is a multiple of this",
                 .key = "exit_interval", .bmd_value = "None", .slot = MDS_SLOT(exit.exit_interval)});
    t.push_back({.names = "--exit-duration-in-mins", .group = g, .help = "Exit (after saving) after this many minutes",
                 .key = "exit_duration_in_mins", .bmd_value = "None", .slot = MDS_SLOT(exit.exit_duration_in_mins)});
    t.push_back({.names = "--kill-switch-path", .group = g, .help = "Exit (without saving) when this file appears",
                 .key = "kill_switch_path", .bmd_value = "None", .slot = MDS_SLOT(exit.kill_switch_path)});
}

void checkpoint_rows(std::vector<FlagRow>& t) {
    const std::string g = "Checkpoints";
    t.push_back({.names = "--save", .group = g, .help = "Save checkpoints in this directory", .key = "save",
                 .bmd_value = "None", .slot = MDS_SLOT(checkpoint.save)});
    t.push_back({.names = "--load", .group = g, .help = "Resume from the latest checkpoint in this directory",
                 .key = "load", .bmd_value = "None", .slot = MDS_SLOT(checkpoint.load)});
    t.push_back({.names = "--save-interval", .group = g, .help = "Iterations between checkpoints",
                 .key = "save_interval", .bmd_value = "None", .slot = MDS_SLOT(checkpoint.save_interval)});
    t.push_back({.names = "--no-save-optim", .group = g, .help = "Save no optimizer states (weights-only checkpoints)",
                 .key = "no_save_optim", .bmd_value = "None", .py = PyForm::TrueOrNone,
                 .slot = MDS_SLOT(checkpoint.no_save_optim)});
    t.push_back({.names = "--no-save-rng", .group = g, .help = "Save no random number generator states",
                 .key = "no_save_rng", .bmd_value = "None", .py = PyForm::TrueOrNone,
                 .slot = MDS_SLOT(checkpoint.no_save_rng)});
    t.push_back({.names = "--no-load-optim", .group = g,
                 .help = "Resume without optimizer states: fp32 masters from the weights, Adam moments from zero",
                 .key = "no_load_optim", .bmd_value = "None", .py = PyForm::TrueOrNone,
                 .slot = MDS_SLOT(checkpoint.no_load_optim)});
    t.push_back({.names = "--no-load-rng", .group = g, .help = "Resume without the random number generator states",
                 .key = "no_load_rng", .bmd_value = "None", .py = PyForm::TrueOrNone,
                 .slot = MDS_SLOT(checkpoint.no_load_rng)});
    t.push_back({.names = "--finetune", .group = g,
                 .help = "Load only the weights from --load and start at iteration 0 (no optimizer, RNG or schedule "
                         "state)", .key = "finetune", .bmd_value = "False", .slot = MDS_SLOT(checkpoint.finetune)});
}

void parallel_rows(std::vector<FlagRow>& t) {
    const std::string g = "Parallelism and DeepSpeed";
    t.push_back({.names = "--tensor-model-parallel-size", .group = g, .help = "Tensor-parallel degree",
                 .key = "tensor_model_parallel_size", .bmd_value = "1",
                 .slot = MDS_SLOT(parallel.tensor_model_parallel_size)});
    t.push_back({.names = "--pipeline-model-parallel-size", .group = g, .help = "Pipeline stages",
                 .key = "pipeline_model_parallel_size", .bmd_value = "1",
                 .slot = MDS_SLOT(parallel.pipeline_model_parallel_size)});
    t.push_back({.names = "--pp-partition-method,--partition-method", .group = g,
                 .help = "How layers are split between pipeline stages, as DeepSpeed's PipelineModule: "
                         "type:transformer (the default), uniform, parameters, or type:<regex> such as "
                         "'type:transformer|embedding'", .key = "pp_partition_method", .bmd_value = "None",
                 .slot = MDS_SLOT(parallel.pp_partition_method)});
    t.push_back({.names = "--distributed-backend", .group = g,
                 .help = "Collective backend between GPUs: nccl or gloo (training on CPUs always uses gloo)",
                 .key = "distributed_backend", .bmd_value = "'nccl'", .py = PyForm::Str,
                 .slot = MDS_SLOT(parallel.distributed_backend), .choices = {"nccl", "gloo"},
                 .doc = "With nccl, CUDA tensors travel over NCCL process groups (one GPU per rank) and host-side "
                        "numbers over Gloo; with gloo, CUDA tensors go through host memory and ranks may share a GPU "
                        "([parallelism.md](parallelism.md#engines-nccl-and-gloo)) [default: nccl]"});
    t.push_back({.names = "--distributed-timeout-minutes", .group = g,
                 .help = "How long a collective waits for the other ranks before the run stops with an error naming "
                         "them", .slot = MDS_SLOT(parallel.distributed_timeout_minutes), .doc = "(fractions allowed)"});
    t.push_back({.names = "--deepspeed", .group = g, .help = "Use the DeepSpeed engine settings of --deepspeed_config",
                 .key = "deepspeed", .bmd_value = "False", .slot = MDS_SLOT(parallel.deepspeed)});
    t.push_back({.names = "--deepspeed_config", .group = g, .help = "DeepSpeed config JSON", .key = "deepspeed_config",
                 .bmd_value = "None", .slot = MDS_SLOT(parallel.deepspeed_config)});
    t.push_back({.names = "--zero-stage", .group = g, .help = "ZeRO stage: 0 or 1", .key = "zero_stage",
                 .bmd_value = "1.0", .slot = MDS_SLOT(parallel.zero_stage)});
    t.push_back({.names = "--no-overlap-grad-reduce", .group = g,
                 .help = "All-reduce the data-parallel gradients after the backward pass instead of during it",
                 .slot = MDS_SLOT(parallel.overlap_grad_reduce), .store = false});
}

// Megatron-DeepSpeed flags mds does not implement: giving one fails the parse with `why`; the
// checkpoint records BMD's value. Those that take values first.
void refused_rows(std::vector<FlagRow>& t) {
    t.push_back({.names = "--batch-size", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "deprecated in Megatron; use --micro-batch-size", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--model-parallel-size", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "deprecated in Megatron; use --tensor-model-parallel-size", .bmd_value = "None",
                 .py = PyForm::Fixed});
    t.push_back({.names = "--warmup", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "deprecated in Megatron; use --lr-warmup-iters or --lr-warmup-samples", .bmd_value = "None",
                 .py = PyForm::Fixed});
    t.push_back({.names = "--num-layers-per-virtual-pipeline-stage", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "the interleaved pipeline schedule is not implemented",
                 .key = "num_layers_per_virtual_pipeline_stage", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--train-tokens", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "token-based training length is not implemented; use --train-samples", .key = "train_tokens",
                 .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--kv-channels", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "the head size is always --hidden-size / --num-attention-heads", .key = "kv_channels",
                 .bmd_value = "None", .py = PyForm::Derived});
    t.push_back({.names = "--glu-activation", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "GLU activations are not implemented (GeLU only)", .key = "glu_activation", .bmd_value = "None",
                 .py = PyForm::Fixed});
    t.push_back({.names = "--dataloader-type", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "mds has one data loader (Megatron's single)", .key = "dataloader_type",
                 .bmd_value = "'single'", .py = PyForm::Fixed});
    t.push_back({.names = "--skip-train-iteration-range", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "skipping iteration ranges is not implemented yet", .key = "skip_train_iteration_range",
                 .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--remote-device", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "ZeRO offload is not implemented", .key = "remote_device", .bmd_value = "'none'",
                 .py = PyForm::Fixed});
    t.push_back({.names = "--zero-reduce-bucket-size", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "ZeRO-2/3 bucket settings are not implemented", .key = "zero_reduce_bucket_size",
                 .bmd_value = "0.0", .py = PyForm::Fixed});
    t.push_back({.names = "--zero-allgather-bucket-size", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "ZeRO-2/3 bucket settings are not implemented", .key = "zero_allgather_bucket_size",
                 .bmd_value = "0.0", .py = PyForm::Fixed});
    t.push_back({.names = "--DDP-impl", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "mds has one data-parallel implementation", .key = "DDP_impl", .bmd_value = "'local'",
                 .py = PyForm::Fixed});
    t.push_back({.names = "--vocab-extra-ids", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "extra sentinel tokens (T5) are not implemented", .key = "vocab_extra_ids", .bmd_value = "0",
                 .py = PyForm::Fixed});
    t.push_back({.names = "--encoder-seq-length", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "encoder-decoder models are not implemented", .key = "encoder_seq_length", .bmd_value = "None",
                 .py = PyForm::Derived});
    t.push_back({.names = "--decoder-seq-length", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "encoder-decoder models are not implemented", .key = "decoder_seq_length", .bmd_value = "None",
                 .py = PyForm::Fixed});
}

// Refused store_true flags (no value).
void refused_switch_rows(std::vector<FlagRow>& t) {
    t.push_back({.names = "--apply-residual-connection-post-layernorm", .group = kRefused,
                 .status = FlagStatus::Refused, .why = "post-layernorm residuals are not implemented",
                 .key = "apply_residual_connection_post_layernorm", .bmd_value = "False", .py = PyForm::Fixed,
                 .takes_value = false});
    t.push_back({.names = "--openai-gelu", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "only the tanh-approximated GeLU is implemented", .key = "openai_gelu", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--fp32-residual-connection", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "the residual stream is kept in the training dtype", .key = "fp32_residual_connection",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--init-method-xavier-uniform", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "only normal initialization is implemented", .key = "init_method_xavier_uniform",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--use-bnb-optimizer", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "bitsandbytes optimizers are not implemented", .key = "use_bnb_optimizer", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--cpu-optimizer", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "CPU optimizers are not implemented", .key = "cpu_optimizer", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--cpu_torch_adam", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "CPU optimizers are not implemented", .key = "cpu_torch_adam", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--universal-checkpoint", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "universal checkpoints are not implemented yet", .key = "universal_checkpoint",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--inference", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "mds-train only trains", .key = "inference", .bmd_value = "False", .py = PyForm::Fixed,
                 .takes_value = false});
    t.push_back({.names = "--adlr-autoresume", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "ADLR autoresume is NVIDIA-internal", .key = "adlr_autoresume", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--use-contiguous-buffers-in-ddp", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "mds has one data-parallel implementation", .key = "use_contiguous_buffers_in_ddp",
                 .bmd_value = "False", .py = PyForm::Derived, .takes_value = false});
    t.push_back({.names = "--reset-position-ids", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "position ids are never reset at document ends", .key = "reset_position_ids",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--reset-attention-mask", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "attention is never masked at document ends", .key = "reset_attention_mask",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--eod-mask-loss", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "the loss is never masked at end-of-document tokens", .key = "eod_mask_loss",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--loss-on-targets-only", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "prefix-LM losses are not implemented", .key = "loss_on_targets_only", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--reweight-loss-based-on-position-frequency", .group = kRefused,
                 .status = FlagStatus::Refused, .why = "prefix-LM losses are not implemented",
                 .key = "reweight_loss_based_on_position_frequency", .bmd_value = "False", .py = PyForm::Fixed,
                 .takes_value = false});
    t.push_back({.names = "--zero-reduce-scatter", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "ZeRO-2/3 settings are not implemented", .key = "zero_reduce_scatter", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--zero-contigious-gradients", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "ZeRO-2/3 settings are not implemented", .key = "zero_contigious_gradients",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--partition-activations", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "activation partitioning is not implemented", .key = "partition_activations",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--contigious-checkpointing", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "activation partitioning is not implemented", .key = "contigious_checkpointing",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--checkpoint-in-cpu", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "CPU activation checkpoints are not implemented", .key = "checkpoint_in_cpu",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--distribute-checkpointed-activations", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "activation partitioning is not implemented", .key = "distribute_checkpointed_activations",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--scattered-embeddings", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "ZeRO-3 features are not implemented", .key = "scattered_embeddings", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--split-transformers", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "ZeRO-3 features are not implemented", .key = "split_transformers", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--memory-centric-tiled-linear", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "ZeRO-3 features are not implemented", .key = "memory_centric_tiled_linear",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--no-masked-softmax-fusion", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "mds always computes what Megatron's fused path computes (with ATen ops; it has no fused kernels)", .key = "masked_softmax_fusion", .bmd_value = "True",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--no-bias-gelu-fusion", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "mds always computes what Megatron's fused path computes (with ATen ops; it has no fused kernels)", .key = "bias_gelu_fusion", .bmd_value = "True",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--no-bias-dropout-fusion", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "mds always computes what Megatron's fused path computes (with ATen ops; it has no fused kernels)", .key = "bias_dropout_fusion", .bmd_value = "True",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--no-query-key-layer-scaling", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "query-key layer scaling is always on in fp16", .key = "apply_query_key_layer_scaling",
                 .bmd_value = "True", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--attention-softmax-in-fp32", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "not implemented yet", .key = "attention_softmax_in_fp32", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--accumulate-allreduce-grads-in-fp32", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "not implemented yet", .key = "accumulate_allreduce_grads_in_fp32", .bmd_value = "False",
                 .py = PyForm::Derived, .takes_value = false});
    t.push_back({.names = "--fp16-lm-cross-entropy", .group = kRefused, .status = FlagStatus::Refused,
                 .why = "the cross entropy is computed in fp32", .key = "fp16_lm_cross_entropy", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
}

// BMD flags mds-train does not declare yet (issue 18: each becomes Supported, NoEffect or Refused):
// unknown to the parser; the checkpoint records BMD's value (or the Namespace writer derives it).
void undeclared_rows(std::vector<FlagRow>& t) {
    t.push_back({.names = "--onnx-safe", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "onnx_safe",
                 .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--bert-no-binary-head", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "bert_binary_head", .bmd_value = "True", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--eval-only", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "eval_only",
                 .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--no-scatter-gather-tensors-in-pipeline", .group = kUndeclared,
                 .status = FlagStatus::Undeclared, .key = "scatter_gather_tensors_in_pipeline", .bmd_value = "True",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--local_rank", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "local_rank",
                 .bmd_value = "None", .py = PyForm::Derived});
    t.push_back({.names = "--lazy-mpu-init", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "lazy_mpu_init", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--use-cpu-initialization", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "use_cpu_initialization", .bmd_value = "None", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--log-path", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "log_path",
                 .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--retriever-seq-length", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "retriever_seq_length", .bmd_value = "256", .py = PyForm::Fixed});
    t.push_back({.names = "--sample-rate", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "sample_rate",
                 .bmd_value = "1.0", .py = PyForm::Fixed});
    t.push_back({.names = "--mask-prob", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "mask_prob",
                 .bmd_value = "0.15", .py = PyForm::Fixed});
    t.push_back({.names = "--short-seq-prob", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "short_seq_prob", .bmd_value = "0.1", .py = PyForm::Fixed});
    t.push_back({.names = "--mmap-warmup", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "mmap_warmup",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--noise-density", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "noise_density", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--mean-noise-span-length", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "mean_noise_span_length", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--adlr-autoresume-interval", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "adlr_autoresume_interval", .bmd_value = "1000", .py = PyForm::Fixed});
    t.push_back({.names = "--ict-head-size", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "ict_head_size", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--biencoder-projection-dim", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "biencoder_projection_dim", .bmd_value = "0", .py = PyForm::Fixed});
    t.push_back({.names = "--biencoder-shared-query-context-model", .group = kUndeclared,
                 .status = FlagStatus::Undeclared, .key = "biencoder_shared_query_context_model", .bmd_value = "False",
                 .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--ict-load", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "ict_load",
                 .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--bert-load", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "bert_load",
                 .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--titles-data-path", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "titles_data_path", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--query-in-block-prob", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "query_in_block_prob", .bmd_value = "0.1", .py = PyForm::Fixed});
    t.push_back({.names = "--use-one-sent-docs", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "use_one_sent_docs", .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--evidence-data-path", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "evidence_data_path", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--retriever-report-topk-accuracies", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "retriever_report_topk_accuracies", .bmd_value = "[]", .py = PyForm::Fixed});
    t.push_back({.names = "--retriever-score-scaling", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "retriever_score_scaling", .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--block-data-path", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "block_data_path", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--embedding-path", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "embedding_path", .bmd_value = "None", .py = PyForm::Fixed});
    t.push_back({.names = "--indexer-batch-size", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "indexer_batch_size", .bmd_value = "128", .py = PyForm::Fixed});
    t.push_back({.names = "--indexer-log-interval", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "indexer_log_interval", .bmd_value = "1000", .py = PyForm::Fixed});
    t.push_back({.names = "--num-classes", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "num_classes",
                 .bmd_value = "1000", .py = PyForm::Fixed});
    t.push_back({.names = "--img-dim", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "img_dim",
                 .bmd_value = "224", .py = PyForm::Fixed});
    t.push_back({.names = "--num-channels", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "num_channels", .bmd_value = "3", .py = PyForm::Fixed});
    t.push_back({.names = "--patch-dim", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "patch_dim",
                 .bmd_value = "16", .py = PyForm::Fixed});
    t.push_back({.names = "--use-pin-memory", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "use_pin_memory", .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--tile-factor", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "tile_factor",
                 .bmd_value = "1", .py = PyForm::Fixed});
    t.push_back({.names = "--synchronize-each-layer", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "synchronize_each_layer", .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--profile-backward", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "profile_backward", .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--deepscale", .group = kUndeclared, .status = FlagStatus::Undeclared, .key = "deepscale",
                 .bmd_value = "False", .py = PyForm::Fixed, .takes_value = false});
    t.push_back({.names = "--deepscale_config", .group = kUndeclared, .status = FlagStatus::Undeclared,
                 .key = "deepscale_config", .bmd_value = "None", .py = PyForm::Fixed});
}

#undef MDS_SLOT

}  // namespace

std::vector<FlagRow> megatron_flag_rows() {
    std::vector<FlagRow> t;
    model_rows(t);
    data_rows(t);
    batch_rows(t);
    optimizer_rows(t);
    precision_rows(t);
    logging_rows(t);
    exit_rows(t);
    checkpoint_rows(t);
    parallel_rows(t);
    refused_rows(t);
    refused_switch_rows(t);
    undeclared_rows(t);
    return t;
}

}  // namespace mds::flags
