// The one table of mds-train's flags: every flag of BigScience's Megatron-DeepSpeed
// (megatron/arguments.py) that ends up in its args Namespace, and the flags mds adds to them. A row
// holds the flag's names, help, group, where TrainArgs keeps it, the tools that take it, the key
// and Python value it has in the checkpoint's `args` Namespace, and its status: supported,
// accepted with no effect on mds's numbers, refused with the reason, or not declared yet.
// From it come mds-train's CLI11 parser (add_train_flags), the checkpoint's Namespace
// (trainer/megatron_args.cpp), the "not supported" list and docs/mds-train.md's flag tables.
// Taking one more BMD flag, or refusing it by name, is a row edit (issue 18).
#pragma once

#include <CLI/CLI.hpp>  // CLI::App

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "mds/ckpt/pickle.h"  // PyValue
#include "mds/flags/train_args.h"

namespace mds::flags {

enum class FlagStatus {
    Supported,   // read by mds with Megatron's meaning
    NoEffect,    // accepted so BigScience's scripts run; no effect on what mds computes (`why` says why; the
                 // help says so). A row without a slot keeps the given value only for the checkpoint's Namespace.
    Refused,     // declared; giving it fails the parse with "--flag: not supported by mds-train: <why>"
    Undeclared,  // a BMD flag mds-train does not declare yet: unknown to its parser; only its Namespace key is written
};

// The tools that take a flag (a bit mask).
enum FlagTool : unsigned {
    kToolTrain = 1u << 0,
    kToolSampleIndex = 1u << 1,
    kToolPreprocess = 1u << 2,
    kToolCkptToHf = 1u << 3,
};

// Where TrainArgs keeps a flag's value; monostate for a flag mds does not keep.
using FlagSlot = std::variant<std::monostate, std::int64_t*, std::optional<std::int64_t>*, double*, std::optional<double>*,
                              std::string*, std::optional<std::string>*, bool*, std::vector<std::string>*,
                              std::optional<optim::RampupBatchSize>*, std::optional<SaveSchedule>*>;

// How a row's Python value in the checkpoint's args Namespace is made.
enum class PyForm {
    Natural,     // int, float, bool as kept; an unset optional, an empty string or list: None
    Str,         // always a str (a flag with a default: 'adam', 'linear', 'nccl', 'infer')
    TrueOrNone,  // store_true with BMD's default=None (--no-save-optim ...): True or None
    Derived,     // written by megatron_args from values parse_args derives (ffn_hidden_size = 4h, ...)
    Fixed,       // always `bmd_value`, whatever is given (a refused flag, a -path flag BMD never stores)
    BoolOfStr,   // argparse's type=bool (--eval-only VALUE): None when not given, else Python's bool(VALUE)
};

// The type argparse converts a value to (type=int, float or str), for a NoEffect row without a slot:
// the value is checked as BMD's parser would and written to the checkpoint's Namespace so typed.
enum class ArgType { Str, Int, Float };

struct FlagRow {
    // CLI11 names, the Megatron spelling first: "--pp-partition-method,--partition-method".
    std::string names{};
    std::string group{};                     // help group and docs section
    std::string help{};                      // --help text; "[default: N]" is added for plain numbers
    FlagStatus status = FlagStatus::Supported;
    std::string why{};                       // Refused: why mds refuses it; NoEffect: why mds's numbers do not depend on it
    std::string key{};                       // its attribute in the checkpoint's args Namespace ("": none)
    // The attribute's Python value under BMD when the flag is not given (Python source: None, 'single').
    std::string bmd_value{};
    PyForm py = PyForm::Natural;
    FlagSlot (*slot)(TrainArgs&) = nullptr;  // nullptr: mds keeps no value
    bool store = true;                       // a flag (no value): the bool it stores (false: store_false)
    bool takes_value = true;                 // without a slot: whether the flag takes values
    std::vector<std::string> choices{};      // the values allowed ({}: any)
    unsigned tools = kToolTrain;
    std::string doc{};                       // docs/mds-train.md: what the help has no room for
    // A NoEffect row without a slot: its value's type and whether it takes several (nargs='+').
    ArgType type = ArgType::Str;
    bool many = false;

    std::string long_name() const { return names.substr(0, names.find(',')); }
};

// Every row, in mds-train's help order (Undeclared ones last).
const std::vector<FlagRow>& flag_table();
// The row of a long flag name ("--seq-length", any alias) or of a Namespace key; nullptr when none.
const FlagRow* find_flag(std::string_view name);
const FlagRow* find_namespace_key(std::string_view key);

// Declares the rows that `tool` takes on `app`, writing into `args` (see add_train_flags).
void add_table_flags(CLI::App& app, TrainArgs& args, unsigned tool);

// A row's Python value in the checkpoint's args Namespace (not for PyForm::Derived rows).
ckpt::PyValue namespace_value(const FlagRow& row, const TrainArgs& args);
// A Python literal as the table writes them: None, True, False, ints, floats, 'str', [].
ckpt::PyValue python_literal(std::string_view source);

// docs/mds-train.md's flag tables: one "### group" section per help group of `app`, in order, each
// a markdown table of its options (names, help, and the table's `doc` where a row has one).
// `extra_docs` adds text to flags outside the table ({"--pue", "1 to 10"}).
std::string flags_markdown(const CLI::App& app, const std::vector<std::pair<std::string, std::string>>& extra_docs = {});

}  // namespace mds::flags
