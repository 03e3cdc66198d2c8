// sha256 and git blob sha1 over OpenSSL's EVP digests (hash.h).
#include "mds/hub/hash.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <vector>

#include "mds/util/error.h"
#include "mds/util/files.h"

namespace mds::hub {
namespace {

struct Digest {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
    explicit Digest(const EVP_MD* md) {
        if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1) throw Error("OpenSSL: cannot start a digest");
    }
    void update(const void* p, std::size_t n) {
        if (n && EVP_DigestUpdate(ctx.get(), p, n) != 1) throw Error("OpenSSL: digest update failed");
    }
    std::string hex() {
        unsigned char out[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (EVP_DigestFinal_ex(ctx.get(), out, &len) != 1) throw Error("OpenSSL: digest final failed");
        static const char* k = "0123456789abcdef";
        std::string s;
        for (unsigned int i = 0; i < len; ++i) {
            s.push_back(k[out[i] >> 4]);
            s.push_back(k[out[i] & 15]);
        }
        return s;
    }
};

std::string blob_header(std::uint64_t size) { return "blob " + std::to_string(size) + std::string(1, '\0'); }

}  // namespace

std::string sha256_hex(std::string_view bytes) {
    Digest d(EVP_sha256());
    d.update(bytes.data(), bytes.size());
    return d.hex();
}

std::string git_blob_sha1_hex(std::string_view bytes) {
    Digest d(EVP_sha1());
    const std::string h = blob_header(bytes.size());
    d.update(h.data(), h.size());
    d.update(bytes.data(), bytes.size());
    return d.hex();
}

namespace {

// Digests of the first `limit` bytes (all of the file when `limit` is none).
FileDigests digest(const std::string& path, std::optional<std::uint64_t> limit) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(errno_message("cannot read " + path, errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st{};
    if (::fstat(fd, &st) != 0) throw Error(errno_message("cannot stat " + path, errno));
    if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
    FileDigests out;
    out.size = limit ? *limit : static_cast<std::uint64_t>(st.st_size);
    if (limit && static_cast<std::uint64_t>(st.st_size) < *limit)
        throw Error(path + " is shorter (" + std::to_string(st.st_size) + " bytes) than the " + std::to_string(*limit) +
                    " bytes to hash: it was truncated or replaced");
    Digest sha256(EVP_sha256()), sha1(EVP_sha1());
    const std::string h = blob_header(out.size);
    sha1.update(h.data(), h.size());
    std::vector<char> buf(1 << 20);
    std::uint64_t done = 0;
    for (;;) {
        const std::size_t want = limit ? static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), out.size - done)) : buf.size();
        if (want == 0) break;
        const ssize_t r = ::read(fd, buf.data(), want);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw Error(errno_message("cannot read " + path + " at byte " + std::to_string(done), errno));
        if (r == 0) break;
        sha256.update(buf.data(), static_cast<std::size_t>(r));
        sha1.update(buf.data(), static_cast<std::size_t>(r));
        done += static_cast<std::uint64_t>(r);
        if (done > out.size) break;
    }
    if (done != out.size)
        throw Error(path + " changed size while being read (" + std::to_string(out.size) + " bytes at the start, " +
                    std::to_string(done) + (done > out.size ? "+" : "") + " read); it is still being written");
    out.sha256 = sha256.hex();
    out.git_sha1 = sha1.hex();
    return out;
}

// One digest of bytes [offset, offset + length).
std::string digest_range(const std::string& path, std::uint64_t offset, std::uint64_t length, const EVP_MD* md) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(errno_message("cannot read " + path, errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    Digest d(md);
    std::vector<char> buf(1 << 20);
    std::uint64_t done = 0;
    while (done < length) {
        const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), length - done));
        const ssize_t r = ::pread(fd, buf.data(), want, static_cast<off_t>(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw Error(errno_message("cannot read " + path + " at byte " + std::to_string(offset + done), errno));
        if (r == 0)
            throw Error(path + " is shorter (" + std::to_string(offset + done) + " bytes) than when it was hashed (" +
                        std::to_string(offset + length) + "): it was truncated or replaced");
        d.update(buf.data(), static_cast<std::size_t>(r));
        done += static_cast<std::uint64_t>(r);
    }
    return d.hex();
}

}  // namespace

std::string sha256_file_range(const std::string& path, std::uint64_t offset, std::uint64_t length) {
    return digest_range(path, offset, length, EVP_sha256());
}

std::string md5_file_range(const std::string& path, std::uint64_t offset, std::uint64_t length) {
    return digest_range(path, offset, length, EVP_md5());
}

FileDigests digest_file(const std::string& path) { return digest(path, std::nullopt); }

FileDigests digest_file_prefix(const std::string& path, std::uint64_t size) { return digest(path, size); }

std::string read_file_prefix(const std::string& path, std::uint64_t size) {
    // Only the prefix is read: the file may have grown (a live log) far past what was hashed.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(errno_message("cannot read " + path, errno));
    std::string s(static_cast<std::size_t>(size), '\0');
    std::size_t got = 0;
    while (got < s.size()) {
        const ssize_t r = ::pread(fd, s.data() + got, s.size() - got, static_cast<off_t>(got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            const int err = errno;
            ::close(fd);
            throw Error(errno_message("cannot read " + path, err));
        }
        if (r == 0) break;
        got += static_cast<std::size_t>(r);
    }
    ::close(fd);
    if (got < s.size())
        throw Error(path + " is shorter (" + std::to_string(got) + " bytes) than when it was hashed (" +
                    std::to_string(size) + "): it was truncated or replaced");
    return s;
}

}  // namespace mds::hub
