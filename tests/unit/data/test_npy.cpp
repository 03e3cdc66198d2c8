// .npy writer/reader (specs/data.md §4.6).
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "mds/data/npy.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "test_support.h"

using mds::test::as_bytes;

using namespace mds::data;

TEST_CASE("np.save header for shape (6,) int32") {
    const std::uint64_t shape[1] = {6};
    std::string h = npy_header_bytes(NpyDType::Int32, shape);
    std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }";
    std::string want = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(60, ' ') + "\n";
    CHECK(h.size() == 128);
    CHECK(h == want);
}

TEST_CASE("headers are 128 bytes for every 1-D and 2-D shape and dtype Megatron writes") {
    for (std::uint64_t n : {0ULL, 1ULL, 9ULL, 10ULL, 40721ULL, 4294967296ULL, 1099511627776ULL, 99999999999999999ULL}) {
        for (NpyDType t : {NpyDType::Int32, NpyDType::UInt32, NpyDType::Int64}) {
            const std::uint64_t one[1] = {n}, two[2] = {n, 2};
            CHECK(npy_header_bytes(t, one).size() == 128);
            CHECK(npy_header_bytes(t, two).size() == 128);
        }
    }
    const std::uint64_t two[2] = {40721, 2};
    std::string h = npy_header_bytes(NpyDType::UInt32, two);
    const std::string dict = "{'descr': '<u4', 'fortran_order': False, 'shape': (40721, 2), }";
    CHECK(h.substr(10, dict.size()) == dict);
    CHECK(h.find_first_not_of(' ', 10 + dict.size()) == 127);
    CHECK(h.back() == '\n');
    CHECK(npy_shape_repr(std::vector<std::uint64_t>{}) == "()");
}

TEST_CASE("write and read back") {
    auto dir = mds::test::scratch_dir("npy");
    std::string p = (dir / "a.npy").string();
    std::vector<std::int64_t> v = {5, -1, 1LL << 40};
    write_npy_1d(p, v);
    CHECK(mds::file_size(p) == 128 + 24);
    NpyFile f(p);
    CHECK(f.dtype() == NpyDType::Int64);
    CHECK(f.shape() == std::vector<std::uint64_t>{3});
    CHECK(f.array<std::int64_t>().to_vector() == v);
    CHECK_THROWS_AS(f.array<std::int32_t>(), mds::Error);

    std::vector<std::int32_t> rows = {0, 0, 1, 2, 3, 4};
    const std::uint64_t shape[2] = {3, 2};
    write_npy(p, std::span<const std::int32_t>(rows), shape);
    NpyFile g(p);
    CHECK(g.shape() == std::vector<std::uint64_t>{3, 2});
    CHECK(g.array<std::int32_t>().to_vector() == rows);
    const std::uint64_t wrong[2] = {2, 3};
    CHECK_THROWS_WITH_AS(g.expect(NpyDType::Int32, wrong), doctest::Contains("shape is (3, 2), expected (2, 3)"),
                         mds::Error);
}

namespace {
std::string file_with(const std::string& dict, std::size_t data_bytes, char v1 = 1) {
    std::string h = std::string("\x93NUMPY", 6) + v1 + '\0';
    if (v1 == 1) {
        h += static_cast<char>(dict.size() & 0xFF);
        h += static_cast<char>(dict.size() >> 8);
    } else {
        h += static_cast<char>(dict.size() & 0xFF);
        h += static_cast<char>(dict.size() >> 8);
        h += std::string(2, '\0');
    }
    return h + dict + std::string(data_bytes, '\0');
}
}  // namespace

TEST_CASE("the reader parses the header instead of assuming its length") {
    // numpy < 1.14 aligned to 16 bytes; other writers put keys in another order or quote with ".
    std::string dict = "{\"shape\": (3,), 'fortran_order': False, 'descr': '<u4'}  \n";
    auto h = parse_npy_header(as_bytes(file_with(dict, 12)), "x.npy");
    CHECK(h.dtype == NpyDType::UInt32);
    CHECK(h.shape == std::vector<std::uint64_t>{3});
    CHECK(h.data_offset == 10 + dict.size());
    auto h2 = parse_npy_header(as_bytes(file_with(dict, 12, 2)), "x.npy");  // format 2.0: 4-byte length
    CHECK(h2.data_offset == 12 + dict.size());
}

TEST_CASE("reader errors name the file and the byte offset") {
    std::string ok = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }\n";
    CHECK_THROWS_WITH_AS(parse_npy_header(as_bytes(file_with(ok, 7)), "t.npy"),
                         doctest::Contains("t.npy: byte 68: shape (2,) of int32 needs 76 bytes, the file has 75"),
                         mds::Error);
    CHECK_THROWS_WITH_AS(parse_npy_header(as_bytes(file_with(ok, 9)), "t.npy"), doctest::Contains("trailing bytes"),
                         mds::Error);
    CHECK_THROWS_WITH_AS(parse_npy_header(as_bytes(std::string("PK\x03\x04 hello")), "t.npy"),
                         doctest::Contains("t.npy: byte 0: not a .npy file"), mds::Error);
    std::string f8 = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n";
    CHECK_THROWS_WITH_AS(parse_npy_header(as_bytes(file_with(f8, 16)), "t.npy"), doctest::Contains("dtype '<f8'"),
                         mds::Error);
    std::string be = "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }\n";
    CHECK_THROWS_AS(parse_npy_header(as_bytes(file_with(be, 8)), "t.npy"), mds::Error);
    std::string fortran = "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 2), }\n";
    CHECK_THROWS_WITH_AS(parse_npy_header(as_bytes(file_with(fortran, 16)), "t.npy"), doctest::Contains("Fortran"),
                         mds::Error);
    std::string not_tuple = "{'descr': '<i4', 'fortran_order': False, 'shape': (2), }\n";
    CHECK_THROWS_WITH_AS(parse_npy_header(as_bytes(file_with(not_tuple, 8)), "t.npy"),
                         doctest::Contains("t.npy: byte 63: bad .npy header: a 1-tuple needs a trailing comma"), mds::Error);
    std::string extra = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n";
    CHECK_THROWS_WITH_AS(parse_npy_header(as_bytes(file_with(extra, 8)), "t.npy"), doctest::Contains("'x'"),
                         mds::Error);
    std::string missing = "{'descr': '<i4', 'shape': (2,)}\n";
    CHECK_THROWS_AS(parse_npy_header(as_bytes(file_with(missing, 8)), "t.npy"), mds::Error);
    std::string trunc = file_with(ok, 8).substr(0, 40);
    CHECK_THROWS_WITH_AS(parse_npy_header(as_bytes(trunc), "t.npy"), doctest::Contains("runs past the end"),
                         mds::Error);
}
