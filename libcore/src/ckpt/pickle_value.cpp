// PyValue and PyDict (ckpt/pickle.h): constructors, checked accessors, Python-like repr, dicts in
// insertion order with Python's key equality, and structural equality.
#include <bit>
#include <cmath>
#include <functional>
#include <unordered_set>

#include "mds/util/error.h"
#include "mds/util/text.h"  // python_float_repr
#include "pickle_internal.h"

namespace mds::ckpt {

using namespace pickle_detail;

namespace {

void append_escaped(std::string& out, std::string_view s, char quote) {
    static const char* hex = "0123456789abcdef";
    for (char c : s) {
        const auto u = static_cast<std::uint8_t>(c);
        if (c == quote || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (u < 0x20 || u == 0x7f) {
            out += "\\x";
            out += hex[u >> 4];
            out += hex[u & 15];
        } else {
            out += c;
        }
    }
}

// The key under which PyDict indexes a value-compared key; false for keys compared by identity.
// (Built by appending: GCC 12 at -O3 reports false -Wrestrict warnings for assignments of literals
// and for "i" + std::to_string(...) here.)
bool dict_hash_key(const PyValue& k, std::string& out) {
    out.clear();
    switch (k.type()) {
        case PyType::None: out += 'n'; return true;
        case PyType::Bool: out += k.as_bool() ? "i1" : "i0"; return true;
        case PyType::Int:
            if (k.int_fits_int64()) {
                out += 'i';
                out += std::to_string(k.as_int());
            } else {
                const auto b = k.int_bytes();
                out += 'I';
                out.append(b.begin(), b.end());
            }
            return true;
        case PyType::Float: {
            const double d = k.as_float();
            if (d == std::trunc(d) && std::fabs(d) < 9.2e18) {
                out += 'i';
                out += std::to_string(static_cast<std::int64_t>(d));
            } else {
                out += 'f';
                out += std::to_string(std::bit_cast<std::uint64_t>(d));
            }
            return true;
        }
        case PyType::Str: out += 's'; out += k.as_str(); return true;
        case PyType::Bytes: out += 'b'; out += k.as_bytes(); return true;
        case PyType::Global: out += 'g'; out += k.as_global().module; out += '\n'; out += k.as_global().name; return true;
        default: return false;
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// PyValue

const char* py_type_name(PyType t) {
    switch (t) {
        case PyType::None: return "NoneType";
        case PyType::Bool: return "bool";
        case PyType::Int: return "int";
        case PyType::Float: return "float";
        case PyType::Str: return "str";
        case PyType::Bytes: return "bytes";
        case PyType::Tuple: return "tuple";
        case PyType::List: return "list";
        case PyType::Dict: return "dict";
        case PyType::Object: return "object";
        case PyType::Global: return "global";
        case PyType::PersistentId: return "persistent id";
    }
    return "?";
}

PyValue PyValue::boolean(bool b) {
    PyValue v;
    v.type_ = PyType::Bool;
    v.bool_ = b;
    return v;
}

PyValue PyValue::integer(std::int64_t i) {
    PyValue v;
    v.type_ = PyType::Int;
    v.int_ = i;
    return v;
}

PyValue PyValue::big_integer(std::span<const std::uint8_t> le) {
    Bytes b(le.begin(), le.end());
    trim_twos_complement(b);
    if (b.size() <= 8) {
        std::uint64_t u = is_negative(b) ? ~std::uint64_t{0} : 0;
        for (std::size_t i = 0; i < b.size(); ++i) {
            u &= ~(std::uint64_t{0xff} << (8 * i));
            u |= std::uint64_t{b[i]} << (8 * i);
        }
        return integer(static_cast<std::int64_t>(u));
    }
    PyValue v;
    v.type_ = PyType::Int;
    v.node_ = std::make_shared<Bytes>(std::move(b));
    return v;
}

PyValue PyValue::floating(double d) {
    PyValue v;
    v.type_ = PyType::Float;
    v.float_ = d;
    return v;
}

PyValue PyValue::str(std::string s) {
    PyValue v;
    v.type_ = PyType::Str;
    v.node_ = std::make_shared<std::string>(std::move(s));
    return v;
}

PyValue PyValue::bytes(std::string s) {
    PyValue v;
    v.type_ = PyType::Bytes;
    v.node_ = std::make_shared<std::string>(std::move(s));
    return v;
}

PyValue PyValue::tuple(std::vector<PyValue> items) {
    PyValue v;
    v.type_ = PyType::Tuple;
    v.node_ = std::make_shared<std::vector<PyValue>>(std::move(items));
    return v;
}

PyValue PyValue::list(std::vector<PyValue> items) {
    PyValue v;
    v.type_ = PyType::List;
    v.node_ = std::make_shared<std::vector<PyValue>>(std::move(items));
    return v;
}

PyValue PyValue::dict() {
    PyValue v;
    v.type_ = PyType::Dict;
    v.node_ = std::make_shared<PyDict>();
    return v;
}

PyValue PyValue::global(std::string module, std::string name) {
    PyValue v;
    v.type_ = PyType::Global;
    v.node_ = std::make_shared<PyGlobal>(normalize_global(std::move(module), std::move(name)));
    return v;
}

PyValue PyValue::object(std::string module, std::string name, PyValue args, bool newobj) {
    PyValue v;
    v.type_ = PyType::Object;
    auto o = std::make_shared<PyObject>();
    o->cls = normalize_global(std::move(module), std::move(name));
    o->args = args.is_none() ? PyValue::tuple({}) : std::move(args);
    o->newobj = newobj;
    v.node_ = std::move(o);
    return v;
}

PyValue PyValue::persistent_id(PyValue pid) {
    PyValue v;
    v.type_ = PyType::PersistentId;
    v.node_ = std::make_shared<PidNode>(PidNode{std::move(pid)});
    return v;
}

bool PyValue::is_global(std::string_view module, std::string_view name) const {
    return type_ == PyType::Global && as_global().module == module && as_global().name == name;
}

bool PyValue::is_object(std::string_view module, std::string_view name) const {
    return type_ == PyType::Object && as_object().cls.module == module && as_object().cls.name == name;
}

namespace {
[[noreturn]] void type_error(const PyValue& v, const char* expected) {
    throw Error(std::string("pickle value: expected ") + expected + ", got " + py_type_name(v.type()) + " " + v.repr(80));
}
}  // namespace

bool PyValue::as_bool() const {
    if (type_ != PyType::Bool) type_error(*this, "bool");
    return bool_;
}

std::int64_t PyValue::as_int() const {
    if (type_ != PyType::Int) type_error(*this, "int");
    if (node_) throw Error("pickle value: int " + int_decimal() + " does not fit in 64 bits");
    return int_;
}

bool PyValue::int_fits_int64() const {
    if (type_ != PyType::Int) type_error(*this, "int");
    return !node_;
}

std::vector<std::uint8_t> PyValue::int_bytes() const {
    if (type_ != PyType::Int) type_error(*this, "int");
    return node_ ? Access::get<Bytes>(*this) : int64_bytes(int_);
}

std::string PyValue::int_decimal() const {
    if (type_ != PyType::Int) type_error(*this, "int");
    return node_ ? bytes_decimal(Access::get<Bytes>(*this)) : std::to_string(int_);
}

double PyValue::as_float() const {
    if (type_ != PyType::Float) type_error(*this, "float");
    return float_;
}

const std::string& PyValue::as_str() const {
    if (type_ != PyType::Str) type_error(*this, "str");
    return Access::get<std::string>(*this);
}

const std::string& PyValue::as_bytes() const {
    if (type_ != PyType::Bytes) type_error(*this, "bytes");
    return Access::get<std::string>(*this);
}

const std::vector<PyValue>& PyValue::as_tuple() const {
    if (type_ != PyType::Tuple) type_error(*this, "tuple");
    return Access::get<std::vector<PyValue>>(*this);
}

std::vector<PyValue>& PyValue::as_list() const {
    if (type_ != PyType::List) type_error(*this, "list");
    return Access::get<std::vector<PyValue>>(*this);
}

PyDict& PyValue::as_dict() const {
    if (type_ != PyType::Dict) type_error(*this, "dict");
    return Access::get<PyDict>(*this);
}

PyObject& PyValue::as_object() const {
    if (type_ != PyType::Object) type_error(*this, "object");
    return Access::get<PyObject>(*this);
}

const PyGlobal& PyValue::as_global() const {
    if (type_ != PyType::Global) type_error(*this, "global");
    return Access::get<PyGlobal>(*this);
}

const PyValue& PyValue::as_persistent_id() const {
    if (type_ != PyType::PersistentId) type_error(*this, "persistent id");
    return Access::get<PidNode>(*this).pid;
}

const PyValue* PyValue::find(std::string_view key) const { return as_dict().find(key); }

const PyValue& PyValue::get(std::string_view key) const {
    const PyValue* v = find(key);
    if (!v) throw Error("pickle value: dict has no key '" + std::string(key) + "'");
    return *v;
}

const PyDict& PyValue::ordered_dict_items() const {
    if (type_ == PyType::Dict) return as_dict();
    if (is_object("collections", "OrderedDict")) return as_object().dict_items;
    type_error(*this, "dict or collections.OrderedDict");
}

const PyDict& PyValue::namespace_attributes() const {
    if (!is_object("argparse", "Namespace")) type_error(*this, "argparse.Namespace");
    const auto& o = as_object();
    if (!o.has_state) {
        static const PyDict empty;
        return empty;
    }
    if (o.state.type() != PyType::Dict) type_error(o.state, "dict (argparse.Namespace state)");
    return o.state.as_dict();
}

bool PyValue::is_same(const PyValue& other) const {
    if (type_ != other.type_) return false;
    if (node_ || other.node_) return node_ == other.node_;
    if (type_ == PyType::Float) return std::bit_cast<std::uint64_t>(float_) == std::bit_cast<std::uint64_t>(other.float_);
    return bool_ == other.bool_ && int_ == other.int_;
}

namespace {

struct Repr {
    std::string out;
    std::size_t max;
    bool full() const { return out.size() >= max; }

    void items(const std::vector<PyValue>& v, std::size_t depth) {
        for (std::size_t i = 0; i < v.size() && !full(); ++i) {
            if (i) out += ", ";
            run(v[i], depth);
        }
    }
    void dict_items(const PyDict& d, std::size_t depth) {
        bool first = true;
        for (const auto& [k, v] : d.items()) {
            if (full()) break;
            if (!first) out += ", ";
            first = false;
            run(k, depth);
            out += ": ";
            run(v, depth);
        }
    }
    void run(const PyValue& v, std::size_t depth) {
        if (full()) return;
        if (depth > 100) {
            out += "...";
            return;
        }
        ++depth;
        switch (v.type()) {
            case PyType::None: out += "None"; break;
            case PyType::Bool: out += v.as_bool() ? "True" : "False"; break;
            case PyType::Int:
                if (!v.int_fits_int64() && v.int_bytes().size() > 4096)
                    out += "<int of " + std::to_string(v.int_bytes().size()) + " bytes>";
                else
                    out += v.int_decimal();
                break;
            case PyType::Float: out += python_float_repr(v.as_float()); break;
            case PyType::Str:
                out += '\'';
                append_escaped(out, v.as_str().substr(0, max), '\'');
                out += '\'';
                break;
            case PyType::Bytes:
                out += "b'";
                append_escaped(out, v.as_bytes().substr(0, max), '\'');
                out += '\'';
                break;
            case PyType::Tuple:
                out += '(';
                items(v.as_tuple(), depth);
                if (v.as_tuple().size() == 1) out += ',';
                out += ')';
                break;
            case PyType::List:
                out += '[';
                items(v.as_list(), depth);
                out += ']';
                break;
            case PyType::Dict:
                out += '{';
                dict_items(v.as_dict(), depth);
                out += '}';
                break;
            case PyType::Global: out += v.as_global().module + "." + v.as_global().name; break;
            case PyType::PersistentId:
                out += "persistent_id(";
                run(v.as_persistent_id(), depth);
                out += ')';
                break;
            case PyType::Object: object(v, depth); break;
        }
    }
    // module.name(args, {dict items}, [list items]; state=...), a Namespace as module.name(k=v, ...).
    void object(const PyValue& v, std::size_t depth) {
        const auto& o = v.as_object();
        out += o.cls.module + "." + o.cls.name + "(";
        if (v.is_object("argparse", "Namespace") && o.has_state && o.state.type() == PyType::Dict) {
            bool first = true;
            for (const auto& [k, x] : o.state.as_dict().items()) {
                if (full()) break;
                if (!first) out += ", ";
                first = false;
                out += k.type() == PyType::Str ? k.as_str() : k.repr(64);
                out += '=';
                run(x, depth);
            }
            out += ')';
            return;
        }
        bool sep = false;
        if (o.args.type() == PyType::Tuple) {
            items(o.args.as_tuple(), depth);
            sep = !o.args.as_tuple().empty();
        }
        if (!o.dict_items.empty()) {
            out += sep ? ", {" : "{";
            dict_items(o.dict_items, depth);
            out += '}';
            sep = true;
        }
        if (!o.list_items.empty()) {
            out += sep ? ", [" : "[";
            items(o.list_items, depth);
            out += ']';
            sep = true;
        }
        if (o.has_state) {
            out += sep ? "; state=" : "state=";
            run(o.state, depth);
        }
        out += ')';
    }
};

}  // namespace

std::string PyValue::repr(std::size_t max_chars) const {
    Repr r{{}, max_chars};
    r.run(*this, 0);
    if (r.out.size() > max_chars) {
        r.out.resize(max_chars);
        r.out += "...";
    }
    return r.out;
}

// ---------------------------------------------------------------------------------------------
// PyDict

void PyDict::set(PyValue key, PyValue value) {
    std::string h;
    if (dict_hash_key(key, h)) {
        auto [it, inserted] = index_.emplace(std::move(h), items_.size());
        if (!inserted) {
            items_[it->second].second = std::move(value);
            return;
        }
    } else {
        for (auto& item : items_) {
            if (item.first.is_same(key)) {
                item.second = std::move(value);
                return;
            }
        }
    }
    items_.emplace_back(std::move(key), std::move(value));
}

const PyValue* PyDict::find(const PyValue& key) const {
    std::string h;
    if (dict_hash_key(key, h)) {
        auto it = index_.find(h);
        return it == index_.end() ? nullptr : &items_[it->second].second;
    }
    for (const auto& item : items_)
        if (item.first.is_same(key)) return &item.second;
    return nullptr;
}

const PyValue* PyDict::find(std::string_view key) const {
    std::string h(1, 's');  // as dict_hash_key spells a str key
    h.append(key);
    auto it = index_.find(h);
    return it == index_.end() ? nullptr : &items_[it->second].second;
}

void PyDict::clear() {
    items_.clear();
    index_.clear();
}

// ---------------------------------------------------------------------------------------------
// Structural equality

namespace {

struct PairHash {
    std::size_t operator()(const std::pair<const void*, const void*>& p) const {
        return std::hash<const void*>()(p.first) * 31 + std::hash<const void*>()(p.second);
    }
};

struct Equal {
    std::unordered_set<std::pair<const void*, const void*>, PairHash> assumed;  // pairs compared or being compared

    bool seq(const std::vector<PyValue>& a, const std::vector<PyValue>& b) {
        if (a.size() != b.size()) return false;
        for (std::size_t i = 0; i < a.size(); ++i)
            if (!run(a[i], b[i])) return false;
        return true;
    }
    bool dict(const PyDict& a, const PyDict& b) {
        if (a.size() != b.size()) return false;
        for (std::size_t i = 0; i < a.size(); ++i)
            if (!run(a.items()[i].first, b.items()[i].first) || !run(a.items()[i].second, b.items()[i].second)) return false;
        return true;
    }
    bool run(const PyValue& a, const PyValue& b) {
        if (a.type() != b.type()) return false;
        switch (a.type()) {
            case PyType::None: return true;
            case PyType::Bool: return a.as_bool() == b.as_bool();
            case PyType::Int: return a.int_bytes() == b.int_bytes();
            case PyType::Float: return std::bit_cast<std::uint64_t>(a.as_float()) == std::bit_cast<std::uint64_t>(b.as_float());
            case PyType::Str: return a.as_str() == b.as_str();
            case PyType::Bytes: return a.as_bytes() == b.as_bytes();
            case PyType::Global: return a.as_global().module == b.as_global().module && a.as_global().name == b.as_global().name;
            default: break;
        }
        // Containers: a pair already under comparison (or compared and found equal) counts as
        // equal; a difference anywhere makes the whole comparison false anyway.
        if (!assumed.emplace(Access::node(a), Access::node(b)).second) return true;
        switch (a.type()) {
            case PyType::Tuple: return seq(a.as_tuple(), b.as_tuple());
            case PyType::List: return seq(a.as_list(), b.as_list());
            case PyType::Dict: return dict(a.as_dict(), b.as_dict());
            case PyType::PersistentId: return run(a.as_persistent_id(), b.as_persistent_id());
            case PyType::Object: {
                const auto& x = a.as_object();
                const auto& y = b.as_object();
                return x.cls.module == y.cls.module && x.cls.name == y.cls.name && x.newobj == y.newobj &&
                       x.has_state == y.has_state && run(x.args, y.args) && run(x.kwargs, y.kwargs) && run(x.state, y.state) &&
                       seq(x.list_items, y.list_items) && dict(x.dict_items, y.dict_items);
            }
            default: return false;
        }
    }
};

}  // namespace

bool structurally_equal(const PyValue& a, const PyValue& b) {
    Equal e;
    return e.run(a, b);
}

}  // namespace mds::ckpt
