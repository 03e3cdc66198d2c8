// Python values for the checkpoint writers: short constructors over ckpt::PyValue (private to the
// trainer area).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mds/ckpt/pickle.h"

namespace mds::trainer::py {
using ckpt::PyValue;

inline PyValue str(std::string s) { return PyValue::str(std::move(s)); }
inline PyValue integer(std::int64_t v) { return PyValue::integer(v); }
inline PyValue floating(double v) { return PyValue::floating(v); }

inline PyValue ordered_dict() { return PyValue::object("collections", "OrderedDict", PyValue::tuple({})); }
inline void od_set(const PyValue& od, const std::string& key, PyValue value) { od.as_object().dict_items.set(key, std::move(value)); }

// An instance rebuilt as pickle protocol 2 writes plain classes: cls.__new__(cls), then BUILD with
// its __dict__ (argparse.Namespace, DeepSpeed's loss scalers and fragment_address dataclass).
inline PyValue instance(const std::string& module, const std::string& name, PyValue attributes) {
    auto o = PyValue::object(module, name, PyValue::tuple({}), /*newobj=*/true);
    o.as_object().has_state = true;
    o.as_object().state = std::move(attributes);
    return o;
}

inline PyValue torch_size(const std::vector<std::int64_t>& shape) {
    std::vector<PyValue> dims;
    for (auto d : shape) dims.push_back(integer(d));
    return PyValue::object("torch", "Size", PyValue::tuple({PyValue::tuple(std::move(dims))}));
}

// JSON as json.load gives it to Python: objects keep their keys' order (ordered_json), as a dict does.
inline PyValue from_json(const nlohmann::ordered_json& j) {
    switch (j.type()) {
    case nlohmann::json::value_t::null: return PyValue::none();
    case nlohmann::json::value_t::boolean: return PyValue::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return integer(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return integer(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case nlohmann::json::value_t::number_float: return floating(j.get<double>());
    case nlohmann::json::value_t::string: return str(j.get<std::string>());
    case nlohmann::json::value_t::array: {
        std::vector<PyValue> items;
        for (const auto& e : j) items.push_back(from_json(e));
        return PyValue::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
        auto d = PyValue::dict();
        for (const auto& [k, v] : j.items()) d.as_dict().set(k, from_json(v));
        return d;
    }
    default: return PyValue::none();
    }
}
inline PyValue optional_int(const std::optional<std::int64_t>& v) { return v ? integer(*v) : PyValue::none(); }
inline PyValue optional_str(const std::optional<std::string>& v) { return v ? str(*v) : PyValue::none(); }
inline PyValue boolean(bool v) { return PyValue::boolean(v); }
inline PyValue optional_float(const std::optional<double>& v) { return v ? floating(*v) : PyValue::none(); }
inline PyValue text_or_none(const std::string& s) { return s.empty() ? PyValue::none() : str(s); }
inline PyValue true_or_none(bool v) { return v ? boolean(true) : PyValue::none(); }  // store_true with default=None
inline PyValue text_list(const std::vector<std::string>& v) {
    std::vector<PyValue> items;
    for (const auto& s : v) items.push_back(str(s));
    return PyValue::list(std::move(items));
}

}  // namespace mds::trainer::py
