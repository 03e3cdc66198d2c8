// Fuzzes mds::ckpt::SafetensorsFile (ckpt/safetensors.h) on arbitrary file images.
// Invariants: only mds::Error escapes; on success every tensor's bytes lie inside the file, its
// byte count is numel × dtype size, tensors are contiguous in file order and cover the data, and
// writing them back with write_safetensors then reading again gives the same names, dtypes,
// shapes, bytes and metadata.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "mds/ckpt/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::ckpt;
    const std::string path = mds::fuzz::scratch_path("in.safetensors");
    mds::fuzz::write_bytes(path, data, size);
    mds::fuzz::only_mds_errors([&] {
        SafetensorsFile f(path);
        std::vector<TensorToWrite> back;
        const std::byte* expected = nullptr;
        for (const auto& t : f.tensors()) {
            MDS_FUZZ_CHECK(t.bytes.size() == static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype));
            if (expected) MDS_FUZZ_CHECK(t.bytes.data() == expected);
            expected = t.bytes.data() + t.bytes.size();
            back.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
        }
        const std::string out = mds::fuzz::scratch_path("out.safetensors");
        write_safetensors(out, back, f.metadata());
        SafetensorsFile g(out);
        MDS_FUZZ_CHECK(g.tensors().size() == f.tensors().size());
        MDS_FUZZ_CHECK(g.metadata() == f.metadata());
        for (std::size_t i = 0; i < g.tensors().size(); ++i) {
            const auto& a = f.tensors()[i];
            const auto& b = g.tensors()[i];
            MDS_FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape);
            MDS_FUZZ_CHECK(a.bytes.size() == b.bytes.size());
            MDS_FUZZ_CHECK(a.bytes.empty() || std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0);
        }
    });
    return 0;
}
