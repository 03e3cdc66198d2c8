// The flag table (mds/flags/flag_table.h): one row per flag, from which mds-train's parser, the
// checkpoint's args Namespace, the "not supported" list and the docs' flag tables come.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "mds/flags/flag_table.h"
#include "mds/util/error.h"

using namespace mds::flags;
using mds::ckpt::PyValue;

namespace {

TrainArgs parse(std::vector<std::string> argv) {
    TrainArgs args;
    CLI::App app("mds-train");
    add_train_flags(app, args);
    argv.insert(argv.begin(), "mds-train");
    std::vector<char*> ptrs;
    for (auto& a : argv) ptrs.push_back(a.data());
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
    return args;
}

const std::vector<std::string> kModel{"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                      "--seq-length", "64", "--max-position-embeddings", "64", "--lr", "1e-3",
                                      "--train-iters", "10"};

std::vector<std::string> model_and(std::vector<std::string> more) {
    auto argv = kModel;
    argv.insert(argv.end(), more.begin(), more.end());
    return argv;
}

std::string repr_of(const FlagRow& row, const TrainArgs& args) { return namespace_value(row, args).repr(); }

}  // namespace

TEST_CASE("flag table: names and Namespace keys are unique; every row says what mds does with it") {
    std::set<std::string> names, keys;
    for (const auto& row : flag_table()) {
        CAPTURE(row.names);
        CHECK(names.insert(row.long_name()).second);
        if (!row.key.empty()) CHECK(keys.insert(row.key).second);
        const bool has_slot = row.slot != nullptr;
        switch (row.status) {
        case FlagStatus::Supported: CHECK(has_slot); break;
        case FlagStatus::NoEffect:
            CHECK(has_slot);
            CHECK(row.help.find("no effect in mds") != std::string::npos);
            break;
        case FlagStatus::Refused: CHECK(!row.why.empty()); break;
        case FlagStatus::Undeclared: CHECK(!has_slot); break;
        }
        // The Namespace writes a Fixed row's value as the table spells it: it must read as Python.
        if (row.py == PyForm::Fixed || (!row.slot && row.py != PyForm::Derived)) CHECK_NOTHROW(python_literal(row.bmd_value));
    }
    CHECK(find_flag("--partition-method") == find_flag("--pp-partition-method"));
    CHECK(find_flag("--no-such-flag") == nullptr);
    CHECK(find_namespace_key("seq_length") == find_flag("--seq-length"));
    CHECK(find_namespace_key("bert_binary_head")->status == FlagStatus::Undeclared);
}

TEST_CASE("flag table: Python literals") {
    CHECK(python_literal("None").is_none());
    CHECK(python_literal("True").as_bool());
    CHECK(python_literal("128").as_int() == 128);
    CHECK(python_literal("0.0").type() == mds::ckpt::PyType::Float);
    CHECK(python_literal("1e-05").as_float() == doctest::Approx(1e-5));
    CHECK(python_literal("'single'").as_str() == "single");
    CHECK(python_literal("[]").as_list().empty());
    CHECK_THROWS_AS(python_literal("2 ** 32"), mds::Error);
}

TEST_CASE("flag table: a flag's value in the checkpoint's args Namespace") {
    const TrainArgs defaults = parse(kModel);
    const TrainArgs given = parse(model_and({"--no-save-optim", "--save", "/c", "--save-interval", "5", "--data-path",
                                             "0.5", "/a", "0.5", "/b", "--log-level", "info"}));
    // store_true with default=None: True or None.
    CHECK(repr_of(*find_flag("--no-save-optim"), defaults) == "None");
    CHECK(repr_of(*find_flag("--no-save-optim"), given) == "True");
    // A string flag: None when not given; a flag with a default: always a str.
    CHECK(repr_of(*find_flag("--save"), defaults) == "None");
    CHECK(repr_of(*find_flag("--save"), given) == "'/c'");
    CHECK(repr_of(*find_flag("--optimizer"), defaults) == "'adam'");
    CHECK(repr_of(*find_flag("--log-level"), defaults) == "None");
    CHECK(repr_of(*find_flag("--log-level"), given) == "'info'");
    CHECK(repr_of(*find_flag("--data-path"), given) == "['0.5', '/a', '0.5', '/b']");
    CHECK(repr_of(*find_flag("--save-interval"), given) == "5");
    CHECK(repr_of(*find_flag("--lr"), defaults) == "0.001");
    // A refused flag and a BMD flag mds does not declare: BMD's value.
    CHECK(repr_of(*find_flag("--dataloader-type"), defaults) == "'single'");
    CHECK(repr_of(*find_flag("--zero-reduce-bucket-size"), defaults) == "0.0");
    CHECK(repr_of(*find_namespace_key("bert_binary_head"), defaults) == "True");
    // Derived attributes belong to the Namespace writer.
    CHECK_THROWS_AS(namespace_value(*find_flag("--ffn-hidden-size"), defaults), mds::Error);
}

TEST_CASE("flag table: --optimizer sgd and rotary positions fail in validate, naming the flag") {
    auto sgd = parse(model_and({"--optimizer", "sgd"}));
    CHECK_THROWS_WITH_AS(validate(sgd), doctest::Contains("--optimizer sgd"), mds::UsageError);
    auto rotary = parse(model_and({"--position-embedding-type", "rotary"}));
    CHECK_THROWS_WITH_AS(validate(rotary), doctest::Contains("--position-embedding-type rotary"), mds::UsageError);
    auto alibi = parse(model_and({"--position-embedding-type", "alibi"}));
    CHECK_NOTHROW(validate(alibi));
    // Accepted for compatibility: parsed, no error.
    auto workers = parse(model_and({"--num-workers", "8", "--sgd-momentum", "0.5", "--tensorboard-queue-size", "5"}));
    CHECK_NOTHROW(validate(workers));
    CHECK(workers.data.num_workers == 8);
}

TEST_CASE("flag table: another tool declares only the rows it takes") {
    TrainArgs args;
    CLI::App app("mds-sample-index");
    add_table_flags(app, args, kToolSampleIndex);
    CHECK(app.get_option_no_throw("--seq-length") != nullptr);
    CHECK(app.get_option_no_throw("--rampup-batch-size") != nullptr);
    CHECK(app.get_option_no_throw("--num-layers") == nullptr);
    CHECK(app.get_option_no_throw("--glu-activation") == nullptr);
}

TEST_CASE("flag table: the docs' markdown tables") {
    TrainArgs args;
    CLI::App app("mds-train");
    add_train_flags(app, args);
    app.add_flag("--hidden-flag")->group("");
    const std::string md = flags_markdown(app, {{"--seq-length", "(more words)"}});
    CHECK(md.find("### Model\n\n| flag | meaning |\n| --- | --- |\n") != std::string::npos);
    CHECK(md.find("| `-h` `--help` | Print this help message and exit |") != std::string::npos);
    CHECK(md.find("| `--num-layers` | Number of transformer layers (required) [default: 0] |") != std::string::npos);
    CHECK(md.find("| `--seq-length` | Tokens per training sample (required) [default: 0] (more words) |") != std::string::npos);
    CHECK(md.find("| `--pp-partition-method` `--partition-method` |") != std::string::npos);
    CHECK(md.find("| `--openai-gelu` | not supported: only the tanh-approximated GeLU is implemented |") != std::string::npos);
    CHECK(md.find("type:transformer\\|embedding") != std::string::npos);  // a | in a cell is escaped
    CHECK(md.find("--hidden-flag") == std::string::npos);
    CHECK(md.find("bert") == std::string::npos);  // undeclared rows are not flags of mds-train
}

TEST_CASE("flag table: every add_argument of BigScience's megatron/arguments.py has a row") {
    // Issue 18's check, as far as the table goes: each BMD flag is a row (taken, without effect,
    // refused with a reason, or not declared yet); taking or refusing one is then a row edit.
    const auto path = std::filesystem::path(__FILE__).parent_path() /
                      "../../../../shared/third_party/bigscience-megatron-deepspeed/megatron/arguments.py";
    std::ifstream in(path);
    if (!in) {
        MESSAGE("skipped: no " << path.string());
        return;
    }
    std::stringstream text;
    text << in.rdbuf();
    const std::string src = text.str();
    // Every `add_argument(  '-...'` (or "-..."): the flag's first name. (A scan, not std::regex: GCC 12's <regex>
    // trips -Wmaybe-uninitialized under the sanitizers.)
    int flags = 0, undeclared = 0;
    const std::string call = "add_argument(";
    for (auto at = src.find(call); at != std::string::npos; at = src.find(call, at + 1)) {
        auto q = src.find_first_not_of(" \t\r\n", at + call.size());
        if (q == std::string::npos || (src[q] != '\'' && src[q] != '"') || q + 1 >= src.size() || src[q + 1] != '-') continue;
        const auto end = src.find_first_of("'\"", q + 1);
        if (end == std::string::npos) break;
        const std::string flag = src.substr(q + 1, end - q - 1);
        CAPTURE(flag);
        const FlagRow* row = find_flag(flag);
        CHECK(row != nullptr);
        ++flags;
        if (row && row->status == FlagStatus::Undeclared) ++undeclared;
    }
    CHECK(flags > 180);
    MESSAGE(flags << " BMD flags, " << undeclared << " not declared by mds-train yet");
}
