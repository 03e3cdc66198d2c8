// The pickle VM (ckpt/pickle.h read_pickle). It follows CPython's Lib/pickle.py _Unpickler opcode
// by opcode, with a single value stack plus the positions of the open MARKs (CPython's metastack),
// but builds PyValues instead of calling anything. step() hands each opcode to the function of its
// group (stack and framing, numbers, text, containers, globals and objects, memo).
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "mds/util/error.h"
#include "pickle_internal.h"

namespace mds::ckpt {

using namespace pickle_detail;

namespace {

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

    // One opcode: each group takes its own opcodes and says whether op_ was one of them.
    void step() {
        if (stack_op() || number_op() || text_op() || container_op() || object_op() || memo_op()) return;
        switch (op_) {
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

    // Protocol, framing, MARK and the plain stack moves.
    bool stack_op() {
        switch (op_) {
            case PROTO: {
                const auto proto = read_le(1);
                if (proto > 5) fail("unsupported pickle protocol " + std::to_string(proto));
                return true;
            }
            case FRAME: {
                const auto n = read_le(8);
                if (n > size_ - pos_) fail("frame of " + std::to_string(n) + " bytes exceeds the " + std::to_string(size_ - pos_) + " left");
                return true;
            }
            case MARK: marks_.push_back(stack_.size()); return true;
            case POP:
                if (stack_.size() > frame_base())
                    stack_.pop_back();
                else
                    pop_mark();
                return true;
            case POP_MARK: pop_mark(); return true;
            case DUP: push(top()); return true;
            default: return false;
        }
    }

    // None, bools, ints (text, fixed-size and LONG1 / LONG4 of any size) and floats.
    bool number_op() {
        switch (op_) {
            case NONE: push(PyValue()); return true;
            case NEWTRUE: push(PyValue::boolean(true)); return true;
            case NEWFALSE: push(PyValue::boolean(false)); return true;
            case INT: {
                const auto line = read_line();
                if (line == "00" || line == "01")
                    push(PyValue::boolean(line == "01"));
                else
                    push(text_int(line));
                return true;
            }
            case LONG: {
                auto line = read_line();
                if (!line.empty() && line.back() == 'L') line.remove_suffix(1);
                push(text_int(line));
                return true;
            }
            case BININT: push(PyValue::integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4))))); return true;
            case BININT1: push(PyValue::integer(static_cast<std::int64_t>(read_le(1)))); return true;
            case BININT2: push(PyValue::integer(static_cast<std::int64_t>(read_le(2)))); return true;
            case LONG1:
            case LONG4: {
                std::uint64_t n = read_le(op_ == LONG1 ? 1 : 4);
                if (op_ == LONG4 && (n & 0x80000000u)) fail("negative byte count");
                const auto s = read_counted(n);
                push(PyValue::big_integer({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}));
                return true;
            }
            case BINFLOAT: {
                const std::uint8_t* p = take(8);
                std::uint64_t u = 0;
                for (int i = 0; i < 8; ++i) u = (u << 8) | p[i];
                push(PyValue::floating(std::bit_cast<double>(u)));
                return true;
            }
            case FLOAT: {
                const auto line = read_line();
                double d = 0;
                auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), d);
                if (ec != std::errc() || p != line.data() + line.size() || line.empty())
                    fail("bad float text '" + std::string(line.substr(0, 40)) + "'");
                push(PyValue::floating(d));
                return true;
            }
            default: return false;
        }
    }

    // str (Python 2 str opcodes read as latin-1, unicode ones as UTF-8) and bytes.
    bool text_op() {
        switch (op_) {
            case STRING: push(PyValue::str(latin1_to_utf8(unquote(read_line())))); return true;
            case BINSTRING: {
                const auto n = read_le(4);
                if (n & 0x80000000u) fail("negative byte count");
                push(PyValue::str(latin1_to_utf8(read_counted(n))));
                return true;
            }
            case SHORT_BINSTRING: push(PyValue::str(latin1_to_utf8(read_counted(read_le(1))))); return true;
            case UNICODE: push(PyValue::str(raw_unicode_escape(read_line()))); return true;
            case BINUNICODE: push(PyValue::str(utf8_arg(read_counted(read_le(4))))); return true;
            case SHORT_BINUNICODE: push(PyValue::str(utf8_arg(read_counted(read_le(1))))); return true;
            case BINUNICODE8: push(PyValue::str(utf8_arg(read_counted(read_le(8))))); return true;
            case BINBYTES: push(PyValue::bytes(std::string(read_counted(read_le(4))))); return true;
            case SHORT_BINBYTES: push(PyValue::bytes(std::string(read_counted(read_le(1))))); return true;
            case BINBYTES8: push(PyValue::bytes(std::string(read_counted(read_le(8))))); return true;
            default: return false;
        }
    }

    // Tuples, lists, dicts and sets: building them and filling them.
    bool container_op() {
        switch (op_) {
            case EMPTY_TUPLE: push(made(PyValue::tuple({}))); return true;
            case TUPLE1:
            case TUPLE2:
            case TUPLE3: {
                const std::size_t n = op_ - TUPLE1 + 1u;
                std::vector<PyValue> items(n);
                for (std::size_t i = n; i-- > 0;) items[i] = pop();
                push(made(PyValue::tuple(std::move(items))));
                return true;
            }
            case TUPLE: push(made(PyValue::tuple(pop_mark()))); return true;
            case EMPTY_LIST: push(made(PyValue::list())); return true;
            case LIST: push(made(PyValue::list(pop_mark()))); return true;
            case EMPTY_DICT: push(made(PyValue::dict())); return true;
            case DICT: {
                auto kv = pop_mark();
                PyValue d = made(PyValue::dict());
                setitems_on(d, std::move(kv));
                push(std::move(d));
                return true;
            }
            case EMPTY_SET:
            case ADDITEMS:
            case FROZENSET: set_op(); return true;
            default: return fill_op();
        }
    }
    bool fill_op() {
        switch (op_) {
            case APPEND: {
                PyValue v = pop();
                append_to(top(), {std::move(v)});
                return true;
            }
            case APPENDS: {
                auto items = pop_mark();
                append_to(top(), std::move(items));
                return true;
            }
            case SETITEM: {
                PyValue v = pop();
                PyValue k = pop();
                setitems_on(top(), {std::move(k), std::move(v)});
                return true;
            }
            case SETITEMS: {
                auto kv = pop_mark();
                setitems_on(top(), std::move(kv));
                return true;
            }
            default: return false;
        }
    }
    // Protocol 4's sets, read as the builtins.set([items]) / frozenset([items]) protocol 2 writes.
    void set_op() {
        if (op_ == EMPTY_SET) {
            push(made(PyValue::object("builtins", "set", made(PyValue::tuple({made(PyValue::list())})))));
        } else if (op_ == ADDITEMS) {
            auto items = pop_mark();
            const PyValue& s = top();
            if (!is_set(s)) fail("ADDITEMS target is a " + std::string(py_type_name(s.type())) + ", not a set");
            append_to(s.as_object().args.as_tuple()[0], std::move(items));
        } else {
            push(made(PyValue::object("builtins", "frozenset", made(PyValue::tuple({made(PyValue::list(pop_mark()))})))));
        }
    }

    // Globals, the objects REDUCE / NEWOBJ / NEWOBJ_EX build from them, BUILD, persistent ids.
    bool object_op() {
        switch (op_) {
            case GLOBAL: {
                std::string module = utf8_arg(read_line());
                std::string name = utf8_arg(read_line());
                push(make_global(std::move(module), std::move(name)));
                return true;
            }
            case STACK_GLOBAL: {
                PyValue name = pop();
                PyValue module = pop();
                if (name.type() != PyType::Str || module.type() != PyType::Str) fail("module and name must be str");
                push(make_global(module.as_str(), name.as_str()));
                return true;
            }
            case REDUCE:
            case NEWOBJ: {
                PyValue args = pop();
                PyValue cls = pop();
                push(make_object(cls, std::move(args), op_ == NEWOBJ));
                return true;
            }
            case NEWOBJ_EX: {
                PyValue kwargs = pop();
                PyValue args = pop();
                PyValue cls = pop();
                if (kwargs.type() != PyType::Dict) fail("keyword arguments are not a dict");
                PyValue o = make_object(cls, std::move(args), true);
                o.as_object().kwargs = std::move(kwargs);
                push(std::move(o));
                return true;
            }
            case BUILD: {
                PyValue state = pop();
                const PyValue& target = top();
                if (target.type() != PyType::Object) fail("cannot BUILD a " + std::string(py_type_name(target.type())));
                auto& o = target.as_object();
                o.has_state = true;
                o.state = std::move(state);
                return true;
            }
            case BINPERSID: push(made(PyValue::persistent_id(pop()))); return true;
            case PERSID: push(made(PyValue::persistent_id(PyValue::str(utf8_arg(read_line()))))); return true;
            default: return false;
        }
    }

    bool memo_op() {
        switch (op_) {
            case GET: push(get_memo(text_index(read_line()))); return true;
            case BINGET: push(get_memo(read_le(1))); return true;
            case LONG_BINGET: push(get_memo(read_le(4))); return true;
            case PUT: put_memo(text_index(read_line())); return true;
            case BINPUT: put_memo(read_le(1)); return true;
            case LONG_BINPUT: put_memo(read_le(4)); return true;
            case MEMOIZE: put_memo(memo_.size()); return true;
            default: return false;
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

}  // namespace mds::ckpt
