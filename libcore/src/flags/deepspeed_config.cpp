#include "mds/flags/deepspeed_config.h"

#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mds/flags/curriculum.h"  // find_curriculum_config_problem
#include "mds/util/error.h"
#include "mds/util/int_range.h"

namespace mds::flags {
namespace {

using nlohmann::json;

// Reads one section of the config, naming the file and the JSON path in every error and
// recording the keys it did not read.
class Section {
public:
    Section(const json& object, std::string source, std::string path, std::vector<std::string>& unknown)
        : object_(object), source_(std::move(source)), path_(std::move(path)), unknown_(unknown) {
        if (!object_.is_object()) fail("", std::string("expected an object, found ") + object_.type_name());
    }

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw Error(source_ + ": " + key_path(key) + ": " + what);
    }

    std::string key_path(const std::string& key) const {
        if (path_.empty()) return key.empty() ? "(top level)" : key;
        return key.empty() ? path_ : path_ + "." + key;
    }

    const json* find(const std::string& key) {
        read_.insert(key);
        auto it = object_.find(key);
        return it == object_.end() ? nullptr : &*it;
    }

    std::optional<std::int64_t> integer(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (v->is_number_integer()) return v->get<std::int64_t>();
        if (v->is_number_float())
            if (const auto i = exact_int64(v->get<double>())) return *i;
        fail(key, std::string("expected an integer, found ") + v->dump());
    }

    std::optional<double> number(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_number()) fail(key, std::string("expected a number, found ") + v->dump());
        return v->get<double>();
    }

    std::optional<bool> boolean(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_boolean()) fail(key, std::string("expected true or false, found ") + v->dump());
        return v->get<bool>();
    }

    std::optional<std::string> string(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_string()) fail(key, std::string("expected a string, found ") + v->dump());
        return v->get<std::string>();
    }

    std::optional<std::vector<std::int64_t>> integer_list(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_array()) fail(key, std::string("expected a list of integers, found ") + v->dump());
        std::vector<std::int64_t> out;
        for (const auto& item : *v) {
            if (!item.is_number_integer()) fail(key, std::string("expected a list of integers, found ") + v->dump());
            out.push_back(item.get<std::int64_t>());
        }
        return out;
    }

    std::optional<Section> section(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        return Section(*v, source_, key_path(key), unknown_);
    }

    // Lists the keys nobody asked for; call once the section has been read.
    void finish() const {
        for (auto it = object_.begin(); it != object_.end(); ++it)
            if (!read_.count(it.key())) unknown_.push_back(key_path(it.key()));
    }

private:
    const json& object_;
    std::string source_;
    std::string path_;
    std::vector<std::string>& unknown_;
    std::set<std::string> read_;
};

}  // namespace

DeepSpeedConfig parse_deepspeed_config(const json& root, const std::string& source) {
    DeepSpeedConfig config;
    config.source = source;
    Section top(root, source, "", config.unknown_keys);
    config.train_micro_batch_size_per_gpu = top.integer("train_micro_batch_size_per_gpu");
    config.train_batch_size = top.integer("train_batch_size");
    config.gradient_accumulation_steps = top.integer("gradient_accumulation_steps");
    config.gradient_clipping = top.number("gradient_clipping");
    if (auto zero = top.section("zero_optimization")) {
        config.zero_stage = zero->integer("stage");
        config.overlap_comm = zero->boolean("overlap_comm");
        config.reduce_bucket_size = zero->integer("reduce_bucket_size");
        if (config.reduce_bucket_size && *config.reduce_bucket_size < 1) zero->fail("reduce_bucket_size", "expected a positive number of elements");
        // ZeRO-Offload's optimizer half (mds-train's --cpu-optimizer); NVMe offload is not implemented.
        if (auto off = zero->section("offload_optimizer")) {
            config.offload_optimizer_device = off->string("device").value_or("none");
            if (*config.offload_optimizer_device != "none" && *config.offload_optimizer_device != "cpu")
                off->fail("device", "\"" + *config.offload_optimizer_device + "\" is not supported by mds-train (\"cpu\" or \"none\")");
            config.offload_optimizer_pin_memory = off->boolean("pin_memory");
            off->finish();
        }
        zero->finish();
    }
    if (auto fp16 = top.section("fp16")) {
        DeepSpeedFp16 f;
        f.enabled = fp16->boolean("enabled").value_or(false);
        f.loss_scale = fp16->number("loss_scale");
        f.loss_scale_window = fp16->integer("loss_scale_window");
        f.hysteresis = fp16->integer("hysteresis");
        f.min_loss_scale = fp16->number("min_loss_scale");
        f.initial_scale_power = fp16->integer("initial_scale_power");
        if (f.loss_scale && *f.loss_scale < 0) fp16->fail("loss_scale", "expected 0 (dynamic) or a positive scale");
        if (f.initial_scale_power && (*f.initial_scale_power < 0 || *f.initial_scale_power > 64))
            fp16->fail("initial_scale_power", "expected a power of two between 0 and 64");
        fp16->finish();
        config.fp16 = f;
    }
    if (auto bf16 = top.section("bf16")) {
        config.bf16_enabled = bf16->boolean("enabled").value_or(false);
        bf16->finish();
    }
    if (auto cl = top.section("curriculum_learning")) {
        CurriculumLearningConfig c;
        c.enabled = cl->boolean("enabled").value_or(false);
        c.curriculum_type = cl->string("curriculum_type").value_or("seqlen");
        if (c.curriculum_type != "seqlen")
            cl->fail("curriculum_type", "\"" + c.curriculum_type + "\" is not supported by mds-train (only \"seqlen\")");
        c.min_difficulty = cl->integer("min_difficulty").value_or(0);
        c.max_difficulty = cl->integer("max_difficulty").value_or(0);
        c.schedule_type = cl->string("schedule_type").value_or("fixed_linear");
        const bool discrete = c.schedule_type == "fixed_discrete";
        if (c.schedule_type != "fixed_linear" && c.schedule_type != "fixed_root" && !discrete)
            cl->fail("schedule_type", "\"" + c.schedule_type +
                                          "\" is not supported by mds-train (fixed_linear, fixed_root or fixed_discrete)");
        if (auto sc = cl->section("schedule_config")) {
            if (discrete) {
                c.difficulties = sc->integer_list("difficulty").value_or(std::vector<std::int64_t>{});
                c.max_steps = sc->integer_list("max_step").value_or(std::vector<std::int64_t>{});
            } else {
                c.total_curriculum_step = sc->integer("total_curriculum_step").value_or(0);
                c.difficulty_step = sc->integer("difficulty_step").value_or(0);
                if (c.schedule_type == "fixed_root") c.root_degree = sc->number("root_degree").value_or(0.0);
            }
            sc->finish();
        }
        // The rules of each schedule live with the scheduler (curriculum.h).
        if (c.enabled)
            if (auto problem = find_curriculum_config_problem(c)) cl->fail(problem->field, problem->what);
        cl->finish();
        config.curriculum_learning = c;
    }
    // DeepSpeed refuses offload with a client optimizer (Megatron's) unless this is false; mds has no
    // such distinction, so it is read and has no effect.
    config.zero_force_ds_cpu_optimizer = top.boolean("zero_force_ds_cpu_optimizer");
    config.steps_per_print = top.integer("steps_per_print").value_or(10);
    config.wall_clock_breakdown = top.boolean("wall_clock_breakdown").value_or(false);
    top.finish();
    return config;
}

DeepSpeedConfig parse_deepspeed_config(const std::string& text, const std::string& source) {
    json root;
    try {
        root = json::parse(text);
    } catch (const json::parse_error& e) {
        throw Error(source + ": not valid JSON: " + e.what());
    } catch (const json::exception& e) {  // e.g. out_of_range for a number beyond double, 1e400
        throw Error(source + ": not valid JSON: " + e.what());
    }
    return parse_deepspeed_config(root, source);
}

DeepSpeedConfig read_deepspeed_config(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(errno_message("reading DeepSpeed config " + path.string(), errno));
    std::ostringstream text;
    text << in.rdbuf();
    return parse_deepspeed_config(text.str(), path.string());
}

}  // namespace mds::flags
