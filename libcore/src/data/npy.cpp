#include "mds/data/npy.h"

#include <algorithm>  // std::equal
#include <bit>        // std::endian
#include <cstring>
#include <limits>

#include "mds/util/error.h"

namespace mds::data {

static_assert(std::endian::native == std::endian::little, "the .npy writer emits the host's bytes as '<' (little-endian)");

namespace {
constexpr char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t kArrayAlign = 64;       // numpy >= 1.14 (16 before)
constexpr std::size_t kGrowthAxisDigits = 21;  // numpy >= 1.24 GROWTH_AXIS_MAX_DIGITS
}  // namespace

const char* npy_descr(NpyDType t) {
    switch (t) {
        case NpyDType::Int32: return "<i4";
        case NpyDType::UInt32: return "<u4";
        case NpyDType::Int64: return "<i8";
    }
    return "?";
}

const char* npy_dtype_name(NpyDType t) {
    switch (t) {
        case NpyDType::Int32: return "int32";
        case NpyDType::UInt32: return "uint32";
        case NpyDType::Int64: return "int64";
    }
    return "?";
}

std::size_t npy_itemsize(NpyDType t) { return t == NpyDType::Int64 ? 8 : 4; }

std::string npy_shape_repr(std::span<const std::uint64_t> shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    if (shape.size() == 1) s += ',';
    return s + ")";
}

std::string npy_header_bytes(NpyDType dtype, std::span<const std::uint64_t> shape) {
    // numpy/lib/format.py _write_array_header: keys sorted, repr of each value, ", " after each.
    std::string dict = "{'descr': '";
    dict += npy_descr(dtype);
    dict += "', 'fortran_order': False, 'shape': ";
    dict += npy_shape_repr(shape);
    dict += ", }";
    // numpy >= 1.24 reserves room to grow the first axis in place. Only spaces are added, so the
    // final bytes equal those of numpy 1.14-1.23 whenever the header fits one 64-byte block pair.
    if (!shape.empty()) {
        std::size_t digits = std::to_string(shape[0]).size();
        if (digits < kGrowthAxisDigits) dict.append(kGrowthAxisDigits - digits, ' ');
    }
    // _wrap_header: pad so that magic(6) + version(2) + len(2) + header + '\n' is a multiple of 64;
    // padlen is 64, not 0, when already aligned.
    std::size_t hlen = dict.size() + 1;
    std::size_t padlen = kArrayAlign - ((8 + 2 + hlen) % kArrayAlign);
    std::size_t total_len = hlen + padlen;
    if (total_len > 0xFFFF) throw Error("npy header of " + std::to_string(total_len) + " bytes needs format 2.0");
    std::string out(kMagic, sizeof kMagic);
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(total_len & 0xFF);
    out += static_cast<char>(total_len >> 8);
    out += dict;
    out.append(padlen, ' ');
    out += '\n';
    return out;
}

std::uint64_t NpyHeader::count() const {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;  // overflow excluded by parse_npy_header
    return n;
}

namespace {

// A minimal reader for the Python literal numpy writes: a dict of str keys whose values are
// strings, True/False, or tuples of non-negative ints.
class HeaderParser {
public:
    HeaderParser(std::string_view text, std::size_t base, const std::string& name)
        : t_(text), base_(base), name_(name) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw Error(name_ + ": byte " + std::to_string(base_ + i_) + ": bad .npy header: " + what);
    }
    void ws() {
        while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
    }
    bool eat(char c) {
        ws();
        if (i_ < t_.size() && t_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    void expect(char c) {
        if (!eat(c)) fail(std::string("expected '") + c + "'");
    }
    std::string string() {
        ws();
        if (i_ >= t_.size() || (t_[i_] != '\'' && t_[i_] != '"')) fail("expected a quoted string");
        char q = t_[i_++];
        std::size_t start = i_;
        while (i_ < t_.size() && t_[i_] != q) {
            if (t_[i_] == '\\') fail("escapes are not supported in header strings");
            ++i_;
        }
        if (i_ >= t_.size()) fail("unterminated string");
        return std::string(t_.substr(start, i_++ - start));
    }
    bool boolean() {
        ws();
        if (t_.substr(i_, 4) == "True") return i_ += 4, true;
        if (t_.substr(i_, 5) == "False") return i_ += 5, false;
        fail("expected True or False");
    }
    std::vector<std::uint64_t> tuple() {
        expect('(');
        std::vector<std::uint64_t> v;
        while (!eat(')')) {
            ws();
            std::size_t start = i_;
            std::uint64_t x = 0;
            while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') {
                auto d = static_cast<std::uint64_t>(t_[i_] - '0');
                if (x > (std::numeric_limits<std::uint64_t>::max() - d) / 10) fail("dimension too large");
                x = x * 10 + d;
                ++i_;
            }
            if (i_ == start) fail("expected a non-negative integer in the shape");
            v.push_back(x);
            if (!eat(',')) {
                expect(')');
                if (v.size() == 1) fail("a 1-tuple needs a trailing comma");
                break;
            }
        }
        return v;
    }
    bool at_end() {
        ws();
        return i_ == t_.size();
    }

private:
    std::string_view t_;
    std::size_t base_;
    const std::string& name_;
    std::size_t i_ = 0;
};

}  // namespace

NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& name) {
    auto fail = [&](std::size_t offset, const std::string& what) -> void {
        throw Error(name + ": byte " + std::to_string(offset) + ": " + what);
    };
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    if (bytes.size() < 10 || std::memcmp(p, kMagic, sizeof kMagic) != 0)
        fail(0, "not a .npy file (no \\x93NUMPY magic)");
    unsigned major = p[6], minor = p[7];
    std::size_t len_bytes = major == 1 ? 2 : 4;
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        fail(6, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
    if (bytes.size() < 8 + len_bytes) fail(bytes.size(), "truncated header");
    std::size_t hlen = 0;
    for (std::size_t k = 0; k < len_bytes; ++k) hlen |= static_cast<std::size_t>(p[8 + k]) << (8 * k);
    std::size_t start = 8 + len_bytes;
    if (hlen > bytes.size() - start)
        fail(8, "header length " + std::to_string(hlen) + " runs past the end of the " + std::to_string(bytes.size()) +
                    "-byte file");
    std::string_view text(reinterpret_cast<const char*>(p + start), hlen);

    NpyHeader h;
    h.data_offset = start + hlen;
    HeaderParser ps(text, start, name);
    bool have_descr = false, have_order = false, have_shape = false;
    std::string descr;
    ps.expect('{');
    while (!ps.eat('}')) {
        std::string key = ps.string();
        ps.expect(':');
        if (key == "descr" && !have_descr) {
            descr = ps.string();
            have_descr = true;
        } else if (key == "fortran_order" && !have_order) {
            h.fortran_order = ps.boolean();
            have_order = true;
        } else if (key == "shape" && !have_shape) {
            h.shape = ps.tuple();
            have_shape = true;
        } else {
            ps.fail("unexpected or repeated key '" + key + "'");
        }
        if (!ps.eat(',')) {
            ps.expect('}');
            break;
        }
    }
    if (!ps.at_end()) ps.fail("text after the header dict");
    if (!have_descr || !have_order || !have_shape) fail(start, "header lacks one of 'descr', 'fortran_order', 'shape'");
    if (descr == "<i4") h.dtype = NpyDType::Int32;
    else if (descr == "<u4") h.dtype = NpyDType::UInt32;
    else if (descr == "<i8") h.dtype = NpyDType::Int64;
    else
        fail(start, "dtype '" + descr + "' is not supported (expected '<i4', '<u4' or '<i8', as np.save writes Megatron's "
                                          "index mappings on a little-endian machine)");
    if (h.fortran_order && h.shape.size() > 1) fail(start, "Fortran-ordered arrays are not supported");
    std::uint64_t count = 1;
    for (auto d : h.shape) {
        if (d != 0 && count > std::numeric_limits<std::uint64_t>::max() / 8 / d) fail(start, "shape too large");
        count *= d;
    }
    std::uint64_t want = h.data_offset + count * npy_itemsize(h.dtype);
    if (want != bytes.size())
        fail(h.data_offset, "shape " + npy_shape_repr(h.shape) + " of " + npy_dtype_name(h.dtype) + " needs " +
                                std::to_string(want) + " bytes, the file has " + std::to_string(bytes.size()) +
                                (want > bytes.size() ? " (truncated?)" : " (trailing bytes)"));
    return h;
}

void write_npy(const std::string& path, NpyDType dtype, std::span<const std::uint64_t> shape, const void* data) {
    std::uint64_t count = 1;
    for (auto d : shape) count *= d;
    AtomicOutput out(path);
    out.write(npy_header_bytes(dtype, shape));
    if (count) out.write(data, static_cast<std::size_t>(count * npy_itemsize(dtype)));
    out.commit();
}

NpyFile::NpyFile(const std::string& path) : file_(path) { header_ = parse_npy_header(file_.bytes(), file_.path()); }

void NpyFile::check_dtype(NpyDType dtype) const {
    if (header_.dtype != dtype)
        throw Error(path() + ": dtype is " + npy_dtype_name(header_.dtype) + ", expected " + npy_dtype_name(dtype));
}

void NpyFile::expect(NpyDType dtype, std::span<const std::uint64_t> shape) const {
    check_dtype(dtype);
    if (!std::equal(shape.begin(), shape.end(), header_.shape.begin(), header_.shape.end()))
        throw Error(path() + ": shape is " + npy_shape_repr(header_.shape) + ", expected " + npy_shape_repr(shape));
}

}  // namespace mds::data
