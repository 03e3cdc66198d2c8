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

// The --no- form of a fused kernel that mds-train turns on by itself on a GPU (trainer/fusions.h).
FlagRow fusion_off_row(const std::string& flag, const std::string& group, FlagSlot (*slot)(TrainArgs&)) {
    return {.names = "--no-" + flag.substr(2), .group = group,
            .help = "Turn off " + flag + ", which mds-train turns on by itself on a GPU where it applies", .slot = slot,
            .store = false, .doc = "(mds only; docs/mds-train.md#fused-kernels)"};
}

const std::string kRefused = "Megatron flags not supported";
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
    t.push_back({.names = "--kv-channels", .group = g,
                 .help = "Size of each attention head's query, key and value [default: --hidden-size / --num-attention-heads]",
                 .key = "kv_channels", .bmd_value = "None", .py = PyForm::Derived, .slot = MDS_SLOT(model.kv_channels),
                 .doc = "(Q, K, V and the attention output's input are kv-channels × heads wide, which may differ from "
                        "--hidden-size: query_key_value is [3·heads·kv, hidden], dense [hidden, heads·kv])"});
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
    // Megatron-LM's flag (not in BMD): its names for the attention kernels, here SDPA's.
    t.push_back({.names = "--attention-backend", .group = g,
                 .help = "Attention kernel: auto (LibTorch's choice for the device, dtype and mask), flash (FlashAttention), "
                         "fused (cuDNN's fused attention), unfused or local (the math path: scores in memory); a kernel "
                         "that cannot run the model's attention is refused at start [default: auto]",
                 .slot = MDS_SLOT(model.attention_backend), .choices = {"auto", "flash", "fused", "unfused", "local"},
                 .doc = "(mds only; Megatron-LM's flag; the log's \"attention:\" line names the kernel in use)"});
    t.push_back({.names = "--embed-layernorm", .group = g, .help = "Layer norm right after the word embeddings (BLOOM)",
                 .key = "embed_layernorm", .bmd_value = "False", .slot = MDS_SLOT(model.embed_layernorm)});
    t.push_back({.names = "--glu-activation", .group = g,
                 .help = "GLU activation of the MLP (needs --no-bias-gelu-fusion): dense_h_to_4h gets 2 × --ffn-hidden-size "
                         "outputs, x1 · act(x2) of its halves",
                 .key = "glu_activation", .bmd_value = "None", .slot = MDS_SLOT(model.glu_activation),
                 .choices = {"geglu", "liglu", "reglu", "swiglu"},
                 .doc = "(act: GeLU (erf), identity, ReLU, SiLU; with tensor parallelism each rank chunks its own "
                        "output, so a rank's dense_h_to_4h shard is [its x1 rows; its x2 rows], as in BMD's files)"});
    t.push_back({.names = "--no-bias-gelu-fusion", .group = g,
                 .help = "MLP activation without Megatron's fused bias GeLU (tanh approximation): torch's exact GeLU, or "
                         "--glu-activation, --openai-gelu, --onnx-safe",
                 .key = "bias_gelu_fusion", .bmd_value = "True", .slot = MDS_SLOT(model.bias_gelu_fusion), .store = false});
    t.push_back({.names = "--openai-gelu", .group = g,
                 .help = "OpenAI's tanh GeLU formula (only with --no-bias-gelu-fusion, as in BMD, and no --glu-activation)",
                 .key = "openai_gelu", .bmd_value = "False", .slot = MDS_SLOT(model.openai_gelu)});
    t.push_back({.names = "--onnx-safe", .group = g,
                 .help = "Megatron's erf_gelu, x·0.5·(erf(x/1.41421)+1) (only with --no-bias-gelu-fusion and neither "
                         "--glu-activation nor --openai-gelu); any non-empty value is true, as argparse's type=bool",
                 .key = "onnx_safe", .bmd_value = "None", .py = PyForm::Derived, .slot = MDS_SLOT(model.onnx_safe)});
    t.push_back({.names = "--apply-residual-connection-post-layernorm", .group = g,
                 .help = "Take each residual connection from the LayerNorm's output instead of its input",
                 .key = "apply_residual_connection_post_layernorm", .bmd_value = "False",
                 .slot = MDS_SLOT(model.apply_residual_connection_post_layernorm)});
    t.push_back({.names = "--init-method-xavier-uniform", .group = g,
                 .help = "Xavier-uniform initialization of Megatron's ViT model (accepted for compatibility; no effect in "
                         "mds)",
                 .status = FlagStatus::NoEffect,
                 .why = "only BMD's ViT model reads it; its GPT model initializes with --init-method-std whatever it says",
                 .key = "init_method_xavier_uniform", .bmd_value = "False",
                 .slot = MDS_SLOT(model.init_method_xavier_uniform)});
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
                 .status = FlagStatus::NoEffect,
                 .why = "mds has no fused kernels, so no constraint of one can be unmet",
                 .key = "abort_on_unmet_fused_kernel_constraints", .bmd_value = "False",
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
                 .status = FlagStatus::NoEffect,
                 .why = "BMD's torch DataLoader worker processes only prefetch; the batches are the same",
                 .key = "num_workers", .bmd_value = "2",
                 .slot = MDS_SLOT(data.num_workers)});
    t.push_back({.names = "--valid-num-workers", .group = g,
                 .help = "Data loader workers for validation (accepted for compatibility; no effect in mds)",
                 .status = FlagStatus::NoEffect,
                 .why = "BMD's torch DataLoader worker processes only prefetch; the batches are the same",
                 .key = "valid_num_workers", .bmd_value = "2",
                 .slot = MDS_SLOT(data.valid_num_workers)});
    t.push_back({.names = "--eod-mask-loss", .group = g,
                 .help = "No loss at positions whose input token is the tokenizer's end-of-document token",
                 .key = "eod_mask_loss", .bmd_value = "False", .slot = MDS_SLOT(data.eod_mask_loss),
                 .doc = "(see docs/data-flags.md)"});
    t.push_back({.names = "--reset-position-ids", .group = g,
                 .help = "Position ids restart at 0 after each end-of-document token inside a sample (absolute position "
                         "embeddings; ALiBi has none)",
                 .key = "reset_position_ids", .bmd_value = "False", .slot = MDS_SLOT(data.reset_position_ids),
                 .doc = "(see docs/data-flags.md)"});
    t.push_back({.names = "--reset-attention-mask", .group = g,
                 .help = "Attention within each document (accepted for compatibility; no effect, as in Megatron-DeepSpeed)",
                 .status = FlagStatus::NoEffect,
                 .why = "pretrain_gpt.py builds the mask, but with --deepspeed it sets pretrain_causal_attention and "
                        "GPTModelPipe's EmbeddingPipe drops it: every layer attends causally across documents",
                 .key = "reset_attention_mask", .bmd_value = "False", .slot = MDS_SLOT(data.reset_attention_mask)});
    t.push_back({.names = "--dataloader-type", .group = g,
                 .help = "single: samples in order (Megatron's pretraining sampler); cyclic: each data-parallel rank's "
                         "share shuffled anew every epoch (Megatron's random sampler) [default: single]",
                 .key = "dataloader_type", .bmd_value = "'single'", .py = PyForm::Str,
                 .slot = MDS_SLOT(data.dataloader_type), .choices = {"single", "cyclic"},
                 .doc = "(cyclic: no validation or test sets, as BMD's evaluation fails with it; see docs/data-flags.md)"});
    t.push_back({.names = "--skip-train-iteration-range", .group = g,
                 .help = "START-END ...: at iteration START, skip the data up to iteration END as BMD does (END - "
                         "iteration micro batches; the iteration count does not move)",
                 .key = "skip_train_iteration_range", .bmd_value = "None",
                 .slot = MDS_SLOT(data.skip_train_iteration_range), .doc = "(see docs/data-flags.md)"});
    t.push_back({.names = "--vocab-extra-ids", .group = g,
                 .help = "Adds <extra_id_0> ... <extra_id_{N-1}> to a PretrainedFromHF tokenizer's vocabulary (those "
                         "it lacks); GPT2BPETokenizer ignores it, as Megatron's does",
                 .key = "vocab_extra_ids", .bmd_value = "0", .slot = MDS_SLOT(data.vocab_extra_ids)});
    // Megatron-LM's flag (not in BMD, whose finetune_t0_non_causal_decoder.py is a script of its own).
    t.push_back({.names = "--sft", .group = g,
                 .help = "Supervised fine-tuning: --data-path PREFIX names prompt / answer pairs (PREFIX_inputs_document, "
                         "PREFIX_targets_document: mds-preprocess --sft) packed into rows as Megatron-DeepSpeed's decoder-packed "
                         "MTF dataset; attention and position ids stay within each packed example, and no loss is taken "
                         "across examples or on padding",
                 .slot = MDS_SLOT(data.sft),
                 .doc = "(mds only; Megatron-LM's flag name; docs/finetuning.md)"});
    t.push_back({.names = "--loss-on-targets-only", .group = g,
                 .help = "With --sft: the loss counts the answer tokens only (BMD's finetune_t0_non_causal_decoder.py); "
                         "without --sft it has no effect, as in pretrain_gpt.py",
                 .key = "loss_on_targets_only", .bmd_value = "False", .slot = MDS_SLOT(data.loss_on_targets_only),
                 .doc = "(without --sft: pretrain_gpt.py passes prefix_indices=None to get_ltor_masks_and_position_ids, "
                        "which then never reads it; docs/finetuning.md)"});
    t.push_back({.names = "--reweight-loss-based-on-position-frequency", .group = g,
                 .help = "Prefix-LM loss weighting by position (accepted for compatibility; no effect in mds)",
                 .status = FlagStatus::NoEffect,
                 .why = "read only by the prefix-LM loss (GPTModelPipe's CrossEntropy with is_prefix, "
                        "pretrain_prefix_lm.py); pretrain_gpt.py builds the causal model",
                 .key = "reweight_loss_based_on_position_frequency",
                 .bmd_value = "False", .slot = MDS_SLOT(data.reweight_loss_based_on_position_frequency)});
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
    t.push_back({.names = "--train-tokens", .group = g,
                 .help = "Tokens to train (accepted for compatibility; no effect in mds)",
                 .status = FlagStatus::NoEffect,
                 .why = "Megatron-DeepSpeed defines it but reads it nowhere: training length is --train-iters or "
                        "--train-samples", .key = "train_tokens", .bmd_value = "None",
                 .slot = MDS_SLOT(length.train_tokens)});
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
    // mds's own (kernels/adam.h); Megatron's bf16 step is DeepSpeed's BF16_Optimizer around apex FusedAdam.
    t.push_back({.names = "--adam-step-fusion", .group = g,
                 .help = "Adam's step of a bf16 model in two launches (the gradients' norm, then every parameter's "
                         "update): the model's bf16 gradients straight into the fp32 masters and moments, the masters back "
                         "into the model (no fp32 gradient copies): mds's CUDA kernels on a GPU, their CPU reference on the "
                         "CPU; partitioned over the data-parallel ranks, each rank its own part; --bf16, not with "
                         "--cpu-optimizer",
                 .slot = MDS_SLOT(optimizer.adam_step_fusion),
                 .doc = "(mds only; the same update as the unfused step to fp32 rounding; on by default on a GPU where "
                        "it applies, off on the CPU: docs/mds-train.md#fused-kernels)"});
    t.push_back(fusion_off_row("--adam-step-fusion", g, MDS_SLOT(optimizer.adam_step_fusion)));
    t.push_back({.names = "--sgd-momentum", .group = g,
                 .help = "SGD momentum (accepted for compatibility; no effect in mds)", .status = FlagStatus::NoEffect,
                 .why = "read only by --optimizer sgd, which mds refuses", .key = "sgd_momentum", .bmd_value = "0.9",
                 .slot = MDS_SLOT(optimizer.sgd_momentum)});
    t.push_back({.names = "--weight-decay", .group = g, .help = "Decoupled weight decay", .key = "weight_decay",
                 .bmd_value = "0.01", .slot = MDS_SLOT(optimizer.weight_decay)});
    t.push_back({.names = "--clip-grad", .group = g, .help = "Clip gradients to this global L2 norm (0: off)",
                 .key = "clip_grad", .bmd_value = "1.0", .slot = MDS_SLOT(optimizer.clip_grad)});
    t.push_back({.names = "--cpu-optimizer", .group = g,
                 .help = "Keep the fp32 master weights and Adam moments in host memory and run the optimizer step on "
                         "the host (ZeRO-Offload's optimizer offload; same as the DeepSpeed config's "
                         "zero_optimization.offload_optimizer.device \"cpu\")",
                 .key = "cpu_optimizer", .bmd_value = "False", .slot = MDS_SLOT(parallel.cpu_optimizer),
                 .doc = "BMD's own flag raises NotImplementedError; its offload comes from the DeepSpeed config, which "
                        "mds-train reads too. Same curves as without it ([cpu-optimizer.md](cpu-optimizer.md))"});
    t.push_back({.names = "--cpu_torch_adam", .group = g,
                 .help = "Use torch's AdamW for the host step (accepted for compatibility; no effect in mds, whose host "
                         "step is always torch's fused AdamW)",
                 .status = FlagStatus::NoEffect, .key = "cpu_torch_adam", .bmd_value = "False",
                 .slot = MDS_SLOT(parallel.cpu_torch_adam),
                 .doc = "BMD parses it and reads it nowhere ([cpu-optimizer.md](cpu-optimizer.md))"});
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
    t.push_back({.names = "--fp32-residual-connection", .group = g,
                 .help = "Keep the hidden states between the layers, and so the residual sums, in fp32 (needs --fp16 or "
                         "--bf16)",
                 .key = "fp32_residual_connection", .bmd_value = "False", .slot = MDS_SLOT(model.fp32_residual_connection),
                 .doc = "(as BMD's GPTModelPipe: the embedding output turns fp32, the LayerNorms take fp32 and return the "
                        "model dtype, pipeline stages exchange fp32 activations)"});
    t.push_back({.names = "--no-query-key-layer-scaling", .group = g,
                 .help = "Do not scale Q·Kᵀ by 1 / layer number before the softmax (accepted; no effect in mds, see below)",
                 .status = FlagStatus::NoEffect, .key = "apply_query_key_layer_scaling", .bmd_value = "True",
                 .slot = MDS_SLOT(model.apply_query_key_layer_scaling), .store = false,
                 .doc = "(BMD divides the scores by the layer number and its softmax multiplies them back: the same "
                        "function, and the same numbers in fp32; in fp16 / bf16 only the rounding of the half-precision "
                        "scores moves. mds computes the scores once, scaled by 1/sqrt(head size), softmax in fp32, as "
                        "Megatron's fused softmax kernel does)"});
    t.push_back({.names = "--attention-softmax-in-fp32", .group = g,
                 .help = "Attention softmax in fp32 (accepted; no effect in mds, whose attention softmax is always in "
                         "fp32)",
                 .status = FlagStatus::NoEffect, .key = "attention_softmax_in_fp32", .bmd_value = "False",
                 .slot = MDS_SLOT(model.attention_softmax_in_fp32),
                 .doc = "(in BMD it matters only on the unfused softmax path in fp16 / bf16; query-key layer scaling, on by "
                        "default, turns it on, and the fused kernel BigScience's shapes take computes in fp32)"});
    t.push_back({.names = "--fp16-lm-cross-entropy", .group = g,
                 .help = "Cross entropy on fp16 logits (needs --fp16; accepted, no effect: BMD's pipeline model turns the "
                         "logits to fp32 before the loss, as mds does)",
                 .status = FlagStatus::NoEffect, .key = "fp16_lm_cross_entropy", .bmd_value = "False",
                 .slot = MDS_SLOT(model.fp16_lm_cross_entropy),
                 .doc = "(only BMD's non-pipeline GPTModel, built without --deepspeed, reads it; under --deepspeed, "
                        "as BigScience trained, GPTModelPipe appends float16_to_fp32 before the loss whatever it says. "
                        "mds always computes that model's fp32 loss, also without --deepspeed)"});
    // Megatron-LM's flag (not in BMD): here mds's own kernels (kernels/cross_entropy.h).
    t.push_back({.names = "--cross-entropy-loss-fusion", .group = g,
                 .help = "Cross entropy in one pass over the logits each way (fp32 math, no fp32 copy of bf16 logits; the "
                         "backward writes their gradient directly): mds's CUDA kernels on a GPU, their CPU reference on "
                         "the CPU; fp32 or bf16, one tensor-parallel rank",
                 .slot = MDS_SLOT(model.cross_entropy_loss_fusion),
                 .doc = "(mds only; Megatron-LM's flag; the loss equals the unfused one to fp32 rounding; on by default "
                        "on a GPU where it applies, off on the CPU: docs/mds-train.md#fused-kernels)"});
    t.push_back(fusion_off_row("--cross-entropy-loss-fusion", g, MDS_SLOT(model.cross_entropy_loss_fusion)));
    // mds's own (kernels/layer_norm.h); BMD's LayerNorm is apex's MixedFusedLayerNorm, forward and backward.
    t.push_back({.names = "--layernorm-backward-fusion", .group = g,
                 .help = "LayerNorm's backward in one pass over the rows (the input's gradient, and the weight's and "
                         "bias's as per-block sums added in a fixed order; ATen's forward): mds's CUDA kernels on a GPU, "
                         "their CPU reference on the CPU; fp32 or bf16",
                 .slot = MDS_SLOT(model.layernorm_backward_fusion),
                 .doc = "(mds only; the same gradients as ATen's LayerNorm to fp32 rounding; on by default on a GPU "
                        "where it applies, off on the CPU: docs/mds-train.md#fused-kernels)"});
    t.push_back(fusion_off_row("--layernorm-backward-fusion", g, MDS_SLOT(model.layernorm_backward_fusion)));
    // mds's own (kernels/bias_grad.h); BMD's bias gradients are autograd's sums (or apex's fused dense).
    t.push_back({.names = "--bias-grad-fusion", .group = g,
                 .help = "The blocks' Linear bias gradients as column sums in one pass over the output gradient (per-slab "
                         "sums added in a fixed order; ATen's matrix products for the rest): mds's CUDA kernels on a GPU, "
                         "their CPU reference on the CPU; fp32 or bf16",
                 .slot = MDS_SLOT(model.bias_grad_fusion),
                 .doc = "(mds only; the same gradients as autograd's to fp32 rounding; on by default on a GPU where it "
                        "applies, off on the CPU: docs/mds-train.md#fused-kernels)"});
    t.push_back(fusion_off_row("--bias-grad-fusion", g, MDS_SLOT(model.bias_grad_fusion)));
    // Megatron-LM's (apex's fused_weight_gradient_mlp_cuda there; not in BMD, whose bf16 gradients DeepSpeed adds).
    t.push_back({.names = "--gradient-accumulation-fusion", .group = g,
                 .help = "bf16: each block's Linear weight gradient added straight into its fp32 main gradient by the "
                         "matrix product itself (cuBLAS, bf16 inputs, fp32 accumulator, on a GPU; the same sum in fp32 on "
                         "the CPU), instead of a bf16 gradient added afterwards",
                 .slot = MDS_SLOT(model.gradient_accumulation_fusion),
                 .doc = "(Megatron-LM's fusion; the gradients skip one bf16 rounding per micro batch; off unless given: "
                        "its CUDA path has not yet run on a GPU, docs/mds-train.md#fused-kernels)"});
    // mds's own (kernels/layer_norm.h's forward with the residual sum; llm.c's fused_residual_forward).
    t.push_back({.names = "--residual-layernorm-fusion", .group = g,
                 .help = "Each residual sum and the LayerNorm after it (post_attention_layernorm, the next block's "
                         "input_layernorm, the final one) in one pass (the sum written once and not read back; mds's "
                         "LayerNorm backward): mds's CUDA kernels on a GPU, their CPU reference on the CPU; fp32 or bf16",
                 .slot = MDS_SLOT(model.residual_layernorm_fusion),
                 .doc = "(mds only; the same sum exactly and the same LayerNorm to fp32 rounding; off unless given: its CUDA "
                        "kernel has run only in tests/emu's emulator so far, docs/mds-train.md#fused-kernels)"});
    // mds's own (cuBLASLt's GeLU epilogues; llm.c's gelu_fusion 2, off by default there).
    t.push_back({.names = "--gelu-epilogue-fusion", .group = g,
                 .help = "Each block's MLP as one function: on a GPU, the first Linear's product, bias and GeLU in one "
                         "cuBLASLt product (GeLU's input kept for the backward), and GeLU's derivative applied inside the "
                         "second Linear's input-gradient product; ATen's steps on the CPU; fp32 or bf16, the fused bias GeLU, "
                         "one tensor-parallel rank",
                 .slot = MDS_SLOT(model.gelu_epilogue_fusion),
                 .doc = "(mds only; the same MLP and gradients to fp32 rounding; off unless given: its CUDA path has not "
                        "yet run on a GPU, docs/mds-train.md#fused-kernels)"});
    t.push_back({.names = "--no-gradient-accumulation-fusion", .group = g,
                 .help = "Turn off --gradient-accumulation-fusion (Megatron-LM's flag; mds's default already)",
                 .slot = MDS_SLOT(model.gradient_accumulation_fusion), .store = false,
                 .doc = "(Megatron-LM's flag, accepted for its scripts; docs/mds-train.md#fused-kernels)"});
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
    // Megatron-LM's profiling flags (not in BMD: no Namespace key).
    t.push_back({.names = "--profile", .group = g,
                 .help = "Profile the iterations after --profile-step-start up to --profile-step-end on --profile-ranks: "
                         "with --use-pytorch-profiler under LibTorch's profiler, else as Nsight Systems' capture range "
                         "(nsys profile's capture range cudaProfilerApi)",
                 .slot = MDS_SLOT(logging.profile), .doc = "(mds only; Megatron-LM's flag; see Profiling below)"});
    t.push_back({.names = "--use-pytorch-profiler", .group = g,
                 .help = "With --profile: LibTorch's profiler writes a trace to --tensorboard-dir (else the working "
                         "directory) and the log gets the GPU kernels (CPU operators on a CPU) taking the most time "
                         "and every host synchronisation",
                 .slot = MDS_SLOT(logging.use_pytorch_profiler), .doc = "(mds only; Megatron-LM's flag)"});
    t.push_back({.names = "--profile-step-start", .group = g,
                 .help = "With --profile: start before the step after this iteration",
                 .slot = MDS_SLOT(logging.profile_step_start), .doc = "(mds only; Megatron-LM's flag)"});
    t.push_back({.names = "--profile-step-end", .group = g,
                 .help = "With --profile: stop after this iteration",
                 .slot = MDS_SLOT(logging.profile_step_end), .doc = "(mds only; Megatron-LM's flag)"});
    t.push_back({.names = "--profile-ranks", .group = g,
                 .help = "With --profile: the global ranks to profile [default: 0]",
                 .slot = MDS_SLOT(logging.profile_ranks), .doc = "(mds only; Megatron-LM's flag)"});
    // MLflow tracking (not in BMD: no Namespace key). docs/mlflow.md.
    t.push_back({.names = "--mlflow-tracking-uri", .group = g,
                 .help = "Send params, metrics and job tags to this MLflow tracking server (http(s)://host:port; "
                         "default: $MLFLOW_TRACKING_URI); a server that is down never stops the training",
                 .slot = MDS_SLOT(logging.mlflow_tracking_uri), .doc = "(mds only; docs/mlflow.md)"});
    t.push_back({.names = "--mlflow-experiment-name", .group = g,
                 .help = "MLflow experiment (default: $MLFLOW_EXPERIMENT_NAME, else the --save folder's name, else mds)",
                 .slot = MDS_SLOT(logging.mlflow_experiment_name), .doc = "(mds only)"});
    t.push_back({.names = "--mlflow-run-name", .group = g,
                 .help = "Name of a new MLflow run (a resumed run keeps its id and name)",
                 .slot = MDS_SLOT(logging.mlflow_run_name), .doc = "(mds only)"});
    t.push_back({.names = "--mlflow-flush-timeout", .group = g,
                 .help = "Seconds the end of training waits for MLflow to take what is still queued",
                 .slot = MDS_SLOT(logging.mlflow_flush_timeout), .doc = "(mds only)"});
    t.push_back({.names = "--tensorboard-log-interval", .group = g, .help = "Iterations between TensorBoard points",
                 .key = "tensorboard_log_interval", .bmd_value = "1",
                 .slot = MDS_SLOT(logging.tensorboard_log_interval)});
    t.push_back({.names = "--tensorboard-queue-size", .group = g,
                 .help = "Events buffered before a TensorBoard flush (accepted for compatibility; no effect in mds)",
                 .status = FlagStatus::NoEffect, .why = "it only sets when TensorBoard events reach the disk",
                 .key = "tensorboard_queue_size", .bmd_value = "1000",
                 .slot = MDS_SLOT(logging.tensorboard_queue_size)});
    t.push_back({.names = "--log-timers-to-tensorboard", .group = g, .help = "Write timers to TensorBoard",
                 .key = "log_timers_to_tensorboard", .bmd_value = "False",
                 .slot = MDS_SLOT(logging.log_timers_to_tensorboard)});
    t.push_back({.names = "--timing-log-level", .group = g,
                 .help = "Which timers run and are logged: 0 none in the step (only save-checkpoint), 1 the step's "
                         "phases (optimizer, gradient all-reduces), 2 also the fine ones (forward/backward compute, "
                         "batch generator, pipeline send/recv)",
                 .slot = MDS_SLOT(logging.timing_log_level), .choices = {"0", "1", "2"},
                 .doc = "(mds only; Megatron-LM's flag, default 2 here: BMD's line without --deepspeed, and the "
                        "straggler report's timers; docs/mds-train.md#timers)"});
    t.push_back({.names = "--timing-log-option", .group = g,
                 .help = "How the timers' line reduces each timer over the ranks: max, minmax (min and max) or all "
                         "(one line per rank) [default: max]",
                 .slot = MDS_SLOT(logging.timing_log_option), .choices = {"max", "minmax", "all"},
                 .doc = "(mds only; Megatron-LM's flag, default max here: BMD's one number per timer; "
                        "docs/mds-train.md#timers)"});
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
    // Megatron-LM's straggler report (not in BMD: no Namespace key); on by default in mds, so that a slow
    // node shows within the hour (one small collective per log interval). See "Stragglers" in the docs.
    t.push_back({.names = "--log-straggler", .group = g,
                 .help = "Report the slowest and fastest ranks' own step and data-wait times with their hosts every log "
                         "interval, and alert on a persistent straggler (the default when there are several ranks)",
                 .slot = MDS_SLOT(logging.straggler.enabled),
                 .doc = "(mds only; Megatron-LM's flag, on by default here; docs/mds-train.md#stragglers)"});
    t.push_back({.names = "--no-log-straggler", .group = g, .help = "No straggler report nor straggler alert",
                 .slot = MDS_SLOT(logging.straggler.enabled), .store = false, .doc = "(mds only)"});
    t.push_back({.names = "--disable-straggler-on-startup", .group = g,
                 .help = "Megatron-LM: the straggler report starts off (mds has no controller port to turn it on: off "
                         "for the run)",
                 .slot = MDS_SLOT(logging.straggler.disabled_on_startup), .doc = "(mds only; Megatron-LM's flag)"});
    t.push_back({.names = "--straggler-ctrlr-port", .group = g,
                 .help = "Megatron-LM's port for turning the straggler report on and off (accepted for compatibility; no "
                         "effect in mds)",
                 .status = FlagStatus::NoEffect, .why = "mds has no controller: the report is on or off for the whole run",
                 .bmd_value = "65535", .type = ArgType::Int});
    t.push_back({.names = "--straggler-minmax-count", .group = g,
                 .help = "Ranks the straggler report lists at each end: with N > 1, the N slowest and N fastest",
                 .slot = MDS_SLOT(logging.straggler.minmax_count), .doc = "(mds only; Megatron-LM's flag)"});
    t.push_back({.names = "--straggler-alert-ratio", .group = g,
                 .help = "A rank whose compute time per iteration is at least this multiple of the median of the other "
                         "ranks' (of its pipeline stage) is slow in that log interval",
                 .slot = MDS_SLOT(logging.straggler.alert_ratio), .doc = "(mds only)"});
    t.push_back({.names = "--straggler-alert-intervals", .group = g,
                 .help = "Log intervals in a row a rank must be slow before the ***ALERT: straggler line (and "
                         "--alert-command)",
                 .slot = MDS_SLOT(logging.straggler.alert_intervals), .doc = "(mds only)"});
}

void exit_rows(std::vector<FlagRow>& t) {
    const std::string g = "Exit";
    t.push_back({.names = "--exit-interval", .group = g, .help = "Exit after the iteration that is a multiple of this",
                 .key = "exit_interval", .bmd_value = "None", .slot = MDS_SLOT(exit.exit_interval)});
    t.push_back({.names = "--exit-duration-in-mins", .group = g, .help = "Exit (after saving) after this many minutes",
                 .key = "exit_duration_in_mins", .bmd_value = "None", .slot = MDS_SLOT(exit.exit_duration_in_mins)});
    t.push_back({.names = "--kill-switch-path", .group = g, .help = "Exit (without saving) when this file appears",
                 .key = "kill_switch_path", .bmd_value = "None", .slot = MDS_SLOT(exit.kill_switch_path)});
    // mds only: absolute stopping points (--exit-interval counts multiples of an interval instead).
    t.push_back({.names = "--exit-iteration", .group = g,
                 .help = "Exit (after saving) once this iteration is trained; a run resumed at or past it exits at once",
                 .slot = MDS_SLOT(exit.exit_iteration), .doc = "(mds only)"});
    t.push_back({.names = "--exit-samples", .group = g,
                 .help = "Exit (after saving) after the first iteration whose consumed samples reach this count; a run "
                         "resumed at or past it exits at once", .slot = MDS_SLOT(exit.exit_samples), .doc = "(mds only)"});
}

void checkpoint_rows(std::vector<FlagRow>& t) {
    const std::string g = "Checkpoints";
    t.push_back({.names = "--save", .group = g, .help = "Save checkpoints in this directory", .key = "save",
                 .bmd_value = "None", .slot = MDS_SLOT(checkpoint.save)});
    t.push_back({.names = "--load", .group = g, .help = "Resume from the latest checkpoint in this directory",
                 .key = "load", .bmd_value = "None", .slot = MDS_SLOT(checkpoint.load)});
    t.push_back({.names = "--save-interval", .group = g,
                 .help = "Iterations between checkpoints: N (save when the iteration is a multiple of N) or a schedule "
                         "N@A-B,...[,N] (interval N for iterations A to B; the bare N elsewhere)",
                 .key = "save_interval", .bmd_value = "None", .slot = MDS_SLOT(checkpoint.save_interval),
                 .doc = "(see Save schedules and absolute exits; a checkpoint's args.save_interval is the interval in "
                        "effect at its iteration)"});
    t.push_back({.names = "--no-save-optim", .group = g, .help = "Save no optimizer states (weights-only checkpoints)",
                 .key = "no_save_optim", .bmd_value = "None", .py = PyForm::TrueOrNone,
                 .slot = MDS_SLOT(checkpoint.no_save_optim)});
    t.push_back({.names = "--no-save-rng", .group = g, .help = "Save no random number generator states",
                 .key = "no_save_rng", .bmd_value = "None", .py = PyForm::TrueOrNone,
                 .slot = MDS_SLOT(checkpoint.no_save_rng)});
    // Megatron-LM's flag (not in BMD: no Namespace key); on by default in mds. See "Asynchronous saves".
    t.push_back({.names = "--async-save", .group = g,
                 .help = "Write checkpoints in the background: the step waits only while the state is copied to host "
                         "memory; `latest` moves once the files are durable (the default)",
                 .slot = MDS_SLOT(checkpoint.async_save),
                 .doc = "(mds only; Megatron-LM's flag, on by default here; docs/mds-train.md#asynchronous-saves)"});
    t.push_back({.names = "--no-async-save", .group = g,
                 .help = "Write checkpoints synchronously: the step waits until the files and `latest` are written",
                 .slot = MDS_SLOT(checkpoint.async_save), .store = false, .doc = "(mds only)"});
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
    t.push_back({.names = "--universal-checkpoint", .group = g,
                 .help = "--load is a universal checkpoint (the folder --load's latest_universal names: ds_to_universal.py, "
                         "mds-ckpt-reshape --universal): resume it at any TP / PP / DP",
                 .key = "universal_checkpoint", .bmd_value = "False", .slot = MDS_SLOT(checkpoint.universal_checkpoint)});
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
void refused_rows([[maybe_unused]] std::vector<FlagRow>& t) {  // none left now; the function stays for new ones
}

// Refused store_true flags (no value).
void refused_switch_rows([[maybe_unused]] std::vector<FlagRow>& t) {  // none left now; the function stays for new ones
}

// Flags that run or launch a job: --eval-only and --local_rank have BMD's meaning; --log-path
// only names where BMD writes its arguments list.
void running_rows(std::vector<FlagRow>& t) {
    t.push_back({.names = "--eval-only", .group = "Logging and evaluation",
                 .help = "VALUE: train no step; evaluate the validation and test sets once, as at the end of training, "
                         "and exit without saving. Any non-empty VALUE is true (argparse's type=bool: even False)",
                 .key = "eval_only", .bmd_value = "None", .py = PyForm::BoolOfStr, .slot = MDS_SLOT(logging.eval_only),
                 .doc = "(BMD's pretrain with do_train off: the validation sets at iteration 0, \"the end of training "
                        "for val data\", then the test sets; with --load, the loaded weights; see "
                        "[flags-compat.md](flags-compat.md))"});
    t.push_back({.names = "--log-path", .group = "Logging and evaluation",
                 .help = "Folder of BMD's arguments file (no effect in mds: it writes no arguments file)",
                 .status = FlagStatus::NoEffect,
                 .why = "BMD writes its printed arguments list to args_<time>.txt there; mds-train prints no arguments "
                        "list, and nothing it computes reads the flag",
                 .key = "log_path", .bmd_value = "None"});
    t.push_back({.names = "--local_rank,--local-rank", .group = "Parallelism and DeepSpeed",
                 .help = "Local rank given by torch.distributed.launch: must be the local rank of the launcher's "
                         "environment (LOCAL_RANK, SLURM_LOCALID, ...; 0 without a launcher)",
                 .key = "local_rank", .bmd_value = "None", .py = PyForm::Derived, .slot = MDS_SLOT(parallel.local_rank),
                 .doc = "(BMD asserts it equals rank % GPUs; mds picks each process's device from its local rank, so "
                        "a different value fails the run, naming both)"});
}

// Switches that only choose how BMD computes, stores or times the same numbers, or that BMD
// declares and never reads: accepted, and mds's numbers do not depend on them.
void implementation_rows(std::vector<FlagRow>& t) {
    const std::string g = "Implementation switches (no effect on mds's numbers)";
    const auto row = [&](std::string names, std::string help, std::string why, std::string key, std::string bmd,
                         bool takes_value = false, ArgType type = ArgType::Str, bool store = true,
                         std::vector<std::string> choices = {}) {
        t.push_back({.names = std::move(names), .group = g, .help = std::move(help) + " (no effect in mds)",
                     .status = FlagStatus::NoEffect, .why = std::move(why), .key = std::move(key),
                     .bmd_value = std::move(bmd), .store = store, .takes_value = takes_value,
                     .choices = std::move(choices), .type = type});
    };
    const std::string never_read = "BMD's arguments.py declares it and nothing in BMD reads it";
    row("--use-cpu-initialization", "Draw each whole weight on the CPU, then cut the tensor-parallel slices",
        "mds always initializes so: every weight is drawn whole on the CPU from --seed and each rank keeps its slice, "
        "so initial weights never depend on --tensor-model-parallel-size (its draws are mds's own, not BMD's, with or "
        "without the flag: compare runs from one checkpoint)", "use_cpu_initialization", "None");
    row("--mmap-warmup", "Read the datasets' index files once before training",
        "it only warms the page cache (BMD's skip_warmup=False); the samples read are the same", "mmap_warmup", "False");
    row("--no-masked-softmax-fusion", "Attention softmax with PyTorch ops instead of Megatron's fused CUDA kernel",
        "both compute the same scale, causal mask and softmax (agreeing to rounding); mds has one implementation, "
        "with ATen ops", "masked_softmax_fusion", "True", false, ArgType::Str, false);
    row("--no-bias-dropout-fusion", "Bias + dropout + residual add without TorchScript fusion",
        "fused or not, the same operations in the same order with the same dropout draws", "bias_dropout_fusion", "True",
        false, ArgType::Str, false);
    row("--partition-activations", "DeepSpeed activation checkpointing: split saved layer inputs over tensor-parallel ranks",
        "memory only: the recomputed layers see the same inputs", "partition_activations", "False");
    row("--contigious-checkpointing", "DeepSpeed activation checkpointing: saved inputs in one buffer (BMD's spelling)",
        "memory layout only", "contigious_checkpointing", "False");
    row("--checkpoint-in-cpu", "DeepSpeed activation checkpointing: saved inputs in host memory",
        "memory placement only: the recomputed layers see the same inputs", "checkpoint_in_cpu", "False");
    row("--synchronize-each-layer", "DeepSpeed activation checkpointing: synchronize the GPU after each layer",
        "timing only", "synchronize_each_layer", "False");
    row("--profile-backward", "DeepSpeed activation checkpointing: time the backward pass", "timing only",
        "profile_backward", "False");
    row("--distribute-checkpointed-activations",
        "Megatron's activation checkpointing: split saved inputs over tensor-parallel ranks",
        "memory only: the recomputed layers see the same inputs", "distribute_checkpointed_activations", "False");
    row("--split-transformers", "Twice as many DeepSpeed checkpoint buffers",
        "BMD reads it only to size DeepSpeed's contiguous checkpoint buffers (memory only)", "split_transformers", "False");
    row("--scattered-embeddings", "ZeRO-3 embedding activations scattered", never_read, "scattered_embeddings", "False");
    row("--memory-centric-tiled-linear", "deepspeed.zero.TiledLinear layers", never_read, "memory_centric_tiled_linear",
        "False");
    row("--tile-factor", "Tiles of --memory-centric-tiled-linear", never_read, "tile_factor", "1", true, ArgType::Int);
    row("--zero-reduce-scatter", "ZeRO reduce-scatter",
        never_read + " (DeepSpeed takes its ZeRO settings from --deepspeed_config)", "zero_reduce_scatter", "False");
    row("--zero-contigious-gradients", "ZeRO contiguous gradients",
        never_read + " (DeepSpeed takes its ZeRO settings from --deepspeed_config)", "zero_contigious_gradients", "False");
    row("--zero-reduce-bucket-size", "ZeRO reduce bucket size",
        never_read + " (DeepSpeed takes its ZeRO settings from --deepspeed_config)", "zero_reduce_bucket_size", "0.0",
        true, ArgType::Int);
    row("--zero-allgather-bucket-size", "ZeRO all-gather bucket size",
        never_read + " (DeepSpeed takes its ZeRO settings from --deepspeed_config)", "zero_allgather_bucket_size", "0.0",
        true, ArgType::Int);
    row("--use-pin-memory", "Pinned host memory for ZeRO-3 parameters", never_read, "use_pin_memory", "False");
    row("--remote-device", "Where ZeRO-3 keeps parameters: none, cpu or nvme",
        "BMD passes it only to deepspeed.zero.Init, which is enabled only with --zero-stage 3 (mds takes 0 or 1)",
        "remote_device", "'none'", true, ArgType::Str, true, {"none", "cpu", "nvme"});
    row("--DDP-impl", "Data-parallel wrapper without --deepspeed: local (Megatron's) or torch",
        "both average the same gradients over the data-parallel group (with --deepspeed BMD wraps with neither)",
        "DDP_impl", "'local'", true, ArgType::Str, true, {"local", "torch"});
    row("--use-contiguous-buffers-in-ddp", "Megatron's local DDP keeps gradients in one buffer",
        "memory layout only", "use_contiguous_buffers_in_ddp", "False");
    row("--no-scatter-gather-tensors-in-pipeline",
        "Pipeline sends whole activations instead of tensor-parallel slices gathered on arrival",
        "communication volume only: the receiving stage gets the same activation", "scatter_gather_tensors_in_pipeline",
        "True", false, ArgType::Str, false);
    row("--adlr-autoresume-interval", "Iterations between ADLR autoresume checks",
        "read only with --adlr-autoresume, which mds refuses", "adlr_autoresume_interval", "1000", true, ArgType::Int);
    row("--deepscale", "DeepSpeed's deprecated helper switch",
        "DeepSpeed's add_config_arguments declares it with no impact on DeepSpeed, and BMD never reads it", "deepscale",
        "False");
}

// Flags of BMD's other models: its parser is shared, so pretrain_gpt.py accepts and ignores them.
void other_model_rows(std::vector<FlagRow>& t) {
    const std::string g = "Flags of BMD's BERT, T5, ICT, retriever and vision scripts (no effect in mds-train)";
    // `model`: whose flag it is, for the help; `why`: who reads it in BMD.
    const auto row = [&](std::string names, std::string model, std::string why, std::string key, std::string bmd,
                         bool takes_value = true, ArgType type = ArgType::Str, bool store = true, bool many = false) {
        t.push_back({.names = std::move(names), .group = g, .help = model + " flag of BMD (no effect in mds)",
                     .status = FlagStatus::NoEffect, .why = std::move(why), .key = std::move(key),
                     .bmd_value = std::move(bmd), .store = store, .takes_value = takes_value, .type = type,
                     .many = many});
    };
    const auto read_by = [](const std::string& readers) {
        return "read only by BMD's " + readers + "; pretrain_gpt.py ignores it";
    };
    const std::string unread = "nothing in BMD reads it";
    const std::string bert_t5_ict = read_by("pretrain_bert.py, pretrain_ict.py and pretrain_t5.py");
    const std::string ict = read_by("ICT and retriever code (pretrain_ict.py, megatron/data/ict_dataset.py)");
    const std::string orqa = read_by("ORQA retriever tasks (tasks/orqa)");
    const std::string indexer = read_by("retriever indexer (megatron/indexer.py)");
    const std::string vit = read_by("pretrain_vit.py and vision tasks");
    row("--bert-no-binary-head", "A BERT", read_by("pretrain_bert.py"), "bert_binary_head", "True", false, ArgType::Str,
        false);
    row("--decoder-seq-length", "A T5", read_by("pretrain_t5.py") + " (BMD checks it is at most --max-position-embeddings, "
        "as mds does)", "decoder_seq_length", "None", true, ArgType::Int);
    row("--retriever-seq-length", "A retriever", orqa, "retriever_seq_length", "256", true, ArgType::Int);
    row("--sample-rate", "A retriever", orqa, "sample_rate", "1.0", true, ArgType::Float);
    row("--mask-prob", "A BERT / T5 / ICT", bert_t5_ict, "mask_prob", "0.15", true, ArgType::Float);
    row("--short-seq-prob", "A BERT / T5 / ICT", bert_t5_ict, "short_seq_prob", "0.1", true, ArgType::Float);
    row("--noise-density", "A T5", unread, "noise_density", "None", true, ArgType::Float);
    row("--mean-noise-span-length", "A T5", unread, "mean_noise_span_length", "None", true, ArgType::Float);
    row("--ict-head-size", "An ICT", ict, "ict_head_size", "None", true, ArgType::Int);
    row("--biencoder-projection-dim", "An ICT", ict, "biencoder_projection_dim", "0", true, ArgType::Int);
    row("--biencoder-shared-query-context-model", "An ICT", ict, "biencoder_shared_query_context_model", "False", false);
    row("--ict-load", "A retriever", indexer, "ict_load", "None");
    row("--bert-load", "An ICT / REALM", read_by("ICT and REALM models"), "bert_load", "None");
    row("--titles-data-path", "An ICT", ict, "titles_data_path", "None");
    row("--query-in-block-prob", "An ICT", ict, "query_in_block_prob", "0.1", true, ArgType::Float);
    row("--use-one-sent-docs", "An ICT", ict, "use_one_sent_docs", "False", false);
    row("--evidence-data-path", "A retriever", orqa, "evidence_data_path", "None");
    row("--retriever-report-topk-accuracies", "An ICT", ict, "retriever_report_topk_accuracies", "[]", true,
        ArgType::Int, true, true);
    row("--retriever-score-scaling", "An ICT", ict, "retriever_score_scaling", "False", false);
    row("--block-data-path", "A REALM", unread, "block_data_path", "None");
    row("--embedding-path", "A REALM", read_by("REALM index (megatron/data/realm_index.py)"), "embedding_path", "None");
    row("--indexer-batch-size", "A retriever", indexer, "indexer_batch_size", "128", true, ArgType::Int);
    row("--indexer-log-interval", "A retriever", indexer, "indexer_log_interval", "1000", true, ArgType::Int);
    row("--num-classes", "A vision", vit, "num_classes", "1000", true, ArgType::Int);
    row("--img-dim", "A vision", vit, "img_dim", "224", true, ArgType::Int);
    row("--num-channels", "A vision", vit, "num_channels", "3", true, ArgType::Int);
    row("--patch-dim", "A vision", vit, "patch_dim", "16", true, ArgType::Int);
}

// BMD flags mds-train refuses: giving one fails the parse with `why`, which says what to use.
void refused_running_rows(std::vector<FlagRow>& t) {
    const auto row = [&](std::string names, std::string why, std::string key, std::string bmd, bool takes_value,
                         PyForm py = PyForm::Fixed) {
        t.push_back({.names = std::move(names), .group = kRefused, .status = FlagStatus::Refused, .why = std::move(why),
                     .key = std::move(key), .bmd_value = std::move(bmd), .py = py, .takes_value = takes_value});
    };
    row("--batch-size", "no longer valid in Megatron (BMD stops: '--batch-size argument is no longer valid, use "
        "--micro-batch-size instead'); use --micro-batch-size", "", "None", true);
    row("--model-parallel-size", "no longer valid in Megatron (BMD stops: '--model-parallel-size is no longer valid, "
        "use --tensor-model-parallel-size instead'); use --tensor-model-parallel-size", "", "None", true);
    row("--warmup", "no longer valid in Megatron (BMD stops: '--warmup argument is no longer valid, use "
        "--lr-warmup-fraction instead'); use --lr-warmup-fraction, --lr-warmup-iters or --lr-warmup-samples", "", "None",
        true);
    row("--encoder-seq-length", "the encoder length of pretrain_t5.py; for GPT, BMD copies it into --seq-length when "
        "that is not given (and stops when both are): use --seq-length", "encoder_seq_length", "None", true,
        PyForm::Derived);
    row("--num-layers-per-virtual-pipeline-stage", "Megatron's interleaved pipeline schedule (virtual stages) is not "
        "implemented; use --pipeline-model-parallel-size alone", "num_layers_per_virtual_pipeline_stage", "None", true);
    row("--lazy-mpu-init", "for programs that set up torch.distributed themselves: BMD's initialize_megatron then "
        "returns before initializing it and pretrain_gpt.py fails; mds-train sets up its process group itself (drop "
        "the flag)", "lazy_mpu_init", "None", true);
    row("--deepscale_config", "DeepSpeed's deprecated spelling of --deepspeed_config, which BMD's pretrain never reads "
        "(with --deepspeed it opens --deepspeed_config only); use --deepspeed_config", "deepscale_config", "None", true);
    row("--accumulate-allreduce-grads-in-fp32", "without --deepspeed, Megatron's local DDP then accumulates and "
        "all-reduces the gradients in fp32: mds-train does so for every bf16 run (as BMD, which sets the flag for bf16 "
        "itself), and keeps fp16's gradients in fp16; with --deepspeed BMD ignores the flag: drop it",
        "accumulate_allreduce_grads_in_fp32", "False", false, PyForm::Derived);
    row("--use-bnb-optimizer", "bitsandbytes' 8-bit Adam (with the embedding LayerNorm and Xavier embedding "
        "initialization BMD adds for it) is not implemented; drop the flag to train with Adam", "use_bnb_optimizer",
        "False", false);
    row("--inference", "it builds the model without an optimizer for BMD's evaluation harness (tasks/eval_harness); "
        "to evaluate a checkpoint with mds-train use --load with --eval-only", "inference", "False", false);
    row("--adlr-autoresume", "NVIDIA's cluster autoresume (userlib.auto_resume; BMD exits without it); use "
        "--exit-duration-in-mins, SIGUSR1 or --kill-switch-path, then --load to resume", "adlr_autoresume", "False",
        false);
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
    running_rows(t);
    implementation_rows(t);
    other_model_rows(t);
    refused_running_rows(t);
    return t;
}

}  // namespace mds::flags
