// pickle_probe: drives mds::ckpt::read_pickle / write_pickle for tests/crosscheck/test_pickle.py.
//   pickle_probe dump FILE       prints the canonical dump of the pickle (grammar below), exit 0
//   pickle_probe rewrite IN OUT  reads IN and writes it back with write_pickle to OUT
// On an mds::Error it prints `error: <message>` and exits 1.
// Canonical dump (the test computes the same text in Python from the original objects):
//   None True False | ints in decimal | f:<16 hex digits of the IEEE bits> | s'...' and b'...' with
//   bytes outside 0x20-0x7e, ' and \ as \xHH | (a,b) [a,b] {k:v,...} | G(module:name) |
//   O(module:name,new=0|1,args=<dump>[,kwargs=<dump>][,state=<dump>][,list=[...]][,dict={...}]) | P(<dump>)
#include <bit>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "mds/ckpt/pickle.h"
#include "mds/util/error.h"

using namespace mds::ckpt;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw mds::Error(path + ": cannot open");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void quoted(std::string& out, const std::string& s) {
    char buf[8];
    out += '\'';
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u > 0x7e || c == '\'' || c == '\\') {
            std::snprintf(buf, sizeof buf, "\\x%02x", u);
            out += buf;
        } else {
            out += c;
        }
    }
    out += '\'';
}

void dump(std::string& out, const PyValue& v);

void dump_seq(std::string& out, const std::vector<PyValue>& items, char open, char close) {
    out += open;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += ',';
        dump(out, items[i]);
    }
    out += close;
}

void dump_dict(std::string& out, const PyDict& d) {
    out += '{';
    bool first = true;
    for (const auto& [k, x] : d.items()) {
        if (!first) out += ',';
        first = false;
        dump(out, k);
        out += ':';
        dump(out, x);
    }
    out += '}';
}

void dump(std::string& out, const PyValue& v) {
    switch (v.type()) {
        case PyType::None: out += "None"; break;
        case PyType::Bool: out += v.as_bool() ? "True" : "False"; break;
        case PyType::Int: out += v.int_decimal(); break;
        case PyType::Float: {
            char buf[32];
            std::snprintf(buf, sizeof buf, "f:%016llx", static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(v.as_float())));
            out += buf;
            break;
        }
        case PyType::Str: out += 's'; quoted(out, v.as_str()); break;
        case PyType::Bytes: out += 'b'; quoted(out, v.as_bytes()); break;
        case PyType::Tuple: dump_seq(out, v.as_tuple(), '(', ')'); break;
        case PyType::List: dump_seq(out, v.as_list(), '[', ']'); break;
        case PyType::Dict: dump_dict(out, v.as_dict()); break;
        case PyType::Global: out += "G(" + v.as_global().module + ":" + v.as_global().name + ")"; break;
        case PyType::PersistentId:
            out += "P(";
            dump(out, v.as_persistent_id());
            out += ')';
            break;
        case PyType::Object: {
            const auto& o = v.as_object();
            out += "O(" + o.cls.module + ":" + o.cls.name + (o.newobj ? ",new=1,args=" : ",new=0,args=");
            dump(out, o.args);
            if (!o.kwargs.is_none()) {
                out += ",kwargs=";
                dump(out, o.kwargs);
            }
            if (o.has_state) {
                out += ",state=";
                dump(out, o.state);
            }
            if (!o.list_items.empty()) {
                out += ",list=";
                dump_seq(out, o.list_items, '[', ']');
            }
            if (!o.dict_items.empty()) {
                out += ",dict=";
                dump_dict(out, o.dict_items);
            }
            out += ')';
            break;
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    try {
        if (cmd == "dump" && argc == 3) {
            std::string out;
            dump(out, read_pickle(read_file(argv[2]), argv[2]));
            std::cout << out << "\n";
            return 0;
        }
        if (cmd == "rewrite" && argc == 4) {
            const std::string bytes = write_pickle(read_pickle(read_file(argv[2]), argv[2]));
            std::ofstream(argv[3], std::ios::binary) << bytes;
            return 0;
        }
        std::cerr << "usage: pickle_probe dump FILE | rewrite IN OUT\n";
        return 2;
    } catch (const mds::Error& e) {
        std::cout << "error: " << e.what() << "\n";
        return 1;
    }
}
