// Fuzzes mds::ckpt::read_pickle / write_pickle (ckpt/pickle.h) on arbitrary bytes.
// Invariants: only mds::Error escapes; on success, write_pickle of the result reads back to a
// structurally equal value (structurally_equal: same types and contents, floats bit for bit, dict
// items in order), and writing is stable: write(read(write(x))) == write(x).
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "mds/ckpt/pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::ckpt;
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    PyValue v;
    if (!mds::fuzz::only_mds_errors([&] { v = read_pickle(in, "fuzz.pkl"); })) return 0;
    (void)v.repr(4096);
    std::string a;
    if (!mds::fuzz::only_mds_errors([&] { a = write_pickle(v); })) {
        std::fprintf(stderr, "write_pickle refused a value read_pickle accepted\n");
        std::abort();
    }
    PyValue back;
    MDS_FUZZ_CHECK(mds::fuzz::only_mds_errors([&] { back = read_pickle(a, "rewritten.pkl"); }));
    MDS_FUZZ_CHECK(structurally_equal(v, back));
    MDS_FUZZ_CHECK(write_pickle(back) == a);
    return 0;
}
