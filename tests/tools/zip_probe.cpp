// zip_probe: drives mds::ckpt::ZipArchive / ZipWriter / TorchZipWriter for
// tests/crosscheck/test_zip_archive.py.
//   zip_probe list FILE [--verify]      prefix, ZIP64 flag and every entry (tab-separated):
//                                       "prefix\t<p>" ("-" when not a torch archive), "zip64\t0|1",
//                                       "entry\tname\theader_offset\tdata_offset\tsize\tcompressed_size\tmethod\tcrc32";
//                                       --verify checks every CRC-32 first
//   zip_probe record FILE NAME OUT      writes the bytes of record NAME ("<prefix>/NAME") to OUT
//   zip_probe repack IN OUT [--force-zip64] [--chunk N]
//                                       copies every record of torch file IN into OUT with TorchZipWriter
//                                       (archive name from OUT), streaming N bytes at a time (default 1 MiB);
//                                       the records TorchZipWriter writes itself are not copied
//   zip_probe big OUT SIZE [--force-zip64]
//                                       a zip with "big/head" ("head"), "big/data" (SIZE pattern bytes,
//                                       streamed: byte i of each 1 MiB block is (i * 131 + (i >> 11)) & 0xff)
//                                       and "big/tail" ("tail"); prints the CRC-32 of big/data
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "mds/ckpt/zip_archive.h"
#include "mds/util/files.h"  // AtomicOutput, for record

using namespace mds::ckpt;

namespace {

int usage() {
    std::fprintf(stderr,
                 "usage: zip_probe list FILE [--verify] | record FILE NAME OUT | repack IN OUT [--force-zip64] [--chunk N] |\n"
                 "       big OUT SIZE [--force-zip64]\n");
    return 2;
}

bool has_flag(int argc, char** argv, int from, const char* flag) {
    for (int i = from; i < argc; ++i)
        if (std::strcmp(argv[i], flag) == 0) return true;
    return false;
}

int list(const std::string& path, bool verify) {
    ZipArchive z(path);
    if (verify) z.verify_all_crcs();
    std::string prefix = "-";
    if (!z.entries().empty() && z.entries()[0].name.find('/') != std::string::npos) prefix = z.prefix();
    std::printf("prefix\t%s\nzip64\t%d\n", prefix.c_str(), z.zip64() ? 1 : 0);
    for (const auto& e : z.entries())
        std::printf("entry\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%u\t%u\n", e.name.c_str(), e.header_offset,
                    e.data_offset, e.size, e.compressed_size, static_cast<unsigned>(e.method), static_cast<unsigned>(e.crc32));
    return 0;
}

int record(const std::string& path, const std::string& name, const std::string& out_path) {
    ZipArchive z(path);
    const auto bytes = z.record(name);
    mds::AtomicOutput out(out_path);
    out.write(bytes.data(), bytes.size());
    out.commit();
    return 0;
}

int repack(const std::string& in_path, const std::string& out_path, bool force_zip64, std::size_t chunk) {
    ZipArchive in(in_path);
    TorchZipWriter w(out_path, TorchZipWriter::archive_name_for(out_path), {.force_zip64 = force_zip64});
    for (const auto& name : in.record_names()) {
        if (TorchZipWriter::is_automatic_record(name)) continue;
        const auto bytes = in.record(name);
        w.begin_record(name, bytes.size());
        for (std::size_t i = 0; i < bytes.size(); i += chunk) w.write(bytes.subspan(i, std::min(chunk, bytes.size() - i)));
        w.end_record();
    }
    w.finish();
    return 0;
}

int big(const std::string& out_path, std::uint64_t size, bool force_zip64) {
    std::vector<std::byte> block(1 << 20);
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = static_cast<std::byte>((i * 131 + (i >> 11)) & 0xff);
    ZipWriter w(out_path, {.force_zip64 = force_zip64});
    w.add_record("big/head", std::string_view("head"));
    w.begin_record("big/data", size);
    std::uint32_t crc = 0;
    for (std::uint64_t done = 0; done < size;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(block.size(), size - done));
        const std::span<const std::byte> piece(block.data(), n);
        crc = crc32(piece, crc);
        w.write(piece);
        done += n;
    }
    w.end_record();
    w.add_record("big/tail", std::string_view("tail"));
    w.finish();
    std::printf("%u\n", static_cast<unsigned>(crc));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) return usage();
    const std::string cmd = argv[1];
    try {
        if (cmd == "list") return list(argv[2], has_flag(argc, argv, 3, "--verify"));
        if (cmd == "record" && argc == 5) return record(argv[2], argv[3], argv[4]);
        if (cmd == "repack" && argc >= 4) {
            std::size_t chunk = 1 << 20;
            for (int i = 4; i + 1 < argc; ++i)
                if (std::strcmp(argv[i], "--chunk") == 0) chunk = std::strtoull(argv[i + 1], nullptr, 10);
            if (chunk == 0) return usage();
            return repack(argv[2], argv[3], has_flag(argc, argv, 4, "--force-zip64"), chunk);
        }
        if (cmd == "big" && argc >= 4) return big(argv[2], std::strtoull(argv[3], nullptr, 10), has_flag(argc, argv, 4, "--force-zip64"));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "zip_probe: error: %s\n", e.what());
        return 1;
    }
    return usage();
}
