// Private to the pickle files (pickle_codec.cpp, pickle_value.cpp, pickle_reader.cpp,
// pickle_writer.cpp): access to PyValue's node, the int and text codecs they share, the Python 2/3
// spellings of builtins, and the opcodes of CPython's Lib/pickle.py.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mds/ckpt/pickle.h"

namespace mds::ckpt {

// Grants the reader and the helpers below access to PyValue's node.
class PickleReaderAccess {
public:
    static const void* node(const PyValue& v) { return v.node_.get(); }
    template <class T>
    static T& get(const PyValue& v) { return *static_cast<T*>(v.node_.get()); }
};

namespace pickle_detail {

using Access = PickleReaderAccess;
using Bytes = std::vector<std::uint8_t>;
struct PidNode {
    PyValue pid;
};

// Ints of any size: minimal little-endian two's complement (CPython's pickle.encode_long).
void trim_twos_complement(Bytes& b);
Bytes int64_bytes(std::int64_t v);
bool is_negative(const Bytes& b);
std::string bytes_decimal(Bytes mag);  // mag: two's complement, any sign
// Decimal text (optional sign) to two's-complement bytes; false when it is not a decimal.
bool decimal_bytes(std::string_view s, Bytes& out);

// Text.
void append_utf8(std::string& out, std::uint32_t cp);
std::string latin1_to_utf8(std::string_view s);
// Decodes UTF-8 (surrogates allowed, as CPython's 'surrogatepass' does) into code points; false
// when malformed.
bool decode_utf8(std::string_view s, std::vector<std::uint32_t>* cps);
// A str whose code points are all below 256, as the latin-1 bytes it encodes to.
bool utf8_to_latin1(std::string_view s, std::string& out);

// Python 3 spelling of a global, as CPython's Unpickler with fix_imports reads it.
PyGlobal normalize_global(std::string module, std::string name);
// How protocol 2 spells a global: __builtin__.long for builtins.int, copy_reg for copyreg.
std::pair<std::string, std::string> python2_global(const std::string& module, const std::string& name);

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

}  // namespace pickle_detail
}  // namespace mds::ckpt
