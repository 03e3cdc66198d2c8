// Python pickles as torch.save writes them (the data.pkl record of a .pt zip; specs/checkpoints.md
// §2, §8): a value model, PyValue, for everything Megatron-DeepSpeed checkpoints pickle, a reader
// that runs the pickle VM without executing anything, and a protocol-2 writer whose output
// Python's pickle.loads / torch.load read back. LibTorch's own unpickler rejects these files
// (argparse.Namespace, enums, LONG1 of 5 bytes, APPEND, OrderedDict + SETITEMS: §8.2), hence this.
//
// Every GLOBAL-constructed thing (REDUCE / NEWOBJ / NEWOBJ_EX, then BUILD, APPEND, SETITEM on it)
// becomes an opaque PyObject recording module, name, arguments and state: argparse.Namespace,
// enums, OrderedDict, deque, set, torch.Size, numpy arrays, tensors (_rebuild_tensor_v2), DeepSpeed
// dataclasses. Two protocol-2 idioms are folded back into plain values: `_codecs.encode(s,
// 'latin1')` and `builtins.bytes()` give Bytes. Plain bytes: no LibTorch here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mds::ckpt {

enum class PyType : std::uint8_t { None, Bool, Int, Float, Str, Bytes, Tuple, List, Dict, Object, Global, PersistentId };

const char* py_type_name(PyType t);  // "NoneType", "bool", "int", ... as Python names them

class PyDict;
struct PyObject;
struct PyGlobal;

// One Python value. Scalars are held inline; str, bytes, big ints and containers are shared
// nodes, so copying a PyValue copies a reference as Python does (a dict memoized, fetched with
// BINGET and then filled is the same dict everywhere). Default-constructed: None.
class PyValue {
public:
    PyValue() = default;

    static PyValue none() { return {}; }
    static PyValue boolean(bool b);
    static PyValue integer(std::int64_t v);
    // An int from its little-endian two's-complement bytes (any length; empty = 0), as LONG1 /
    // LONG4 carry it. Values that fit in int64 are stored as such.
    static PyValue big_integer(std::span<const std::uint8_t> le_twos_complement);
    static PyValue floating(double v);
    static PyValue str(std::string utf8);
    static PyValue bytes(std::string raw);
    static PyValue tuple(std::vector<PyValue> items);
    static PyValue list(std::vector<PyValue> items = {});
    static PyValue dict();  // an empty dict; fill it with as_dict().set(...)
    // A bare reference to a global (a class, function or torch dtype): `torch bfloat16`.
    // Python 2 spellings are stored as Python 3 reads them: `__builtin__` -> `builtins` (and
    // `__builtin__ long` -> `builtins int`, unicode -> str, xrange -> range, unichr -> chr),
    // `copy_reg` -> `copyreg`.
    static PyValue global(std::string module, std::string name);
    // An instance of module.name built from `args` (a tuple): by cls.__new__(cls, *args) when
    // `newobj`, else by calling it (REDUCE). State, list and dict items go through as_object().
    static PyValue object(std::string module, std::string name, PyValue args, bool newobj = false);
    static PyValue persistent_id(PyValue pid);

    PyType type() const { return type_; }
    bool is_none() const { return type_ == PyType::None; }
    // A Global value naming module.name.
    bool is_global(std::string_view module, std::string_view name) const;
    // An Object whose class is module.name (e.g. "collections", "OrderedDict").
    bool is_object(std::string_view module, std::string_view name) const;

    // Accessors: each throws mds::Error "expected <type>, got <type> (<short repr>)" on a mismatch.
    bool as_bool() const;
    std::int64_t as_int() const;  // also throws when the int does not fit in int64
    bool int_fits_int64() const;  // for an Int
    // An Int as minimal little-endian two's-complement bytes (empty for 0), as LONG1 writes it.
    std::vector<std::uint8_t> int_bytes() const;
    std::string int_decimal() const;  // an Int in decimal, any size
    double as_float() const;          // a Float (an Int is not converted)
    const std::string& as_str() const;
    const std::string& as_bytes() const;
    const std::vector<PyValue>& as_tuple() const;
    std::vector<PyValue>& as_list() const;  // mutable: the list is shared
    PyDict& as_dict() const;
    PyObject& as_object() const;
    const PyGlobal& as_global() const;
    const PyValue& as_persistent_id() const;  // the value BINPERSID received

    // dict[key] for a Dict with str keys; throws naming the key when it is absent.
    const PyValue& get(std::string_view key) const;
    const PyValue* find(std::string_view key) const;  // nullptr when absent
    // The items of a plain dict or of a collections.OrderedDict object, in order.
    const PyDict& ordered_dict_items() const;
    // The attributes of an argparse.Namespace object (its BUILD state dict).
    const PyDict& namespace_attributes() const;

    // Python-like repr (OrderedDict / Namespace / Global shown as module.name(...)); output past
    // max_chars is cut and ends with "...".
    std::string repr(std::size_t max_chars = 1 << 20) const;

    // The same shared node (Python `is`) for str / bytes / big int / containers; equal scalars for
    // the rest.
    bool is_same(const PyValue& other) const;

private:
    PyType type_ = PyType::None;
    bool bool_ = false;
    std::int64_t int_ = 0;
    double float_ = 0.0;
    std::shared_ptr<void> node_;  // by type_: std::string (Str, Bytes), BigInt, vector (Tuple, List), PyDict, ...

    friend class PickleReaderAccess;
};

// A dict in insertion order. Setting an existing key replaces its value in place, as Python does;
// keys are compared by value for None / bool / int / float / str / bytes / Global (True == 1, as in
// Python) and by identity for the rest.
class PyDict {
public:
    using Item = std::pair<PyValue, PyValue>;
    const std::vector<Item>& items() const { return items_; }
    std::size_t size() const { return items_.size(); }
    bool empty() const { return items_.empty(); }
    void set(PyValue key, PyValue value);
    void set(std::string_view key, PyValue value) { set(PyValue::str(std::string(key)), std::move(value)); }
    const PyValue* find(const PyValue& key) const;
    const PyValue* find(std::string_view key) const;
    void clear();

private:
    std::vector<Item> items_;
    std::unordered_map<std::string, std::size_t> index_;  // hash key of a value-compared key -> position
};

struct PyGlobal {
    std::string module, name;
};

// An instance of a class reached by GLOBAL: what REDUCE / NEWOBJ / NEWOBJ_EX built it from, and
// what BUILD, APPEND(S) and SETITEM(S) then did to it. A protocol-4 set (EMPTY_SET + ADDITEMS) or
// frozenset (FROZENSET) reads as builtins.set / builtins.frozenset with args ([items],), the form
// protocol 2 writes.
struct PyObject {
    PyGlobal cls;
    PyValue args;          // the argument tuple
    bool newobj = false;   // NEWOBJ / NEWOBJ_EX (cls.__new__(cls, *args, **kwargs)) rather than REDUCE
    PyValue kwargs;        // NEWOBJ_EX's keyword dict; None otherwise
    bool has_state = false;
    PyValue state;         // the last BUILD argument
    std::vector<PyValue> list_items;  // APPEND / APPENDS on the object (deque, list subclasses)
    PyDict dict_items;                // SETITEM / SETITEMS on the object (OrderedDict, dict subclasses)
};

// Same type and same content, recursively (floats compared bit for bit, so nan == nan and
// 0.0 != -0.0; dict items in order). Sharing is not compared.
bool structurally_equal(const PyValue& a, const PyValue& b);

// Runs the pickle in `bytes` (protocols 0-5 opcodes except the out-of-band buffers of protocol 5)
// and returns what STOP finds on the stack. Nothing is executed: globals become PyGlobal / PyObject.
// Limits: nesting depth kMaxPickleDepth, no reference cycles (Python's checkpoints have none), text
// ints of at most 4300 digits. Every malformed input throws mds::Error "<where>: pickle offset N,
// opcode 0xXX NAME: ...".
inline constexpr std::size_t kMaxPickleDepth = 1000;
PyValue read_pickle(std::span<const std::byte> bytes, const std::string& where);
PyValue read_pickle(std::string_view bytes, const std::string& where);

// Protocol 2 as Python's pickle writes such values: PROTO 2, BINPUT after every str, bytes,
// tuple, list, dict, global and object, BINGET for a node seen before (and for a repeated global),
// SETITEMS / APPENDS in batches of 1000, bytes as _codecs.encode(str, 'latin1'), builtins written
// in their Python 2 spelling (`__builtin__ long` for int). Throws mds::Error for nesting deeper
// than kMaxPickleDepth or a cycle through a tuple or object arguments (which pickle cannot express).
std::string write_pickle(const PyValue& value);

}  // namespace mds::ckpt
