// The two content ids the Hugging Face Hub compares (specs/ops.md §2.3): the sha256 of an LFS
// object, and the git blob sha1 of a regular file, sha1("blob <size>\0" + bytes) — what
// `git hash-object` prints. Files are read in 1 MiB blocks; both digests can come from one pass.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mds::hub {

struct FileDigests {
    std::uint64_t size = 0;
    std::string sha256;    // 64 lowercase hex digits
    std::string git_sha1;  // 40 lowercase hex digits
};

// Reads `path` once. Throws mds::Error naming the file when it cannot be read, or when it changes
// size while being read.
FileDigests digest_file(const std::string& path);
// The digests of the first `size` bytes only: a consistent snapshot of a file that is being
// appended to (a log, TensorBoard events). Throws when the file is shorter.
FileDigests digest_file_prefix(const std::string& path, std::uint64_t size);
// The first `size` bytes of a file (throws when it is shorter).
std::string read_file_prefix(const std::string& path, std::uint64_t size);

// The sha256 / MD5 (hex) of bytes [offset, offset + length) of a file: an S3 part's payload hash
// and ETag. Throws when the file is shorter.
std::string sha256_file_range(const std::string& path, std::uint64_t offset, std::uint64_t length);
std::string md5_file_range(const std::string& path, std::uint64_t offset, std::uint64_t length);

std::string sha256_hex(std::string_view bytes);
std::string git_blob_sha1_hex(std::string_view bytes);

}  // namespace mds::hub
