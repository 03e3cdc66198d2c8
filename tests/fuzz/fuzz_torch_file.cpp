// Fuzzes mds::ckpt::TorchFile (ckpt/torch_file.h) and the reading of every tensor of it, as the
// checkpoint tools and mds-train do: open (zip, CRC-32 of data.pkl, pickle), resolve each
// _rebuild_tensor_v2 found by map_tensors, read its data.
// Invariants: only mds::Error escapes; a resolved tensor's storage lies inside the file and its
// view inside the storage; its data reads (gather(): numel x dtype size bytes; bytes() the same for
// a contiguous one) exactly when the storage's CRC-32 matches the zip's, and always with
// verification off; tensors_in_storage() finds the tensor's storage; a file that opens unverified
// but fails verified fails on data.pkl's CRC-32.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "mds/ckpt/torch_file.h"

namespace {

constexpr std::int64_t kMaxGatherBytes = 8 << 20;  // a broadcast view may claim far more than the file
constexpr std::size_t kMaxTensors = 64;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::ckpt;
    const std::string path = mds::fuzz::scratch_path("in.pt");
    mds::fuzz::write_bytes(path, data, size);
    mds::fuzz::only_mds_errors([&] {
        const TorchFile loose(path, false);
        const bool verified_opens = mds::fuzz::only_mds_errors([&] { TorchFile strict(path); });
        if (!verified_opens) {
            const auto& pkl = loose.zip().record_entry("data.pkl");
            MDS_FUZZ_CHECK(crc32(loose.zip().data(pkl)) != pkl.crc32);
            return;
        }
        const TorchFile f(path);
        MDS_FUZZ_CHECK(f.verifies() && !loose.verifies());
        std::vector<PyValue> tensors;
        map_tensors(f.root(), [&](const PyValue& v, const std::string&) {
            if (tensors.size() < kMaxTensors) tensors.push_back(v);
            return v;
        });
        const auto file = f.zip().file_bytes();
        for (const auto& v : tensors) {
            mds::fuzz::only_mds_errors([&] {
                const TorchTensor t = f.tensor(v, "t");
                MDS_FUZZ_CHECK(t.storage.data() >= file.data() && t.storage.data() + t.storage.size() <= file.data() + file.size());
                const auto esize = static_cast<std::int64_t>(dtype_size(t.dtype));
                MDS_FUZZ_CHECK(t.storage.size() % static_cast<std::size_t>(esize) == 0);
                const auto found = f.tensors_in_storage(t.storage_key);
                MDS_FUZZ_CHECK(!found.empty());
                const std::int64_t nbytes = t.numel() * esize;
                if (nbytes > kMaxGatherBytes) return;
                const bool crc_ok = crc32(t.storage) == t.storage_crc32;
                std::vector<std::byte> got;
                const bool read = mds::fuzz::only_mds_errors([&] { got = t.gather(); });
                MDS_FUZZ_CHECK(read == crc_ok);
                if (read) {
                    MDS_FUZZ_CHECK(static_cast<std::int64_t>(got.size()) == nbytes);
                    if (t.contiguous()) {
                        const auto b = t.bytes();
                        MDS_FUZZ_CHECK(b.size() == got.size() && (b.empty() || std::memcmp(b.data(), got.data(), b.size()) == 0));
                    }
                }
                // Unverified, the same view reads whatever the bytes are.
                const TorchTensor u = loose.tensor(v, "t");
                MDS_FUZZ_CHECK(u.storage_verified == nullptr);
                std::vector<std::byte> raw;
                MDS_FUZZ_CHECK(mds::fuzz::only_mds_errors([&] { raw = u.gather(); }));
                MDS_FUZZ_CHECK(!read || raw == got);
            });
        }
    });
    return 0;
}
