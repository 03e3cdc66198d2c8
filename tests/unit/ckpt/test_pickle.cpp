#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "mds/ckpt/pickle.h"
#include "mds/util/error.h"

using namespace mds::ckpt;
using namespace std::string_literals;

namespace {

PyValue rd(const std::string& bytes) { return read_pickle(std::string_view(bytes), "t.pkl"); }

std::string pickle_error_of(const std::string& bytes) {
    try {
        rd(bytes);
    } catch (const mds::Error& e) {
        return e.what();
    }
    return "";
}

bool roundtrips(const PyValue& v) {
    const std::string a = write_pickle(v);
    const PyValue back = rd(a);
    return structurally_equal(back, v) && write_pickle(back) == a;
}

}  // namespace

TEST_CASE("pickle: scalars of every opcode") {
    CHECK(rd("\x80\x02N."s).is_none());
    CHECK(rd("\x88."s).as_bool());
    CHECK_FALSE(rd("\x89."s).as_bool());
    CHECK(rd("I01\n."s).as_bool());
    CHECK(rd("I-42\n."s).as_int() == -42);
    CHECK(rd("L123456789012345678901234567890L\n."s).int_decimal() == "123456789012345678901234567890");
    CHECK(rd("J\xff\xff\xff\xff."s).as_int() == -1);
    CHECK(rd("K\xff."s).as_int() == 255);
    CHECK(rd("M\x01\x02."s).as_int() == 0x0201);
    CHECK(rd("\x8a\x00."s).as_int() == 0);
    // random.getstate() words >= 2^31 come as LONG1 with 5 bytes
    CHECK(rd("\x8a\x05\xff\xff\xff\xff\x00."s).as_int() == 0xffffffffLL);
    const PyValue big = rd("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."s);
    CHECK_FALSE(big.int_fits_int64());
    CHECK(big.int_decimal() == "18446744073709551616");
    CHECK_THROWS_AS(big.as_int(), mds::Error);
    CHECK(rd("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xff."s).int_decimal() == "-18446744073709551616");
    CHECK(rd("\x8b\x02\x00\x00\x00\x00\x80."s).as_int() == -32768);
    CHECK(rd("G\x3f\xf8\x00\x00\x00\x00\x00\x00."s).as_float() == 1.5);
    CHECK(rd("F-2.5\n."s).as_float() == -2.5);
    CHECK(std::isinf(rd("Finf\n."s).as_float()));
    CHECK(rd("S'a\\'b\\x41\\n'\n."s).as_str() == "a'bA\n");
    CHECK(rd("T\x02\x00\x00\x00\xe9x."s).as_str() == "\xc3\xa9x");  // latin-1 -> UTF-8
    CHECK(rd("U\x01z."s).as_str() == "z");
    CHECK(rd("Va\\u00e9\n."s).as_str() == "a\xc3\xa9");
    CHECK(rd("X\x02\x00\x00\x00\xc3\xa9."s).as_str() == "\xc3\xa9");
    CHECK(rd("\x8c\x01q."s).as_str() == "q");
    CHECK(rd("\x8d\x01\x00\x00\x00\x00\x00\x00\x00q."s).as_str() == "q");
    CHECK(rd("C\x03\x00\x01\x02."s).as_bytes() == "\x00\x01\x02"s);
    CHECK(rd("B\x01\x00\x00\x00z."s).as_bytes() == "z");
    CHECK(rd("\x8e\x01\x00\x00\x00\x00\x00\x00\x00z."s).as_bytes() == "z");
}

TEST_CASE("pickle: containers, memo sharing and mutation after memoization") {
    // [1, 2] memoized, fetched back, then appended to: both references see the append.
    const PyValue t = rd("\x80\x02]q\x00(K\x01K\x02" "eh\x00\x86q\x01h\x00K\x03" "a0."s);
    REQUIRE(t.type() == PyType::Tuple);
    REQUIRE(t.as_tuple().size() == 2);
    CHECK(t.as_tuple()[0].is_same(t.as_tuple()[1]));
    CHECK(t.as_tuple()[0].as_list().size() == 3);
    // dict memoized then filled with SETITEMS
    const PyValue d = rd("\x80\x02}q\x00(X\x01\x00\x00\x00" "aK\x01X\x01\x00\x00\x00" "b(K\x01K\x02K\x03K\x04tu."s);
    CHECK(d.get("a").as_int() == 1);
    CHECK(d.get("b").as_tuple().size() == 4);
    CHECK_THROWS_AS(d.get("c"), mds::Error);
    // duplicate key: value replaced in place, order kept
    const PyValue dup = rd("(K\x01K\x02K\x03K\x04K\x01K\x05" "d."s);
    REQUIRE(dup.as_dict().size() == 2);
    CHECK(dup.as_dict().items()[0].second.as_int() == 5);
    CHECK(rd("(K\x01K\x02l."s).as_list().size() == 2);
    CHECK(rd("(K\x01K\x02K\x03K\x04t."s).as_tuple().size() == 4);
    CHECK(rd("K\x01K\x02K\x03\x87."s).as_tuple().size() == 3);
    CHECK(rd("K\x01\x85."s).repr() == "(1,)");
    CHECK(rd("K\x01" "2\x86."s).repr() == "(1, 1)");
    CHECK(rd("K\x01(0."s).as_int() == 1);  // POP with an empty frame pops the MARK
    CHECK(rd("K\x01(K\x02K\x03" "1."s).as_int() == 1);
    CHECK(rd("K\x07\x94\x94h\x01."s).as_int() == 7);  // MEMOIZE numbers by memo size
    CHECK(rd("K\x07p12\ng12\n."s).as_int() == 7);
    CHECK(rd("K\x07r\x00\x01\x00\x00j\x00\x01\x00\x00."s).as_int() == 7);
    CHECK(rd("\x95\x03\x00\x00\x00\x00\x00\x00\x00K\x01."s).as_int() == 1);
}

TEST_CASE("pickle: a float's repr is Python's") {
    // Python 3.11's repr() of each (fixed notation for decimal exponents in [-4, 16), else d.ddde±XX).
    const std::pair<double, const char*> cases[] = {
        {0.0001, "0.0001"}, {1e-05, "1e-05"}, {0.001, "0.001"}, {100000.0, "100000.0"}, {1e+16, "1e+16"},
        {1000000000000000.0, "1000000000000000.0"}, {123456789.123, "123456789.123"}, {0.1, "0.1"},
        {0.3333333333333333, "0.3333333333333333"}, {-0.0, "-0.0"}, {5e-324, "5e-324"},
        {1.7976931348623157e+308, "1.7976931348623157e+308"}, {2.5e-07, "2.5e-07"}, {-2.5e+300, "-2.5e+300"},
        {1e+22, "1e+22"}, {1.2345678901234568e+16, "1.2345678901234568e+16"}, {0.5, "0.5"}, {3.0, "3.0"},
        {0.00030000000000000003, "0.00030000000000000003"}, {6e-05, "6e-05"}};
    for (const auto& c : cases) {  // no structured binding: clang 14's INFO (a lambda) cannot capture one
        INFO(c.second);
        CHECK(PyValue::floating(c.first).repr() == c.second);
    }
}

TEST_CASE("pickle: globals and objects as Megatron-DeepSpeed pickles them") {
    // argparse.Namespace(lr=0.5): GLOBAL, EMPTY_TUPLE, NEWOBJ, dict, BUILD
    const PyValue ns = rd("\x80\x02\x63\x61rgparse\nNamespace\nq\x00)\x81q\x01}q\x02X\x02\x00\x00\x00lrG?\xe0\x00\x00\x00\x00\x00\x00sb."s);
    CHECK(ns.is_object("argparse", "Namespace"));
    CHECK(ns.as_object().newobj);
    CHECK(ns.namespace_attributes().find("lr")->as_float() == 0.5);
    CHECK(ns.repr() == "argparse.Namespace(lr=0.5)");
    CHECK(roundtrips(ns));
    // OrderedDict: REDUCE () then SETITEMS; __builtin__ set; torch.bfloat16 as a bare global
    const PyValue od = rd("\x63\x63ollections\nOrderedDict\n)R(X\x01\x00\x00\x00" "a\x63torch\nbfloat16\nX\x01\x00\x00\x00" "bc__builtin__\nset\n]\x85Ru."s);
    CHECK(od.is_object("collections", "OrderedDict"));
    REQUIRE(od.ordered_dict_items().size() == 2);
    CHECK(od.ordered_dict_items().find("a")->is_global("torch", "bfloat16"));
    CHECK(od.ordered_dict_items().find("b")->is_object("builtins", "set"));
    CHECK(rd("}."s).ordered_dict_items().empty());
    CHECK_THROWS_AS(rd("N."s).ordered_dict_items(), mds::Error);
    CHECK(roundtrips(od));
    // protocol 2 bytes: _codecs.encode(u'\xff\x00', 'latin1') and bytes()
    const PyValue b = rd("\x63_codecs\nencode\nX\x03\x00\x00\x00\xc3\xbf\x00X\x06\x00\x00\x00latin1\x86R."s);
    CHECK(b.as_bytes() == "\xff\x00"s);
    CHECK(rd("c__builtin__\nbytes\n)R."s).as_bytes().empty());
    // protocol 4: STACK_GLOBAL, EMPTY_SET + ADDITEMS, FROZENSET, NEWOBJ_EX
    const PyValue s = rd("\x8f(K\x01K\x02\x90."s);
    CHECK(s.is_object("builtins", "set"));
    CHECK(s.repr() == "builtins.set([1, 2])");
    CHECK(rd("(K\x01\x91."s).is_object("builtins", "frozenset"));
    CHECK(rd("\x8c\x01m\x8c\x01n\x93."s).is_global("m", "n"));
    const PyValue ex = rd("\x8c\x01m\x8c\x01n\x93)}\x92."s);
    CHECK(ex.as_object().kwargs.type() == PyType::Dict);
    CHECK(roundtrips(ex));
    // torch storage persistent id
    const PyValue pid = rd("(X\x07\x00\x00\x00storage\x63torch\nFloatStorage\nX\x01\x00\x00\x00" "0X\x06\x00\x00\x00" "cuda:3K\x0ctQ."s);
    const auto& p = pid.as_persistent_id().as_tuple();
    CHECK(p[1].is_global("torch", "FloatStorage"));
    CHECK(p[3].as_str() == "cuda:3");
    CHECK(roundtrips(pid));
}

TEST_CASE("pickle: writer emits protocol 2 as CPython does") {
    PyValue d = PyValue::dict();
    d.as_dict().set("a", PyValue::integer(1));
    // CPython: pickle.dumps({'a': 1}, 2)
    CHECK(write_pickle(d) == "\x80\x02}q\x00X\x01\x00\x00\x00" "aq\x01K\x01s."s);
    PyValue l = PyValue::list({PyValue::integer(-1), PyValue::integer(70000), PyValue::integer(0xffffffffLL), PyValue::integer(300)});
    // CPython: pickle.dumps([-1, 70000, 2**32-1, 300], 2)
    CHECK(write_pickle(l) == "\x80\x02]q\x00(J\xff\xff\xff\xffJp\x11\x01\x00\x8a\x05\xff\xff\xff\xff\x00M,\x01" "e."s);
    // a repeated global is memoized once
    PyValue t = PyValue::tuple({PyValue::global("torch", "bfloat16"), PyValue::global("torch", "bfloat16")});
    CHECK(write_pickle(t) == "\x80\x02\x63torch\nbfloat16\nq\x00h\x00\x86q\x01."s);
    CHECK(write_pickle(PyValue::bytes("\xff")) ==
          "\x80\x02\x63_codecs\nencode\nq\x00X\x02\x00\x00\x00\xc3\xbfq\x01X\x06\x00\x00\x00latin1q\x02\x86q\x03Rq\x04."s);
    CHECK(write_pickle(PyValue::object("builtins", "set", PyValue::tuple({PyValue::list()}))) ==
          "\x80\x02\x63__builtin__\nset\nq\x00]q\x01\x85q\x02Rq\x03."s);
    std::vector<PyValue> many;
    for (int i = 0; i < 2500; ++i) many.push_back(PyValue::integer(i));
    CHECK(roundtrips(PyValue::list(many)));
    CHECK(roundtrips(PyValue::floating(-0.0)));
    CHECK(roundtrips(PyValue::floating(std::nan(""))));
    const std::uint8_t huge[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0x80};
    CHECK(roundtrips(PyValue::big_integer(huge)));
}

TEST_CASE("pickle: malformed input names the file, offset and opcode") {
    CHECK(pickle_error_of("\x80\x02K"s) == "t.pkl: pickle offset 2, opcode 0x4b BININT1: needs 1 bytes of argument, 0 left");
    CHECK(pickle_error_of("\x80\x02N"s) == "t.pkl: pickle offset 3: data ends without STOP");
    CHECK(pickle_error_of("\xfe."s) == "t.pkl: pickle offset 0, opcode 0xfe unknown: unknown opcode");
    CHECK(pickle_error_of("a."s).find("opcode 0x61 APPEND: stack underflow") != std::string::npos);
    CHECK(pickle_error_of("K\x01K\x02" "a."s).find("cannot append to a int") != std::string::npos);
    CHECK(pickle_error_of("K\x01t."s).find("no MARK") != std::string::npos);
    CHECK(pickle_error_of("h\x05."s).find("memo key 5 is not defined") != std::string::npos);
    CHECK(pickle_error_of("K\x01(\x85."s).find("nothing above the MARK") != std::string::npos);
    CHECK(pickle_error_of("K\x01)R."s).find("not a GLOBAL") != std::string::npos);
    CHECK(pickle_error_of("X\x05\x00\x00\x00" "ab."s).find("length 5 exceeds") != std::string::npos);
    CHECK(pickle_error_of("X\x01\x00\x00\x00\xff."s).find("UTF-8") != std::string::npos);
    CHECK(pickle_error_of("\x80\x09."s).find("unsupported pickle protocol 9") != std::string::npos);
    CHECK(pickle_error_of("i\n\n."s).find("not supported") != std::string::npos);
    CHECK(pickle_error_of("Iabc\n."s).find("bad int text") != std::string::npos);
    CHECK(pickle_error_of("S'abc\n."s).find("not quoted") != std::string::npos);
    CHECK(pickle_error_of("}K\x01" "b."s).find("cannot BUILD a dict") != std::string::npos);
    CHECK(pickle_error_of("(K\x01K\x02K\x03" "d."s).find("odd number") != std::string::npos);
    // a list that contains itself
    CHECK(pickle_error_of("]q\x00h\x00" "a."s).find("reference cycle") != std::string::npos);
    // nesting deeper than the limit, and a garbage cycle left in the memo is not leaked
    std::string deep = ")";
    for (int i = 0; i < 1500; ++i) deep += "\x85";
    CHECK(pickle_error_of(deep + ".").find("nest deeper than 1000") != std::string::npos);
    CHECK(rd("]q\x00h\x00" "a0N."s).is_none());
}

TEST_CASE("pickle: the reader's opcode groups (stack, numbers, text, containers, objects, memo)") {
    // stack and framing: FRAME, DUP, POP (also of an empty MARK), POP_MARK
    CHECK(rd("\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00K\x07."s).as_int() == 7);
    const PyValue dup = rd("K\x05" "2\x86."s);
    CHECK(dup.as_tuple().size() == 2);
    CHECK(dup.as_tuple()[1].as_int() == 5);
    CHECK(rd("K\x01K\x02" "0."s).as_int() == 1);
    CHECK(rd("K\x01(0."s).as_int() == 1);
    CHECK(rd("K\x01(K\x02K\x03" "1."s).as_int() == 1);
    // protocol 4 sets read as protocol 2 writes them: builtins.set([items]), builtins.frozenset([items])
    const PyValue set = rd("\x80\x04\x8f(K\x01K\x02\x90."s);
    REQUIRE(set.is_object("builtins", "set"));
    CHECK(set.as_object().args.as_tuple()[0].as_list().size() == 2);
    const PyValue frozen = rd("(K\x03\x91."s);
    REQUIRE(frozen.is_object("builtins", "frozenset"));
    CHECK(frozen.as_object().args.as_tuple()[0].as_list()[0].as_int() == 3);
    // objects: NEWOBJ then BUILD, NEWOBJ_EX with keyword arguments, STACK_GLOBAL, persistent ids
    const PyValue ns = rd("\x80\x02" "cargparse\nNamespace\n)\x81}(X\x01\x00\x00\x00" "aK\x01" "ub."s);
    CHECK(ns.as_object().newobj);
    CHECK(ns.namespace_attributes().find("a")->as_int() == 1);
    const PyValue ex = rd("cm\nC\n)}\x92."s);
    CHECK(ex.as_object().newobj);
    CHECK(ex.as_object().kwargs.type() == PyType::Dict);
    CHECK(rd("\x8c\x05torch\x8c\x08" "bfloat16\x93."s).is_global("torch", "bfloat16"));
    CHECK(rd("X\x01\x00\x00\x00kQ."s).as_persistent_id().as_str() == "k");
    CHECK(rd("Pk\n."s).as_persistent_id().as_str() == "k");
    // memo: MEMOIZE numbers entries in order, PUT / GET take text indices; both give the same node
    const PyValue memo = rd("\x80\x04]\x94h\x00\x86."s);
    CHECK(memo.as_tuple()[0].is_same(memo.as_tuple()[1]));
    const PyValue text_memo = rd("]p0\ng0\n\x86."s);
    CHECK(text_memo.as_tuple()[0].is_same(text_memo.as_tuple()[1]));
    // each group's errors keep the offset and opcode of the instruction
    CHECK(pickle_error_of("\x95\xff\x00\x00\x00\x00\x00\x00\x00K\x07."s) ==
          "t.pkl: pickle offset 0, opcode 0x95 FRAME: frame of 255 bytes exceeds the 3 left");
    CHECK(pickle_error_of("](K\x01\x90."s) == "t.pkl: pickle offset 4, opcode 0x90 ADDITEMS: ADDITEMS target is a list, not a set");
    CHECK(pickle_error_of("cm\nC\n)K\x01\x92."s) == "t.pkl: pickle offset 8, opcode 0x92 NEWOBJ_EX: keyword arguments are not a dict");
    CHECK(pickle_error_of("K\x01K\x02\x93."s) == "t.pkl: pickle offset 4, opcode 0x93 STACK_GLOBAL: module and name must be str");
    CHECK(pickle_error_of("K\x01\x82\x01."s) == "t.pkl: pickle offset 2, opcode 0x82 EXT1: opcode not supported in checkpoints");
    CHECK(pickle_error_of("\x8b\x00\x00\x00\x80."s) == "t.pkl: pickle offset 0, opcode 0x8b LONG4: negative byte count");
}
