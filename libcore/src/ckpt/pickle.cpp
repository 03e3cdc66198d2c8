// Python pickle VM (reader) and protocol-2 writer for torch.save's data.pkl; see ckpt/pickle.h.
// The VM follows CPython's Lib/pickle.py _Unpickler opcode by opcode, with a single value stack
// plus the positions of the open MARKs (CPython's metastack), but builds PyValues instead of
// calling anything. The writer follows pickle.py _Pickler.save for protocol 2.
#include "mds/ckpt/pickle.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <unordered_set>

#include "mds/util/error.h"

namespace mds::ckpt {

// Grants the reader and the helpers below access to PyValue's node.
class PickleReaderAccess {
public:
    static const void* node(const PyValue& v) { return v.node_.get(); }
    template <class T>
    static T& get(const PyValue& v) { return *static_cast<T*>(v.node_.get()); }
};

namespace {

using Access = PickleReaderAccess;
using Bytes = std::vector<std::uint8_t>;
struct PidNode {
    PyValue pid;
};

// ---------------------------------------------------------------------------------------------
// Ints of any size: minimal little-endian two's complement (CPython's pickle.encode_long).

void trim_twos_complement(Bytes& b) {
    while (b.size() > 1) {
        const std::uint8_t last = b.back(), prev = b[b.size() - 2];
        if ((last == 0x00 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80)))
            b.pop_back();
        else
            break;
    }
    if (b.size() == 1 && b[0] == 0) b.clear();
}

Bytes int64_bytes(std::int64_t v) {
    Bytes b(8);
    auto u = static_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(u >> (8 * i));
    trim_twos_complement(b);
    return b;
}

bool is_negative(const Bytes& b) { return !b.empty() && (b.back() & 0x80); }

// Two's-complement negation in place (the length is kept; callers extend first when needed).
void negate(Bytes& b) {
    unsigned carry = 1;
    for (auto& x : b) {
        const unsigned s = static_cast<unsigned>(static_cast<std::uint8_t>(~x)) + carry;
        x = static_cast<std::uint8_t>(s);
        carry = s >> 8;
    }
}

std::string bytes_decimal(Bytes mag) {  // mag: two's complement, any sign
    const bool neg = is_negative(mag);
    if (neg) {
        mag.push_back(0xff);
        negate(mag);
    }
    std::string digits;
    // Repeated division of the magnitude by 10^9, most significant byte first.
    while (std::any_of(mag.begin(), mag.end(), [](std::uint8_t x) { return x != 0; })) {
        std::uint64_t rem = 0;
        for (std::size_t i = mag.size(); i-- > 0;) {
            const std::uint64_t cur = (rem << 8) | mag[i];
            mag[i] = static_cast<std::uint8_t>(cur / 1000000000u);
            rem = cur % 1000000000u;
        }
        std::string chunk = std::to_string(rem);
        const bool more = std::any_of(mag.begin(), mag.end(), [](std::uint8_t x) { return x != 0; });
        if (more) chunk.insert(0, 9 - chunk.size(), '0');
        digits.insert(0, chunk);
    }
    if (digits.empty()) digits = "0";
    return neg ? "-" + digits : digits;
}

// Decimal text (optional sign) to two's-complement bytes; false when it is not a decimal.
bool decimal_bytes(std::string_view s, Bytes& out) {
    bool neg = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        s.remove_prefix(1);
    }
    if (s.empty()) return false;
    Bytes mag;  // little-endian magnitude
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        unsigned carry = static_cast<unsigned>(c - '0');
        for (auto& x : mag) {
            const unsigned v = x * 10u + carry;
            x = static_cast<std::uint8_t>(v);
            carry = v >> 8;
        }
        while (carry) {
            mag.push_back(static_cast<std::uint8_t>(carry));
            carry >>= 8;
        }
    }
    mag.push_back(0);  // sign byte
    if (neg) negate(mag);
    trim_twos_complement(mag);
    out = std::move(mag);
    return true;
}

// ---------------------------------------------------------------------------------------------
// Text helpers.

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

std::string latin1_to_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) append_utf8(out, static_cast<std::uint8_t>(c));
    return out;
}

// Decodes UTF-8 (surrogates allowed, as CPython's 'surrogatepass' does) into code points; false
// when malformed.
bool decode_utf8(std::string_view s, std::vector<std::uint32_t>* cps) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto b0 = static_cast<std::uint8_t>(s[i]);
        std::uint32_t cp = 0;
        std::size_t n = 0;
        if (b0 < 0x80) {
            cp = b0;
            n = 1;
        } else if (b0 >= 0xc2 && b0 < 0xe0) {
            cp = b0 & 0x1fu;
            n = 2;
        } else if (b0 >= 0xe0 && b0 < 0xf0) {
            cp = b0 & 0x0fu;
            n = 3;
        } else if (b0 >= 0xf0 && b0 < 0xf5) {
            cp = b0 & 0x07u;
            n = 4;
        } else {
            return false;
        }
        if (i + n > s.size()) return false;
        for (std::size_t k = 1; k < n; ++k) {
            const auto b = static_cast<std::uint8_t>(s[i + k]);
            if ((b & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (b & 0x3fu);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) return false;
        if (cps) cps->push_back(cp);
        i += n;
    }
    return true;
}

// A str whose code points are all below 256, as the latin-1 bytes it encodes to.
bool utf8_to_latin1(std::string_view s, std::string& out) {
    std::vector<std::uint32_t> cps;
    if (!decode_utf8(s, &cps)) return false;
    out.clear();
    for (auto cp : cps) {
        if (cp > 0xff) return false;
        out += static_cast<char>(cp);
    }
    return true;
}

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

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d);
    std::string s(buf, res.ptr);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
}

// Python 2 names that protocol 2 writes for Python 3 builtins (CPython's _compat_pickle, the
// one-to-one part), as (Python 3 name, Python 2 name).
constexpr std::pair<const char*, const char*> kBuiltinRenames[] = {
    {"int", "long"}, {"str", "unicode"}, {"range", "xrange"}, {"chr", "unichr"}};

// Python 3 spelling of a global, as CPython's Unpickler with fix_imports reads it.
PyGlobal normalize_global(std::string module, std::string name) {
    if (module == "copy_reg") module = "copyreg";
    if (module == "__builtin__" || module == "builtins") {
        module = "builtins";
        if (name == "basestring") name = "str";
        for (const auto& [py3, py2] : kBuiltinRenames)
            if (name == py2) name = py3;
    }
    return {std::move(module), std::move(name)};
}

// How protocol 2 spells a global: __builtin__.long for builtins.int, copy_reg for copyreg.
std::pair<std::string, std::string> python2_global(const std::string& module, const std::string& name) {
    if (module == "copyreg") return {"copy_reg", name};
    if (module != "builtins") return {module, name};
    for (const auto& [py3, py2] : kBuiltinRenames)
        if (name == py3) return {"__builtin__", py2};
    return {"__builtin__", name};
}

// The key under which PyDict indexes a value-compared key; false for keys compared by identity.
bool dict_hash_key(const PyValue& k, std::string& out) {
    switch (k.type()) {
        case PyType::None: out = "n"; return true;
        case PyType::Bool: out = k.as_bool() ? "i1" : "i0"; return true;
        case PyType::Int:
            if (k.int_fits_int64()) {
                out = "i" + std::to_string(k.as_int());
            } else {
                const auto b = k.int_bytes();
                out = "I" + std::string(b.begin(), b.end());
            }
            return true;
        case PyType::Float: {
            const double d = k.as_float();
            if (d == std::trunc(d) && std::fabs(d) < 9.2e18) {
                out = "i" + std::to_string(static_cast<std::int64_t>(d));
            } else {
                out = "f" + std::to_string(std::bit_cast<std::uint64_t>(d));
            }
            return true;
        }
        case PyType::Str: out = "s" + k.as_str(); return true;
        case PyType::Bytes: out = "b" + k.as_bytes(); return true;
        case PyType::Global: out = "g" + k.as_global().module + "\n" + k.as_global().name; return true;
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
            case PyType::Float: out += float_repr(v.as_float()); break;
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
            case PyType::Object: {
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
                    break;
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
                break;
            }
        }
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

// ---------------------------------------------------------------------------------------------
// Reader

namespace {

enum Op : std::uint8_t {
    MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F', INT = 'I', BININT = 'J',
    BININT1 = 'K', LONG = 'L', BININT2 = 'M', NONE = 'N', PERSID = 'P', BINPERSID = 'Q', REDUCE = 'R',
    STRING = 'S', BINSTRING = 'T', SHORT_BINSTRING = 'U', UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a',
    BUILD = 'b', GLOBAL = 'c', DICT = 'd', EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h', INST = 'i',
    LONG_BINGET = 'j', LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q', LONG_BINPUT = 'r',
    SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G',
    PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87,
    NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b, BINBYTES = 'B', SHORT_BINBYTES = 'C',
    SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e, EMPTY_SET = 0x8f, ADDITEMS = 0x90,
    FROZENSET = 0x91, NEWOBJ_EX = 0x92, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95, BYTEARRAY8 = 0x96,
    NEXT_BUFFER = 0x97, READONLY_BUFFER = 0x98,
};

const char* op_name(std::uint8_t op) {
    switch (op) {
        case MARK: return "MARK"; case STOP: return "STOP"; case POP: return "POP"; case POP_MARK: return "POP_MARK";
        case DUP: return "DUP"; case FLOAT: return "FLOAT"; case INT: return "INT"; case BININT: return "BININT";
        case BININT1: return "BININT1"; case LONG: return "LONG"; case BININT2: return "BININT2"; case NONE: return "NONE";
        case PERSID: return "PERSID"; case BINPERSID: return "BINPERSID"; case REDUCE: return "REDUCE";
        case STRING: return "STRING"; case BINSTRING: return "BINSTRING"; case SHORT_BINSTRING: return "SHORT_BINSTRING";
        case UNICODE: return "UNICODE"; case BINUNICODE: return "BINUNICODE"; case APPEND: return "APPEND";
        case BUILD: return "BUILD"; case GLOBAL: return "GLOBAL"; case DICT: return "DICT"; case EMPTY_DICT: return "EMPTY_DICT";
        case APPENDS: return "APPENDS"; case GET: return "GET"; case BINGET: return "BINGET"; case INST: return "INST";
        case LONG_BINGET: return "LONG_BINGET"; case LIST: return "LIST"; case EMPTY_LIST: return "EMPTY_LIST";
        case OBJ: return "OBJ"; case PUT: return "PUT"; case BINPUT: return "BINPUT"; case LONG_BINPUT: return "LONG_BINPUT";
        case SETITEM: return "SETITEM"; case TUPLE: return "TUPLE"; case EMPTY_TUPLE: return "EMPTY_TUPLE";
        case SETITEMS: return "SETITEMS"; case BINFLOAT: return "BINFLOAT"; case PROTO: return "PROTO";
        case NEWOBJ: return "NEWOBJ"; case EXT1: return "EXT1"; case EXT2: return "EXT2"; case EXT4: return "EXT4";
        case TUPLE1: return "TUPLE1"; case TUPLE2: return "TUPLE2"; case TUPLE3: return "TUPLE3";
        case NEWTRUE: return "NEWTRUE"; case NEWFALSE: return "NEWFALSE"; case LONG1: return "LONG1"; case LONG4: return "LONG4";
        case BINBYTES: return "BINBYTES"; case SHORT_BINBYTES: return "SHORT_BINBYTES";
        case SHORT_BINUNICODE: return "SHORT_BINUNICODE"; case BINUNICODE8: return "BINUNICODE8";
        case BINBYTES8: return "BINBYTES8"; case EMPTY_SET: return "EMPTY_SET"; case ADDITEMS: return "ADDITEMS";
        case FROZENSET: return "FROZENSET"; case NEWOBJ_EX: return "NEWOBJ_EX"; case STACK_GLOBAL: return "STACK_GLOBAL";
        case MEMOIZE: return "MEMOIZE"; case FRAME: return "FRAME"; case BYTEARRAY8: return "BYTEARRAY8";
        case NEXT_BUFFER: return "NEXT_BUFFER"; case READONLY_BUFFER: return "READONLY_BUFFER";
        default: return "unknown";
    }
}

// Python's text ints allow at most this many digits (sys.int_info.default_max_str_digits).
constexpr std::size_t kMaxTextDigits = 4300;

class Reader {
public:
    Reader(std::span<const std::byte> bytes, const std::string& where)
        : data_(reinterpret_cast<const std::uint8_t*>(bytes.data())), size_(bytes.size()), where_(where) {}

    ~Reader() {
        // Break whatever was built (reference cycles, deep chains) node by node, so that nothing
        // leaks and no destructor recurses deeply; the result returned by run() keeps its nodes.
        for (auto& v : created_)
            if (!keep_ || !reachable_.count(Access::node(v))) clear_node(v);
    }

    PyValue run() {
        while (true) {
            op_pos_ = pos_;
            if (pos_ >= size_) {
                op_ = 0;
                fail_plain("pickle offset " + std::to_string(pos_) + ": data ends without STOP");
            }
            op_ = data_[pos_++];
            if (op_ == STOP) {
                PyValue result = pop();
                check_graph(result);
                keep_ = true;
                return result;
            }
            step();
        }
    }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    const std::string& where_;
    std::size_t pos_ = 0, op_pos_ = 0;
    std::uint8_t op_ = 0;
    std::vector<PyValue> stack_;
    std::vector<std::size_t> marks_;
    std::unordered_map<std::uint64_t, PyValue> memo_;
    std::vector<PyValue> created_;  // every container node built, for the cleanup on failure
    bool keep_ = false;
    std::unordered_set<const void*> reachable_;  // container nodes of the result (check_graph)

    [[noreturn]] void fail_plain(const std::string& msg) const { throw Error(where_ + ": " + msg); }
    [[noreturn]] void fail(const std::string& msg) const {
        static const char* hex = "0123456789abcdef";
        std::string op = "0x";
        op += hex[op_ >> 4];
        op += hex[op_ & 15];
        throw Error(where_ + ": pickle offset " + std::to_string(op_pos_) + ", opcode " + op + " " + op_name(op_) + ": " + msg);
    }

    static void clear_node(PyValue& v) {
        switch (v.type()) {
            case PyType::Tuple:
            case PyType::List: Access::get<std::vector<PyValue>>(v).clear(); break;
            case PyType::Dict: Access::get<PyDict>(v).clear(); break;
            case PyType::PersistentId: Access::get<PidNode>(v).pid = PyValue(); break;
            case PyType::Object: {
                auto& o = Access::get<PyObject>(v);
                o.args = o.kwargs = o.state = PyValue();
                o.list_items.clear();
                o.dict_items.clear();
                break;
            }
            default: break;
        }
    }
    PyValue made(PyValue v) {
        created_.push_back(v);
        return v;
    }

    // --- input
    const std::uint8_t* take(std::size_t n) {
        if (n > size_ - pos_) fail("needs " + std::to_string(n) + " bytes of argument, " + std::to_string(size_ - pos_) + " left");
        const std::uint8_t* p = data_ + pos_;
        pos_ += n;
        return p;
    }
    std::uint64_t read_le(std::size_t n) {
        const std::uint8_t* p = take(n);
        std::uint64_t v = 0;
        for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
        return v;
    }
    std::string_view read_line() {
        const std::uint8_t* begin = data_ + pos_;
        const void* nl = std::memchr(begin, '\n', size_ - pos_);
        if (!nl) fail("text argument without a newline");
        const auto n = static_cast<std::size_t>(static_cast<const std::uint8_t*>(nl) - begin);
        pos_ += n + 1;
        return {reinterpret_cast<const char*>(begin), n};
    }
    std::string_view read_counted(std::uint64_t n) {
        if (n > size_ - pos_) fail("length " + std::to_string(n) + " exceeds the " + std::to_string(size_ - pos_) + " bytes left");
        return {reinterpret_cast<const char*>(take(static_cast<std::size_t>(n))), static_cast<std::size_t>(n)};
    }
    std::string utf8_arg(std::string_view s) {
        if (!decode_utf8(s, nullptr)) fail("string is not valid UTF-8");
        return std::string(s);
    }

    // --- stack
    std::size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
    PyValue pop() {
        if (stack_.size() <= frame_base()) fail(marks_.empty() ? "stack underflow" : "stack underflow (nothing above the MARK)");
        PyValue v = std::move(stack_.back());
        stack_.pop_back();
        return v;
    }
    PyValue& top() {
        if (stack_.size() <= frame_base()) fail(marks_.empty() ? "stack underflow" : "stack underflow (nothing above the MARK)");
        return stack_.back();
    }
    std::vector<PyValue> pop_mark() {
        if (marks_.empty()) fail("no MARK on the stack");
        const std::size_t m = marks_.back();
        marks_.pop_back();
        std::vector<PyValue> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)),
                                   std::make_move_iterator(stack_.end()));
        stack_.resize(m);
        return items;
    }
    void push(PyValue v) { stack_.push_back(std::move(v)); }

    PyValue get_memo(std::uint64_t key) {
        auto it = memo_.find(key);
        if (it == memo_.end()) fail("memo key " + std::to_string(key) + " is not defined");
        return it->second;
    }
    void put_memo(std::uint64_t key) { memo_[key] = top(); }

    std::uint64_t text_index(std::string_view line) {
        std::uint64_t v = 0;
        auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
        if (ec != std::errc() || p != line.data() + line.size()) fail("bad memo index '" + std::string(line.substr(0, 40)) + "'");
        return v;
    }
    PyValue text_int(std::string_view s) {
        if (s.size() > kMaxTextDigits + 1) fail("int text of " + std::to_string(s.size()) + " digits");
        Bytes b;
        if (!decimal_bytes(s, b)) fail("bad int text '" + std::string(s.substr(0, 40)) + "'");
        return PyValue::big_integer(b);
    }

    PyValue make_global(std::string module, std::string name) {
        if (module.find('\n') != std::string::npos || name.find('\n') != std::string::npos)
            fail("global name contains a newline");
        return PyValue::global(std::move(module), std::move(name));
    }

    // REDUCE / NEWOBJ result, with protocol 2's bytes idioms folded back into bytes.
    PyValue make_object(const PyValue& cls, PyValue args, bool newobj) {
        if (cls.type() != PyType::Global) fail("callable is a " + std::string(py_type_name(cls.type())) + ", not a GLOBAL");
        if (args.type() != PyType::Tuple) fail("argument is a " + std::string(py_type_name(args.type())) + ", not a tuple");
        const auto& a = args.as_tuple();
        if (!newobj) {
            if (cls.is_global("_codecs", "encode") && a.size() == 2 && a[0].type() == PyType::Str &&
                a[1].type() == PyType::Str && a[1].as_str() == "latin1") {
                std::string raw;
                if (utf8_to_latin1(a[0].as_str(), raw)) return PyValue::bytes(std::move(raw));
            }
            if (cls.is_global("builtins", "bytes") && a.empty()) return PyValue::bytes("");
        }
        return made(PyValue::object(cls.as_global().module, cls.as_global().name, std::move(args), newobj));
    }

    static bool is_set(const PyValue& v) {
        if (!v.is_object("builtins", "set")) return false;
        const auto& o = v.as_object();
        return !o.newobj && o.args.type() == PyType::Tuple && o.args.as_tuple().size() == 1 && o.args.as_tuple()[0].type() == PyType::List;
    }

    void append_to(const PyValue& target, std::vector<PyValue> items) {
        if (target.type() == PyType::List) {
            auto& l = target.as_list();
            for (auto& x : items) l.push_back(std::move(x));
        } else if (target.type() == PyType::Object) {
            auto& l = target.as_object().list_items;
            for (auto& x : items) l.push_back(std::move(x));
        } else {
            fail("cannot append to a " + std::string(py_type_name(target.type())));
        }
    }
    void setitems_on(const PyValue& target, std::vector<PyValue> kv) {
        if (kv.size() % 2) fail("odd number of items for SETITEMS");
        PyDict* d = nullptr;
        if (target.type() == PyType::Dict)
            d = &target.as_dict();
        else if (target.type() == PyType::Object)
            d = &target.as_object().dict_items;
        else
            fail("cannot set items on a " + std::string(py_type_name(target.type())));
        for (std::size_t i = 0; i < kv.size(); i += 2) d->set(std::move(kv[i]), std::move(kv[i + 1]));
    }

    void step() {
        switch (op_) {
            case PROTO: {
                const auto proto = read_le(1);
                if (proto > 5) fail("unsupported pickle protocol " + std::to_string(proto));
                break;
            }
            case FRAME: {
                const auto n = read_le(8);
                if (n > size_ - pos_) fail("frame of " + std::to_string(n) + " bytes exceeds the " + std::to_string(size_ - pos_) + " left");
                break;
            }
            case MARK: marks_.push_back(stack_.size()); break;
            case POP:
                if (stack_.size() > frame_base())
                    stack_.pop_back();
                else
                    pop_mark();
                break;
            case POP_MARK: pop_mark(); break;
            case DUP: push(top()); break;
            case NONE: push(PyValue()); break;
            case NEWTRUE: push(PyValue::boolean(true)); break;
            case NEWFALSE: push(PyValue::boolean(false)); break;
            case INT: {
                const auto line = read_line();
                if (line == "00" || line == "01")
                    push(PyValue::boolean(line == "01"));
                else
                    push(text_int(line));
                break;
            }
            case LONG: {
                auto line = read_line();
                if (!line.empty() && line.back() == 'L') line.remove_suffix(1);
                push(text_int(line));
                break;
            }
            case BININT: push(PyValue::integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4))))); break;
            case BININT1: push(PyValue::integer(static_cast<std::int64_t>(read_le(1)))); break;
            case BININT2: push(PyValue::integer(static_cast<std::int64_t>(read_le(2)))); break;
            case LONG1:
            case LONG4: {
                std::uint64_t n = read_le(op_ == LONG1 ? 1 : 4);
                if (op_ == LONG4 && (n & 0x80000000u)) fail("negative byte count");
                const auto s = read_counted(n);
                push(PyValue::big_integer({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}));
                break;
            }
            case BINFLOAT: {
                const std::uint8_t* p = take(8);
                std::uint64_t u = 0;
                for (int i = 0; i < 8; ++i) u = (u << 8) | p[i];
                push(PyValue::floating(std::bit_cast<double>(u)));
                break;
            }
            case FLOAT: {
                const auto line = read_line();
                double d = 0;
                auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), d);
                if (ec != std::errc() || p != line.data() + line.size() || line.empty())
                    fail("bad float text '" + std::string(line.substr(0, 40)) + "'");
                push(PyValue::floating(d));
                break;
            }
            case STRING: push(PyValue::str(latin1_to_utf8(unquote(read_line())))); break;
            case BINSTRING: {
                const auto n = read_le(4);
                if (n & 0x80000000u) fail("negative byte count");
                push(PyValue::str(latin1_to_utf8(read_counted(n))));
                break;
            }
            case SHORT_BINSTRING: push(PyValue::str(latin1_to_utf8(read_counted(read_le(1))))); break;
            case UNICODE: push(PyValue::str(raw_unicode_escape(read_line()))); break;
            case BINUNICODE: push(PyValue::str(utf8_arg(read_counted(read_le(4))))); break;
            case SHORT_BINUNICODE: push(PyValue::str(utf8_arg(read_counted(read_le(1))))); break;
            case BINUNICODE8: push(PyValue::str(utf8_arg(read_counted(read_le(8))))); break;
            case BINBYTES: push(PyValue::bytes(std::string(read_counted(read_le(4))))); break;
            case SHORT_BINBYTES: push(PyValue::bytes(std::string(read_counted(read_le(1))))); break;
            case BINBYTES8: push(PyValue::bytes(std::string(read_counted(read_le(8))))); break;
            case EMPTY_TUPLE: push(made(PyValue::tuple({}))); break;
            case TUPLE1:
            case TUPLE2:
            case TUPLE3: {
                const std::size_t n = op_ - TUPLE1 + 1u;
                std::vector<PyValue> items(n);
                for (std::size_t i = n; i-- > 0;) items[i] = pop();
                push(made(PyValue::tuple(std::move(items))));
                break;
            }
            case TUPLE: push(made(PyValue::tuple(pop_mark()))); break;
            case EMPTY_LIST: push(made(PyValue::list())); break;
            case LIST: push(made(PyValue::list(pop_mark()))); break;
            case EMPTY_DICT: push(made(PyValue::dict())); break;
            case DICT: {
                auto kv = pop_mark();
                PyValue d = made(PyValue::dict());
                setitems_on(d, std::move(kv));
                push(std::move(d));
                break;
            }
            case APPEND: {
                PyValue v = pop();
                append_to(top(), {std::move(v)});
                break;
            }
            case APPENDS: {
                auto items = pop_mark();
                append_to(top(), std::move(items));
                break;
            }
            case SETITEM: {
                PyValue v = pop();
                PyValue k = pop();
                setitems_on(top(), {std::move(k), std::move(v)});
                break;
            }
            case SETITEMS: {
                auto kv = pop_mark();
                setitems_on(top(), std::move(kv));
                break;
            }
            case EMPTY_SET: push(made(PyValue::object("builtins", "set", made(PyValue::tuple({made(PyValue::list())}))))); break;
            case ADDITEMS: {
                auto items = pop_mark();
                const PyValue& s = top();
                if (!is_set(s)) fail("ADDITEMS target is a " + std::string(py_type_name(s.type())) + ", not a set");
                append_to(s.as_object().args.as_tuple()[0], std::move(items));
                break;
            }
            case FROZENSET:
                push(made(PyValue::object("builtins", "frozenset", made(PyValue::tuple({made(PyValue::list(pop_mark()))})))));
                break;
            case GLOBAL: {
                std::string module = utf8_arg(read_line());
                std::string name = utf8_arg(read_line());
                push(make_global(std::move(module), std::move(name)));
                break;
            }
            case STACK_GLOBAL: {
                PyValue name = pop();
                PyValue module = pop();
                if (name.type() != PyType::Str || module.type() != PyType::Str) fail("module and name must be str");
                push(make_global(module.as_str(), name.as_str()));
                break;
            }
            case REDUCE: {
                PyValue args = pop();
                PyValue cls = pop();
                push(make_object(cls, std::move(args), false));
                break;
            }
            case NEWOBJ: {
                PyValue args = pop();
                PyValue cls = pop();
                push(make_object(cls, std::move(args), true));
                break;
            }
            case NEWOBJ_EX: {
                PyValue kwargs = pop();
                PyValue args = pop();
                PyValue cls = pop();
                if (kwargs.type() != PyType::Dict) fail("keyword arguments are not a dict");
                PyValue o = make_object(cls, std::move(args), true);
                o.as_object().kwargs = std::move(kwargs);
                push(std::move(o));
                break;
            }
            case BUILD: {
                PyValue state = pop();
                const PyValue& target = top();
                if (target.type() != PyType::Object) fail("cannot BUILD a " + std::string(py_type_name(target.type())));
                auto& o = target.as_object();
                o.has_state = true;
                o.state = std::move(state);
                break;
            }
            case BINPERSID: push(made(PyValue::persistent_id(pop()))); break;
            case PERSID: push(made(PyValue::persistent_id(PyValue::str(utf8_arg(read_line()))))); break;
            case GET: push(get_memo(text_index(read_line()))); break;
            case BINGET: push(get_memo(read_le(1))); break;
            case LONG_BINGET: push(get_memo(read_le(4))); break;
            case PUT: put_memo(text_index(read_line())); break;
            case BINPUT: put_memo(read_le(1)); break;
            case LONG_BINPUT: put_memo(read_le(4)); break;
            case MEMOIZE: put_memo(memo_.size()); break;
            case INST:
            case OBJ:
            case EXT1:
            case EXT2:
            case EXT4:
            case BYTEARRAY8:
            case NEXT_BUFFER:
            case READONLY_BUFFER: fail("opcode not supported in checkpoints");
            default: fail("unknown opcode");
        }
    }

    // STRING's argument: a quoted Python 2 str literal (codecs.escape_decode of the inside).
    std::string unquote(std::string_view s) {
        if (s.size() < 2 || (s[0] != '\'' && s[0] != '"') || s.back() != s[0]) fail("the STRING argument is not quoted");
        s = s.substr(1, s.size() - 2);
        std::string out;
        for (std::size_t i = 0; i < s.size(); ++i) {
            if (s[i] != '\\' || i + 1 == s.size()) {
                if (s[i] == '\\') fail("trailing backslash in STRING");
                out += s[i];
                continue;
            }
            const char c = s[++i];
            switch (c) {
                case '\n': break;
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case 'a': out += '\a'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'v': out += '\v'; break;
                case 'x': {
                    if (i + 2 >= s.size()) fail("truncated \\x escape in STRING");
                    unsigned v = 0;
                    auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
                    if (ec != std::errc() || p != s.data() + i + 3) fail("bad \\x escape in STRING");
                    out += static_cast<char>(v);
                    i += 2;
                    break;
                }
                default:
                    if (c >= '0' && c <= '7') {
                        unsigned v = 0;
                        std::size_t k = 0;
                        while (k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7') v = v * 8 + static_cast<unsigned>(s[i + k++] - '0');
                        out += static_cast<char>(v & 0xff);
                        i += k - 1;
                    } else {
                        out += '\\';
                        out += c;
                    }
            }
        }
        return out;
    }

    // UNICODE's argument: raw-unicode-escape (latin-1 with \uXXXX and \UXXXXXXXX).
    std::string raw_unicode_escape(std::string_view s) {
        std::string out;
        for (std::size_t i = 0; i < s.size(); ++i) {
            if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'u' || s[i + 1] == 'U')) {
                const std::size_t n = s[i + 1] == 'u' ? 4 : 8;
                if (i + 2 + n > s.size()) fail("truncated \\u escape in UNICODE");
                std::uint32_t cp = 0;
                auto [p, ec] = std::from_chars(s.data() + i + 2, s.data() + i + 2 + n, cp, 16);
                if (ec != std::errc() || p != s.data() + i + 2 + n || cp > 0x10ffff) fail("bad \\u escape in UNICODE");
                append_utf8(out, cp);
                i += 1 + n;
            } else {
                append_utf8(out, static_cast<std::uint8_t>(s[i]));
            }
        }
        return out;
    }

    // Rejects reference cycles and nesting deeper than kMaxPickleDepth, iteratively.
    void check_graph(const PyValue& root) {
        struct Frame {
            PyValue value;
            std::vector<PyValue> children;
            std::size_t next = 0;
            std::size_t height = 0;
        };
        auto children_of = [](const PyValue& v) {
            std::vector<PyValue> c;
            auto add_dict = [&](const PyDict& d) {
                for (const auto& [k, x] : d.items()) {
                    c.push_back(k);
                    c.push_back(x);
                }
            };
            switch (v.type()) {
                case PyType::Tuple: c = v.as_tuple(); break;
                case PyType::List: c = v.as_list(); break;
                case PyType::Dict: add_dict(v.as_dict()); break;
                case PyType::PersistentId: c.push_back(v.as_persistent_id()); break;
                case PyType::Object: {
                    const auto& o = v.as_object();
                    c = {o.args, o.kwargs, o.state};
                    c.insert(c.end(), o.list_items.begin(), o.list_items.end());
                    add_dict(o.dict_items);
                    break;
                }
                default: break;
            }
            return c;
        };
        auto is_container = [](const PyValue& v) {
            switch (v.type()) {
                case PyType::Tuple: case PyType::List: case PyType::Dict: case PyType::PersistentId: case PyType::Object: return true;
                default: return false;
            }
        };
        if (!is_container(root)) return;
        std::unordered_map<const void*, std::size_t> done;  // node -> height
        std::unordered_set<const void*> open;
        std::vector<Frame> path;
        path.push_back({root, children_of(root)});
        open.insert(Access::node(root));
        while (!path.empty()) {
            Frame& f = path.back();
            if (f.next == f.children.size()) {
                const std::size_t h = f.height + 1;
                if (h > kMaxPickleDepth) fail("values nest deeper than " + std::to_string(kMaxPickleDepth) + " levels");
                const void* n = Access::node(f.value);
                open.erase(n);
                done[n] = h;
                reachable_.insert(n);
                path.pop_back();
                if (!path.empty()) path.back().height = std::max(path.back().height, h);
                continue;
            }
            PyValue child = f.children[f.next++];
            if (!is_container(child)) continue;
            const void* n = Access::node(child);
            if (auto it = done.find(n); it != done.end()) {
                f.height = std::max(f.height, it->second);
                continue;
            }
            if (open.count(n)) fail("the pickled values form a reference cycle");
            if (path.size() > kMaxPickleDepth) fail("values nest deeper than " + std::to_string(kMaxPickleDepth) + " levels");
            open.insert(n);
            auto c = children_of(child);
            path.push_back({std::move(child), std::move(c)});
        }
    }
};

}  // namespace

PyValue read_pickle(std::span<const std::byte> bytes, const std::string& where) {
    Reader r(bytes, where);
    return r.run();
}

PyValue read_pickle(std::string_view bytes, const std::string& where) {
    return read_pickle(std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()), where);
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

class Writer {
public:
    std::string out;

    void save(const PyValue& v, std::size_t depth) {
        switch (v.type()) {
            case PyType::None: out += static_cast<char>(NONE); return;
            case PyType::Bool: out += static_cast<char>(v.as_bool() ? NEWTRUE : NEWFALSE); return;
            case PyType::Int: save_int(v); return;
            case PyType::Float: {
                out += static_cast<char>(BINFLOAT);
                const auto u = std::bit_cast<std::uint64_t>(v.as_float());
                for (int i = 7; i >= 0; --i) out += static_cast<char>(u >> (8 * i));
                return;
            }
            case PyType::Global: save_global(v.as_global().module, v.as_global().name); return;
            default: break;
        }
        const void* node = Access::node(v);
        if (auto it = memo_.find(node); it != memo_.end()) {
            get(it->second);
            return;
        }
        if (v.type() == PyType::Str) {
            save_str(v.as_str());
            memoize(node);
            return;
        }
        if (v.type() == PyType::Bytes) {
            save_bytes(v.as_bytes());
            memoize(node);
            return;
        }
        if (depth >= kMaxPickleDepth) throw Error("write_pickle: values nest deeper than " + std::to_string(kMaxPickleDepth) + " levels");
        switch (v.type()) {
            case PyType::Tuple: {
                const auto& items = v.as_tuple();
                if (items.empty()) {
                    out += static_cast<char>(EMPTY_TUPLE);
                    return;
                }
                enter(node);
                if (items.size() > 3) out += static_cast<char>(MARK);
                for (const auto& x : items) save(x, depth + 1);
                leave(node);
                out += static_cast<char>(items.size() > 3 ? std::size_t{TUPLE} : TUPLE1 + items.size() - 1);
                memoize(node);
                return;
            }
            case PyType::List:
                out += static_cast<char>(EMPTY_LIST);
                memoize(node);
                appends(v.as_list(), depth);
                return;
            case PyType::Dict:
                out += static_cast<char>(EMPTY_DICT);
                memoize(node);
                setitems(v.as_dict(), depth);
                return;
            case PyType::PersistentId:
                save(v.as_persistent_id(), depth + 1);
                out += static_cast<char>(BINPERSID);
                return;
            case PyType::Object: {
                const auto& o = v.as_object();
                if (o.args.type() != PyType::Tuple) throw Error("write_pickle: arguments of " + o.cls.module + "." + o.cls.name + " are not a tuple");
                enter(node);
                save_global(o.cls.module, o.cls.name);
                save(o.args, depth + 1);
                if (o.newobj && !o.kwargs.is_none()) {
                    save(o.kwargs, depth + 1);
                    out += static_cast<char>(NEWOBJ_EX);
                } else {
                    out += static_cast<char>(o.newobj ? NEWOBJ : REDUCE);
                }
                leave(node);
                memoize(node);
                if (!o.list_items.empty()) appends(o.list_items, depth);
                if (!o.dict_items.empty()) setitems(o.dict_items, depth);
                if (o.has_state) {
                    save(o.state, depth + 1);
                    out += static_cast<char>(BUILD);
                }
                return;
            }
            default: return;
        }
    }

private:
    std::unordered_map<const void*, std::uint32_t> memo_;
    std::unordered_map<std::string, std::uint32_t> globals_;  // "module\nname" -> memo index
    std::unordered_set<const void*> open_;                    // tuples and objects being written
    std::uint32_t next_ = 0;
    std::uint32_t latin1_ = UINT32_MAX;  // memo index of the 'latin1' str of bytes, once written

    void put() {
        if (next_ < 256) {
            out += static_cast<char>(BINPUT);
            out += static_cast<char>(next_);
        } else {
            out += static_cast<char>(LONG_BINPUT);
            for (int i = 0; i < 4; ++i) out += static_cast<char>(next_ >> (8 * i));
        }
        ++next_;
    }
    void get(std::uint32_t i) {
        if (i < 256) {
            out += static_cast<char>(BINGET);
            out += static_cast<char>(i);
        } else {
            out += static_cast<char>(LONG_BINGET);
            for (int k = 0; k < 4; ++k) out += static_cast<char>(i >> (8 * k));
        }
    }
    void memoize(const void* node) {
        memo_[node] = next_;
        put();
    }
    void enter(const void* node) {
        if (!open_.insert(node).second) throw Error("write_pickle: a tuple or object contains itself through its arguments");
    }
    void leave(const void* node) { open_.erase(node); }

    void save_int(const PyValue& v) {
        if (v.int_fits_int64()) {
            const std::int64_t i = v.as_int();
            if (i >= 0 && i <= 0xff) {
                out += static_cast<char>(BININT1);
                out += static_cast<char>(i);
                return;
            }
            if (i >= 0 && i <= 0xffff) {
                out += static_cast<char>(BININT2);
                out += static_cast<char>(i & 0xff);
                out += static_cast<char>(i >> 8);
                return;
            }
            if (i >= INT32_MIN && i <= INT32_MAX) {
                out += static_cast<char>(BININT);
                const auto u = static_cast<std::uint32_t>(static_cast<std::int32_t>(i));
                for (int k = 0; k < 4; ++k) out += static_cast<char>(u >> (8 * k));
                return;
            }
        }
        const auto b = v.int_bytes();
        if (b.size() < 256) {
            out += static_cast<char>(LONG1);
            out += static_cast<char>(b.size());
        } else {
            out += static_cast<char>(LONG4);
            const auto n = static_cast<std::uint32_t>(b.size());
            for (int k = 0; k < 4; ++k) out += static_cast<char>(n >> (8 * k));
        }
        out.append(reinterpret_cast<const char*>(b.data()), b.size());
    }

    void save_str(const std::string& s) {
        if (s.size() > UINT32_MAX) throw Error("write_pickle: str of " + std::to_string(s.size()) + " bytes is too long for protocol 2");
        out += static_cast<char>(BINUNICODE);
        const auto n = static_cast<std::uint32_t>(s.size());
        for (int k = 0; k < 4; ++k) out += static_cast<char>(n >> (8 * k));
        out += s;
    }

    // Protocol 2 has no bytes opcode: Python writes _codecs.encode(<latin-1 str>, 'latin1'), or
    // builtins.bytes() for b''.
    void save_bytes(const std::string& b) {
        if (b.empty()) {
            save_global("builtins", "bytes");
            out += static_cast<char>(EMPTY_TUPLE);
            out += static_cast<char>(REDUCE);
            return;
        }
        save_global("_codecs", "encode");
        save_str(latin1_to_utf8(b));
        put();
        if (latin1_ == UINT32_MAX) {
            save_str("latin1");
            latin1_ = next_;
            put();
        } else {
            get(latin1_);
        }
        out += static_cast<char>(TUPLE2);
        put();
        out += static_cast<char>(REDUCE);
    }

    void save_global(const std::string& module, const std::string& name) {
        const std::string key = module + "\n" + name;
        if (auto it = globals_.find(key); it != globals_.end()) {
            get(it->second);
            return;
        }
        if (module.find('\n') != std::string::npos || name.find('\n') != std::string::npos)
            throw Error("write_pickle: global name '" + module + "." + name + "' contains a newline");
        const auto [py2_module, py2_name] = python2_global(module, name);
        out += static_cast<char>(GLOBAL);
        out += py2_module;
        out += '\n';
        out += py2_name;
        out += '\n';
        globals_[key] = next_;
        put();
    }

    // CPython's _batch_appends / _batch_setitems: batches of 1000, a single item without MARK.
    void appends(const std::vector<PyValue>& items, std::size_t depth) {
        for (std::size_t i = 0; i < items.size(); i += 1000) {
            const std::size_t n = std::min<std::size_t>(1000, items.size() - i);
            if (n == 1) {
                save(items[i], depth + 1);
                out += static_cast<char>(APPEND);
                continue;
            }
            out += static_cast<char>(MARK);
            for (std::size_t k = 0; k < n; ++k) save(items[i + k], depth + 1);
            out += static_cast<char>(APPENDS);
        }
    }
    void setitems(const PyDict& d, std::size_t depth) {
        const auto& items = d.items();
        for (std::size_t i = 0; i < items.size(); i += 1000) {
            const std::size_t n = std::min<std::size_t>(1000, items.size() - i);
            if (n == 1) {
                save(items[i].first, depth + 1);
                save(items[i].second, depth + 1);
                out += static_cast<char>(SETITEM);
                continue;
            }
            out += static_cast<char>(MARK);
            for (std::size_t k = 0; k < n; ++k) {
                save(items[i + k].first, depth + 1);
                save(items[i + k].second, depth + 1);
            }
            out += static_cast<char>(SETITEMS);
        }
    }
};

}  // namespace

std::string write_pickle(const PyValue& value) {
    Writer w;
    w.out.push_back(static_cast<char>(PROTO));
    w.out.push_back(2);
    w.save(value, 0);
    w.out += static_cast<char>(STOP);
    return w.out;
}

}  // namespace mds::ckpt
