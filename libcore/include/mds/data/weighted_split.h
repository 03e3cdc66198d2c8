// Megatron-DeepSpeed's "Mode 2" of data loading (BigScience fork, what BLOOM trained with):
// --(train|valid|test)-weighted-split-paths and their -path forms. Each group is
//   "NAME: W1 START:END P1, W2 START:END P2, ..."
// and becomes one dataset: every path's documents [round(START·n), round(END·n)) as a GPTDataset
// named NAME, blended by weight when the group has several paths (build_dataset_group). One
// training group; any number of named validation and test groups, each evaluated on its own.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mds/data/blending.h"
#include "mds/data/gpt_dataset_index.h"

namespace mds::data {

// One group as BMD's parse_data_paths keeps it: the strings as written (BMD keeps weights and
// ranges as text; they become numbers when the datasets are built).
struct WeightedSplitGroup {
    std::string name;                  // the text before the first ':' (not stripped)
    std::vector<std::string> weights;  // "0.6"
    std::vector<std::string> splits;   // "0:0.95"
    std::vector<std::string> paths;    // dataset prefixes
};

// "--train-weighted-split-paths" for split 0, "--valid-..." for 1, "--test-..." for 2.
const char* weighted_split_flag(int split);

// BMD's parse_data_paths action over the values of `flag` (one string per group). Its checks, as
// mds::UsageError naming the flag (and `where`, e.g. the file it came from) and the group: one
// group only for --train-weighted-split-paths; every dataset is exactly "WEIGHT START:END PATH"
// (three words); START and END are numbers with START < END. mds also refuses what BMD accepts and
// then misreads: START below 0 or END above 1 (BMD asserts the latter when it builds the dataset).
std::vector<WeightedSplitGroup> parse_weighted_split_paths(std::string_view flag, const std::vector<std::string>& values,
                                                           const std::string& where = "");

// BMD's parse_data_paths_path: the file has exactly one line, '"GROUP1" "GROUP2" ...' ending in a
// newline; returns the groups' strings. `flag` is the -path flag (named in errors).
std::vector<std::string> read_weighted_split_paths_file(std::string_view flag, const std::string& path);

// BMD get_split_by_range_("START:END", size): [round(START·size), round(END·size)) with Python's
// round (half to even). `what` names the group and path in errors.
std::array<std::int64_t, 2> get_split_by_range(std::string_view range, std::int64_t size, const std::string& what);

// BMD analyze_data_prefix over a group's weights and paths (several paths): the stripped paths and
// float(weight) / sum. Usage errors name `what` for a weight that is not a number, a negative one,
// or a sum that is not positive.
DataPath weighted_split_data_path(const WeightedSplitGroup& g, const std::string& what);

// The datasets of group `g` of split `split` (0 train, 1 valid, 2 test) as BMD's build_dataset_group
// takes them: one path with the split's whole sample count, or several blended (weighted_split_data_path,
// at most 254) with each path's share of `num_samples` (blended_num_samples: the 1.005 surplus).
struct WeightedGroupMembers {
    std::vector<std::string> prefixes;
    std::vector<double> weights;             // normalized; 1 for a single path
    std::vector<std::int64_t> num_samples;   // requested of each path
};
WeightedGroupMembers weighted_group_members(const WeightedSplitGroup& g, int split, const std::array<std::int64_t, 3>& num_samples,
                                            const std::string& what);

struct WeightedSplitOptions {
    std::array<std::vector<WeightedSplitGroup>, 3> groups;  // train (one group), valid, test
    std::int32_t seq_length = 0;
    std::int64_t seed = 1234;
    NumSamplesOptions num_samples;
    double cutoff_last_epoch = 0.95;
    std::function<void(const std::string&)> log;
};

struct WeightedSplitMemberSummary {
    std::string prefix;
    double weight = 1.0;             // normalized (1 for a group of one path)
    std::int64_t documents = 0;      // in the dataset
    std::int64_t doc_begin = 0, doc_end = 0;
    std::int64_t num_samples = 0;    // requested (with the 1.005 surplus when blended)
    std::int64_t samples = 0;        // len(GPTDataset)
    IndexCachePaths files;
    bool built = false;              // false: the cache files existed
};

struct WeightedSplitGroupSummary {
    std::string name;
    int split = 0;                   // 0 train, 1 valid, 2 test
    bool blended = false;
    std::int64_t size = 0;           // len() of the group's dataset
    std::vector<WeightedSplitMemberSummary> members;
};

class WeightedSplitDatasets {
public:
    // Opens every dataset, builds (or reuses) every index file. Throws mds::Error / UsageError.
    explicit WeightedSplitDatasets(const WeightedSplitOptions& opt);
    ~WeightedSplitDatasets();
    WeightedSplitDatasets(const WeightedSplitDatasets&) = delete;
    WeightedSplitDatasets& operator=(const WeightedSplitDatasets&) = delete;

    std::int64_t train_iters() const { return train_iters_; }
    const std::array<std::int64_t, 3>& num_samples() const { return num_samples_; }
    // The groups of split 0 (train), 1 (valid) or 2 (test), in the order given.
    const std::vector<WeightedSplitGroupSummary>& groups(int split) const;
    // Sample n of group `group` of `split`: seq_length + 1 token ids.
    std::vector<std::int64_t> sample(int split, std::size_t group, std::int64_t n) const;
    // Where that sample comes from: the member dataset (index in the group, prefix), its sample
    // index and the document pieces (mds-sample-text).
    SampleOrigin origin(int split, std::size_t group, std::int64_t n) const;

private:
    struct Opened;
    struct Group;
    // The member serving sample n of the group and its index there (checks as sample()).
    std::pair<std::size_t, std::size_t> locate(int split, std::size_t group, std::int64_t n) const;
    std::vector<std::unique_ptr<Opened>> opened_;
    std::array<std::vector<std::unique_ptr<Group>>, 3> groups_;
    std::array<std::vector<WeightedSplitGroupSummary>, 3> summaries_;
    std::array<std::int64_t, 3> num_samples_{};
    std::int64_t train_iters_ = 0;
};

}  // namespace mds::data
