// The protocol-2 pickle writer (ckpt/pickle.h write_pickle), following CPython's Lib/pickle.py
// _Pickler.save for protocol 2.
#include <algorithm>
#include <bit>
#include <unordered_map>
#include <unordered_set>

#include "mds/util/error.h"
#include "pickle_internal.h"

namespace mds::ckpt {

using namespace pickle_detail;

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
            case PyType::Tuple: save_tuple(v.as_tuple(), node, depth); return;
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
            case PyType::Object: save_object(v.as_object(), node, depth); return;
            default: return;
        }
    }

private:
    // Up to three items with TUPLE1..3, more between MARK and TUPLE; memoized after its items.
    void save_tuple(const std::vector<PyValue>& items, const void* node, std::size_t depth) {
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
    }

    // The class, its arguments and REDUCE / NEWOBJ / NEWOBJ_EX, then its list and dict items and
    // BUILD with its state (pickle.py save_reduce).
    void save_object(const PyObject& o, const void* node, std::size_t depth) {
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
    }

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
