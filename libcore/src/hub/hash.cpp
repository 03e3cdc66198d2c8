// sha256 and git blob sha1 over OpenSSL's EVP digests (hash.h).
#include "mds/hub/hash.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "mds/util/error.h"

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

FileDigests digest_file(const std::string& path) {
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
    out.size = static_cast<std::uint64_t>(st.st_size);
    Digest sha256(EVP_sha256()), sha1(EVP_sha1());
    const std::string h = blob_header(out.size);
    sha1.update(h.data(), h.size());
    std::vector<char> buf(1 << 20);
    std::uint64_t done = 0;
    for (;;) {
        const ssize_t r = ::read(fd, buf.data(), buf.size());
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

}  // namespace mds::hub
