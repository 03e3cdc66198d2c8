#include "mds/flags/flag_table.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "flag_rows.h"
#include "mds/util/error.h"

namespace mds::flags {

std::string format_number(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
}

namespace {

// Python's int()/float() accept "5_000_000": one underscore between digits. Strips them, or
// returns nullopt when an underscore is misplaced.
std::optional<std::string> strip_underscores(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        char c = text[i];
        if (c != '_') {
            out += c;
            continue;
        }
        bool digit_before = i > 0 && std::isdigit(static_cast<unsigned char>(text[i - 1]));
        bool digit_after = i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1]));
        if (!digit_before || !digit_after) return std::nullopt;
    }
    return out;
}

std::int64_t parse_int(const std::string& flag, const std::string& text) {
    auto clean = strip_underscores(text);
    if (clean && !clean->empty()) {
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(clean->c_str(), &end, 10);
        if (errno == 0 && *end == '\0') return static_cast<std::int64_t>(v);
    }
    throw CLI::ValidationError(flag, "expected an integer, found '" + text + "'");
}

double parse_float(const std::string& flag, const std::string& text) {
    auto clean = strip_underscores(text);
    if (clean && !clean->empty()) {
        char* end = nullptr;
        double v = std::strtod(clean->c_str(), &end);
        if (*end == '\0' && std::isfinite(v)) return v;
    }
    throw CLI::ValidationError(flag, "expected a number, found '" + text + "'");
}

// Declares a row on a CLI11 app in its help group, recording in `given` the flags that were given.
// argparse keeps the last of repeated flags (tr1-13B passes --clip-grad twice): so do options here.
class Declarer {
public:
    Declarer(CLI::App& app, TrainArgs& args) : app_(app), given_(args.flags_given), unread_(args.unread_values) {}

    void declare(const FlagRow& row, TrainArgs& args) {
        if (row.status == FlagStatus::Refused) return refused(row);
        const std::string flag = row.long_name();
        if (!row.slot) {
            if (row.status == FlagStatus::NoEffect) unread(row);
            return;
        }
        std::visit([&](auto dst) { declare_slot(row, flag, dst); }, row.slot(args));
    }

private:
    void declare_slot(const FlagRow&, const std::string&, std::monostate) {}
    void declare_slot(const FlagRow& row, const std::string& flag, std::int64_t* dst) {
        add(row, [dst, flag](const std::string& s) { *dst = parse_int(flag, s); },
            row.help + " [default: " + std::to_string(*dst) + "]");
    }
    void declare_slot(const FlagRow& row, const std::string& flag, std::optional<std::int64_t>* dst) {
        add(row, [dst, flag](const std::string& s) { *dst = parse_int(flag, s); }, row.help);
    }
    void declare_slot(const FlagRow& row, const std::string& flag, double* dst) {
        add(row, [dst, flag](const std::string& s) { *dst = parse_float(flag, s); },
            row.help + " [default: " + format_number(*dst) + "]");
    }
    void declare_slot(const FlagRow& row, const std::string& flag, std::optional<double>* dst) {
        add(row, [dst, flag](const std::string& s) { *dst = parse_float(flag, s); }, row.help);
    }
    void declare_slot(const FlagRow& row, const std::string&, std::string* dst) {
        add(row, [dst](const std::string& s) { *dst = s; }, row.help);
    }
    void declare_slot(const FlagRow& row, const std::string&, std::optional<std::string>* dst) {
        add(row, [dst](const std::string& s) { *dst = s; }, row.help);
    }
    // A store_true flag (store_false with row.store = false).
    void declare_slot(const FlagRow& row, const std::string& flag, bool* dst) {
        auto& given = given_;
        const bool value = row.store;
        app_.add_flag_function(row.names, [dst, &given, flag, value](std::int64_t) {
                *dst = value;
                given.insert(flag);
            }, row.help)->group(row.group);
    }
    void declare_slot(const FlagRow& row, const std::string& flag, std::vector<std::string>* dst) {
        auto& given = given_;
        app_.add_option_function<std::vector<std::string>>(row.names, [dst, &given, flag](const std::vector<std::string>& v) {
                *dst = v;
                given.insert(flag);
            }, row.help)->group(row.group)->expected(1, -1);
    }
    // --rampup-batch-size START INCREMENT SAMPLES.
    void declare_slot(const FlagRow& row, const std::string& flag, std::optional<optim::RampupBatchSize>* dst) {
        auto& given = given_;
        app_.add_option_function<std::vector<std::string>>(row.names, [dst, &given, flag](const std::vector<std::string>& v) {
                optim::RampupBatchSize r;
                r.start_global_batch_size = parse_int(flag, v.at(0));
                r.batch_size_increment = parse_int(flag, v.at(1));
                r.ramp_up_samples = parse_int(flag, v.at(2));
                *dst = r;
                given.insert(flag);
            }, row.help)->expected(3)->group(row.group);
    }

    // --save-interval: Megatron's integer or a schedule (mds/flags/save_schedule.h).
    void declare_slot(const FlagRow& row, const std::string& flag, std::optional<SaveSchedule>* dst) {
        add(row, [dst, flag](const std::string& s) {
                try {
                    *dst = parse_save_schedule(s, flag);
                } catch (const UsageError& e) {
                    throw CLI::ValidationError(e.what());
                }
            }, row.help);
    }

    void add(const FlagRow& row, std::function<void(const std::string&)> set, const std::string& help) {
        const std::string flag = row.long_name();
        auto& given = given_;
        auto* opt = app_.add_option_function<std::string>(row.names, [set, &given, flag](const std::string& s) {
                set(s);
                given.insert(flag);
            }, help)->group(row.group)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        if (!row.choices.empty()) opt->check(CLI::IsMember(row.choices));
    }

    // A flag mds accepts and does not read (no slot): checked as argparse would (type, choices, one
    // value or several), its value kept only for the checkpoint's Namespace.
    void unread(const FlagRow& row) {
        const std::string flag = row.long_name();
        auto& given = given_;
        auto& unread = unread_;
        if (!row.takes_value) {
            app_.add_flag_function(row.names, [&given, &unread, flag](std::int64_t) {
                    given.insert(flag);
                    unread[flag] = {};
                }, row.help)->group(row.group);
            return;
        }
        const ArgType type = row.type;
        auto* opt = app_.add_option_function<std::vector<std::string>>(row.names,
            [&given, &unread, flag, type](const std::vector<std::string>& values) {
                for (const auto& v : values) {
                    if (type == ArgType::Int) (void)parse_int(flag, v);
                    if (type == ArgType::Float) (void)parse_float(flag, v);
                }
                given.insert(flag);
                unread[flag] = values;
            }, row.help)->group(row.group);
        if (row.many) opt->expected(1, -1);
        else opt->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        if (!row.choices.empty()) opt->check(CLI::IsMember(row.choices));
    }

    // A Megatron flag mds does not implement: giving it fails the parse with the row's reason.
    void refused(const FlagRow& row) {
        const std::string name = row.long_name();
        const std::string message = "not supported by mds-train: " + row.why;
        auto fail = [name, message]() { throw CLI::ValidationError(name, message); };
        const std::string help = "Megatron flag not supported by mds-train";
        if (row.takes_value)
            app_.add_option_function<std::vector<std::string>>(name, [fail](const std::vector<std::string>&) { fail(); }, help)
                ->expected(1, -1)->group(row.group);
        else
            app_.add_flag_function(name, [fail](std::int64_t) { fail(); }, help)->group(row.group);
    }

    CLI::App& app_;
    std::set<std::string>& given_;
    std::map<std::string, std::vector<std::string>>& unread_;
};

// A value of an unread NoEffect flag as BMD's parser converts it (the value was checked when parsed).
ckpt::PyValue typed_value(ArgType type, const std::string& text) {
    auto clean = strip_underscores(text).value_or(text);
    if (type == ArgType::Int) return ckpt::PyValue::integer(std::strtoll(clean.c_str(), nullptr, 10));
    if (type == ArgType::Float) return ckpt::PyValue::floating(std::strtod(clean.c_str(), nullptr));
    return ckpt::PyValue::str(text);
}

template <class... F>
struct Overloaded : F... {
    using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

const std::vector<FlagRow>& flag_table() {
    static const std::vector<FlagRow> table = megatron_flag_rows();
    return table;
}

const FlagRow* find_flag(std::string_view name) {
    for (const auto& row : flag_table()) {
        std::string_view names = row.names;
        while (!names.empty()) {
            const auto comma = names.find(',');
            if (names.substr(0, comma) == name) return &row;
            names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
        }
    }
    return nullptr;
}

const FlagRow* find_namespace_key(std::string_view key) {
    for (const auto& row : flag_table())
        if (!row.key.empty() && row.key == key) return &row;
    return nullptr;
}

void add_table_flags(CLI::App& app, TrainArgs& args, unsigned tool) {
    Declarer d(app, args);
    for (const auto& row : flag_table())
        if (row.status != FlagStatus::Undeclared && (row.tools & tool) != 0) d.declare(row, args);
}

ckpt::PyValue python_literal(std::string_view s) {
    using ckpt::PyValue;
    if (s == "None") return PyValue::none();
    if (s == "True" || s == "False") return PyValue::boolean(s == "True");
    if (s == "[]") return PyValue::list();
    if (s.size() >= 2 && s.front() == '\'' && s.back() == '\'') return PyValue::str(std::string(s.substr(1, s.size() - 2)));
    const std::string text(s);
    char* end = nullptr;
    if (text.find_first_of(".eE") == std::string::npos) {
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (!text.empty() && errno == 0 && *end == '\0') return PyValue::integer(v);
    } else {
        const double v = std::strtod(text.c_str(), &end);
        if (!text.empty() && *end == '\0') return PyValue::floating(v);
    }
    throw Error("flag table: not a Python literal the table writes: " + text);
}

ckpt::PyValue namespace_value(const FlagRow& row, const TrainArgs& args) {
    using ckpt::PyValue;
    if (!row.slot && row.status == FlagStatus::NoEffect && row.py == PyForm::Natural) {
        // What BMD's Namespace holds when the flag was given: the switch's value, or the values typed.
        const auto it = args.unread_values.find(row.long_name());
        if (it != args.unread_values.end()) {
            if (!row.takes_value) return PyValue::boolean(row.store);
            std::vector<PyValue> items;
            for (const auto& v : it->second) items.push_back(typed_value(row.type, v));
            if (row.many) return PyValue::list(std::move(items));
            if (!items.empty()) return items.back();
        }
    }
    if (row.py == PyForm::Fixed || !row.slot) return python_literal(row.bmd_value);
    if (row.py == PyForm::BoolOfStr) {
        const FlagSlot slot = row.slot(const_cast<TrainArgs&>(args));
        const auto* v = std::get<std::optional<std::string>*>(slot);
        return *v ? PyValue::boolean(!(*v)->empty()) : PyValue::none();
    }
    if (row.py == PyForm::Derived) throw Error("flag table: " + row.key + " is derived by the Namespace writer");
    const auto text = [&](const std::string& s) {
        return row.py == PyForm::Str || !s.empty() ? PyValue::str(s) : PyValue::none();
    };
    // The slot function takes TrainArgs& to serve the parser too; here it is only read.
    const FlagSlot slot = row.slot(const_cast<TrainArgs&>(args));
    return std::visit(Overloaded{
        [](std::monostate) { return PyValue::none(); },
        [](std::int64_t* v) { return PyValue::integer(*v); },
        [](std::optional<std::int64_t>* v) { return *v ? PyValue::integer(**v) : PyValue::none(); },
        [](double* v) { return PyValue::floating(*v); },
        [](std::optional<double>* v) { return *v ? PyValue::floating(**v) : PyValue::none(); },
        [&](std::string* v) { return text(*v); },
        [&](std::optional<std::string>* v) { return *v ? text(**v) : PyValue::none(); },
        [&](bool* v) { return row.py == PyForm::TrueOrNone && !*v ? PyValue::none() : PyValue::boolean(*v); },
        [](std::vector<std::string>* v) {
            if (v->empty()) return PyValue::none();
            std::vector<PyValue> items;
            for (const auto& s : *v) items.push_back(PyValue::str(s));
            return PyValue::list(std::move(items));
        },
        [&](std::optional<optim::RampupBatchSize>*) -> PyValue {
            throw Error("flag table: " + row.key + " is derived by the Namespace writer");
        },
        // A schedule's interval depends on the iteration: the Namespace writer writes the one in
        // effect at the save; here, an integer --save-interval as BMD keeps it (int or None).
        [&](std::optional<SaveSchedule>* v) -> PyValue {
            if (!*v) return PyValue::none();
            if ((*v)->ranges().empty()) return PyValue::integer(*(*v)->default_interval());
            throw Error("flag table: " + row.key + " " + (*v)->to_string() + " is a schedule: its value depends on the iteration");
        },
    }, slot);
}

namespace {

std::string markdown_cell(std::string s) {
    std::string out;
    for (char c : s) {
        if (c == '\n') out += ' ';
        else if (c == '|') out += "\\|";
        else out += c;
    }
    return out;
}

std::string option_meaning(const CLI::Option& opt, const std::vector<std::pair<std::string, std::string>>& extra_docs) {
    const std::string long_name = opt.get_lnames().empty() ? "" : "--" + opt.get_lnames().front();
    const FlagRow* row = long_name.empty() ? nullptr : find_flag(long_name);
    std::string meaning = opt.get_description();
    if (row && row->status == FlagStatus::Refused) meaning = "not supported: " + row->why;
    if (row && row->status == FlagStatus::NoEffect && !row->why.empty()) meaning += ": " + row->why;
    if (row && !row->doc.empty()) meaning += " " + row->doc;
    for (const auto& [flag, doc] : extra_docs)
        if (flag == long_name) meaning += " " + doc;
    if (!opt.get_default_str().empty()) meaning += " [default: " + opt.get_default_str() + "]";
    return markdown_cell(meaning);
}

}  // namespace

std::string flags_markdown(const CLI::App& app, const std::vector<std::pair<std::string, std::string>>& extra_docs) {
    std::vector<std::string> groups;
    const auto options = app.get_options();
    for (const CLI::Option* opt : options)
        if (!opt->get_group().empty() && std::find(groups.begin(), groups.end(), opt->get_group()) == groups.end())
            groups.push_back(opt->get_group());
    std::string out;
    for (const auto& group : groups) {
        out += (out.empty() ? "" : "\n") + std::string("### ") + group + "\n\n| flag | meaning |\n| --- | --- |\n";
        for (const CLI::Option* opt : options) {
            if (opt->get_group() != group) continue;
            std::string names;
            for (const auto& s : opt->get_snames()) names += (names.empty() ? "`-" : " `-") + s + "`";
            for (const auto& l : opt->get_lnames()) names += (names.empty() ? "`--" : " `--") + l + "`";
            out += "| " + names + " | " + option_meaning(*opt, extra_docs) + " |\n";
        }
    }
    return out;
}

}  // namespace mds::flags
