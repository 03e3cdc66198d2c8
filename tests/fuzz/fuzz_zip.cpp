// Fuzzes mds::ckpt::ZipArchive (ckpt/zip_archive.h) on arbitrary file images.
// Invariants: only mds::Error escapes; on success every entry's local header and data lie inside
// the file, in order (header < data), and a stored entry's data() is that span; re-packing every
// stored entry with ZipWriter (forced ZIP64 when the input's size is odd) and reading the result
// back gives the same names, bytes, CRC-32s and comment, with the data 64-byte aligned.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "mds/ckpt/zip_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mds::ckpt;
    const std::string path = mds::fuzz::scratch_path("in.zip");
    mds::fuzz::write_bytes(path, data, size);
    mds::fuzz::only_mds_errors([&] {
        ZipArchive z(path);
        const std::uint64_t file_size = z.file_bytes().size();
        std::vector<const ZipEntry*> stored;
        for (const auto& e : z.entries()) {
            MDS_FUZZ_CHECK(e.header_offset + 30 <= e.data_offset);
            MDS_FUZZ_CHECK(e.data_offset <= file_size && e.compressed_size <= file_size - e.data_offset);
            MDS_FUZZ_CHECK(z.find(e.name) == &e);
            if (e.method == 0 && !(e.flags & 1)) {
                const auto d = z.data(e);
                MDS_FUZZ_CHECK(d.data() == z.file_bytes().data() + e.data_offset && d.size() == e.size);
                if (!e.name.empty()) stored.push_back(&e);  // ZipWriter wants names
            } else {
                MDS_FUZZ_CHECK(!mds::fuzz::only_mds_errors([&] { z.data(e); }));
            }
        }
        mds::fuzz::only_mds_errors([&] { z.verify_all_crcs(); });
        mds::fuzz::only_mds_errors([&] {
            for (const auto& name : z.record_names()) MDS_FUZZ_CHECK(z.has_record(name));
        });

        const std::string out = mds::fuzz::scratch_path("out.zip");
        {
            ZipWriter w(out, {.force_zip64 = size % 2 == 1});
            for (const auto* e : stored) w.add_record(e->name, z.data(*e));
            w.finish(std::string_view(reinterpret_cast<const char*>(z.comment().data()), z.comment().size()));
        }
        ZipArchive back(out);
        back.verify_all_crcs();
        MDS_FUZZ_CHECK(back.entries().size() == stored.size());
        MDS_FUZZ_CHECK(back.comment().size() == z.comment().size() &&
                       (z.comment().empty() || std::memcmp(back.comment().data(), z.comment().data(), z.comment().size()) == 0));
        for (std::size_t i = 0; i < stored.size(); ++i) {
            const auto& a = *stored[i];
            const auto& b = back.entries()[i];
            MDS_FUZZ_CHECK(a.name == b.name && a.size == b.size && b.method == 0);
            MDS_FUZZ_CHECK(b.data_offset % ZipWriter::kAlignment == 0);
            MDS_FUZZ_CHECK(b.crc32 == crc32(z.data(a)));
            MDS_FUZZ_CHECK(a.size == 0 || std::memcmp(z.data(a).data(), back.data(b).data(), a.size) == 0);
        }
    });
    return 0;
}
