// mds-ckpt-reshape: a DeepSpeed pipeline checkpoint tag rewritten for another tensor-, pipeline-
// and data-parallel layout (specs/checkpoints.md §6). Weights: every layer merged over its TP shards
// (ckpt::DsCheckpoint), the vocabulary re-padded for the new TP degree, split again and written under
// the same global layer index; the mp_rank files rewritten for the new ranks and stages (stage
// boundaries as DeepSpeed's partition_balanced cuts them). Optimizer states (BF16 optimizer files
// only) go through the universal per-parameter layout (universal.h) into the new flat partitions.
// One global tensor is held at a time per worker (layers are spread over `workers` threads); the tag appears in the destination only when complete, and
// `latest` moves last.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mds/ckpt/partition.h"

namespace mds::ckpt {

struct ReshapeOptions {
    int target_tp = 1, target_pp = 1;
    int target_dp = 0;              // 0: the source's data-parallel degree
    std::string tag;                // source tag; empty: the one `latest` names (or SRC is a tag folder)
    bool with_optimizer = false;    // reshard the BF16 optimizer states (else they are dropped)
    bool write_universal = false;   // also write <tag>_universal + latest_universal (needs with_optimizer)
    std::string partition_method;   // empty: args.pp_partition_method, else 'type:transformer' (BMD's default)
    PartitionAlgorithm partition_algorithm = PartitionAlgorithm::Dp;
    std::int64_t original_vocab_size = 0;  // 0: checkpoint_info's; needed when the padded size changes without it
    bool overwrite = false;         // replace an existing destination tag
    bool dry_run = false;           // plan only: nothing is written
    bool verify = true;             // CRC-32 of every pickle and storage read (--no-verify: off)
    int workers = 0;                // threads writing layer / optimizer files side by side; 0: the machine's cores (--workers)
    // After each tensor written: (tensors done, bytes done, bytes in all). Notes for the user, one line each.
    std::function<void(std::uint64_t, std::uint64_t, std::uint64_t)> progress;
    std::function<void(const std::string&)> note;
};

struct ReshapeStage {
    int first_spec = 0, end_spec = 0;  // pipeline spec entries [first, end)
    std::vector<int> layers;           // on-disk layer indices whose parameters the stage holds
    bool tied_embedding = false;       // holds tied_modules.embed (first stage and the LM head's stage)
    std::int64_t parameters = 0;       // per TP rank
};

struct ReshapeReport {
    std::string source, tag, output, universal_output;  // universal_output empty unless written
    int source_tp = 0, source_pp = 0, source_dp = 0;
    int target_tp = 0, target_pp = 0, target_dp = 0;
    std::vector<int> layers;
    std::int64_t source_padded_vocab = 0, target_padded_vocab = 0, original_vocab = 0;  // original 0: unknown
    std::string partition_method;
    PartitionAlgorithm partition_algorithm = PartitionAlgorithm::Dp;
    std::vector<ReshapeStage> stages;
    int optimizer_groups = 0;
    bool optimizer = false;
    std::vector<std::string> files;  // of the output tag folder, sorted
    std::uint64_t bytes = 0;         // written (0 for a dry run)
};

// Reshapes checkpoint `src` (a root with `latest`, or a global_step folder) into checkpoint root
// `dst`: dst/<tag>/ and dst/latest (plus dst/<tag>_universal/ and dst/latest_universal with
// write_universal). `src` and `dst` may not overlap (mds::UsageError); `dst` is prepared with
// mds::prepare_output_dir and the outputs are written under mds::temp_path_for names. Throws
// mds::Error naming the file and what was expected; then nothing is left under the final names
// (temporary folders are removed).
ReshapeReport reshape_checkpoint(const std::string& src, const std::string& dst, const ReshapeOptions& options);

// The target layout for people (source, target, stages -> layers, files), one item per line.
std::string describe_reshape(const ReshapeReport& report);
// The report as one JSON object (what --json prints).
std::string reshape_report_json(const ReshapeReport& report);

}  // namespace mds::ckpt
