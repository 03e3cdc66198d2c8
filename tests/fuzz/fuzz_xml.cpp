// Fuzzes the S3 client's XML reader (hub/xml.h) and its s3:// URL parser and URI encoder (hub/s3.h).
// Byte 0 picks what the rest feeds:
//   0: parse_xml. Only mds::Error escapes, its message names the document and a byte offset inside
//      the input; a parsed tree has non-empty names made of name characters, at most 64 levels, and
//      written back (each element's text escaped, then its children) it parses to the same tree.
//   1: xml_escape. Any bytes, escaped and wrapped in <a>...</a>, parse back to the same text.
//   2: parse_s3_url, of the bytes and of "s3://" + the bytes. Only mds::Error (UsageError) escapes; a
//      parsed bucket has 3+ characters of a-z 0-9 . - _, begins and ends with a letter or digit; the
//      prefix has no leading or trailing '/' and no empty, '.' or '..' segment; the URL rebuilt from
//      bucket and prefix parses to the same.
//   3: uri_encode, with and without keep_slash: only A-Z a-z 0-9 - . _ ~ (and '/') and %XX with
//      upper-case hex come out, and decoding gives the input back.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include "fuzz_support.h"
#include "mds/hub/s3.h"
#include "mds/hub/xml.h"

namespace {

using mds::hub::XmlElement;

bool is_name_char(char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == ':' || c == '-' || c == '.';
}

bool is_unreserved(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
}

// Checks names and depth; returns the number of levels.
int check_tree(const XmlElement& e) {
    MDS_FUZZ_CHECK(!e.name.empty());
    for (char c : e.name) MDS_FUZZ_CHECK(is_name_char(c));
    int deepest = 0;
    for (const XmlElement& c : e.children) {
        const int d = check_tree(c);
        if (d > deepest) deepest = d;
    }
    return deepest + 1;
}

void write_tree(const XmlElement& e, std::string& out) {
    out += "<" + e.name + ">" + mds::hub::xml_escape(e.text);
    for (const XmlElement& c : e.children) write_tree(c, out);
    out += "</" + e.name + ">";
}

bool same_tree(const XmlElement& a, const XmlElement& b) {
    if (a.name != b.name || a.text != b.text || a.children.size() != b.children.size()) return false;
    for (std::size_t i = 0; i < a.children.size(); ++i)
        if (!same_tree(a.children[i], b.children[i])) return false;
    return true;
}

void fuzz_parse(std::string_view text) {
    const std::string what = "fuzz doc";
    try {
        const XmlElement root = mds::hub::parse_xml(text, what);
        MDS_FUZZ_CHECK(check_tree(root) <= 64);
        std::string again;
        write_tree(root, again);
        const XmlElement back = mds::hub::parse_xml(again, "rewritten");
        MDS_FUZZ_CHECK(same_tree(root, back));
        // The lookups agree with the children.
        for (const XmlElement& c : root.children) {
            MDS_FUZZ_CHECK(root.child(c.name) != nullptr);
            MDS_FUZZ_CHECK(root.child(c.name)->name == c.name);
            MDS_FUZZ_CHECK(!root.all(c.name).empty());
        }
    } catch (const mds::Error& e) {
        const std::string msg = e.what();
        MDS_FUZZ_CHECK(msg.rfind(what + ": malformed XML: ", 0) == 0);
        const auto at = msg.rfind(" at byte ");
        // Every error names its offset (an undefined entity's name once carried a NUL that cut the
        // message short: "<a>&lt\x01\x00;</a>" is a regression seed).
        MDS_FUZZ_CHECK(at != std::string::npos);
        if (at == std::string::npos) return;
        const std::string digits = msg.substr(at + 9);
        MDS_FUZZ_CHECK(!digits.empty() && digits.size() < 20 && digits.find_first_not_of("0123456789") == std::string::npos);
        MDS_FUZZ_CHECK(std::stoull(digits) <= text.size());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "exception other than mds::Error escaped parse_xml: %s: %s\n",
                     mds::fuzz::type_name(typeid(e)).c_str(), e.what());
        std::abort();
    }
}

void fuzz_escape(std::string_view text) {
    const std::string escaped = mds::hub::xml_escape(text);
    MDS_FUZZ_CHECK(escaped.find('<') == std::string::npos);
    MDS_FUZZ_CHECK(escaped.size() >= text.size());
    const bool parsed = mds::fuzz::only_mds_errors([&] {
        const XmlElement e = mds::hub::parse_xml("<a>" + escaped + "</a>", "escaped");
        MDS_FUZZ_CHECK(e.name == "a");
        MDS_FUZZ_CHECK(e.children.empty());
        MDS_FUZZ_CHECK(e.text == text);
    });
    MDS_FUZZ_CHECK(parsed);  // xml_escape's output always parses
}

void check_url(const std::string& url) {
    mds::fuzz::only_mds_errors([&] {
        const mds::hub::S3Url u = mds::hub::parse_s3_url(url);
        MDS_FUZZ_CHECK(mds::hub::is_s3_url(url));
        MDS_FUZZ_CHECK(u.bucket.size() >= 3);
        for (char c : u.bucket) MDS_FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_');
        MDS_FUZZ_CHECK(u.bucket.front() != '.' && u.bucket.front() != '-' && u.bucket.front() != '_');
        MDS_FUZZ_CHECK(u.bucket.back() != '.' && u.bucket.back() != '-' && u.bucket.back() != '_');
        if (!u.prefix.empty()) {
            std::size_t start = 0;
            for (;;) {
                const auto end = u.prefix.find('/', start);
                const std::string seg = u.prefix.substr(start, end == std::string::npos ? std::string::npos : end - start);
                MDS_FUZZ_CHECK(!seg.empty() && seg != "." && seg != "..");
                if (end == std::string::npos) break;
                start = end + 1;
            }
        }
        const mds::hub::S3Url again = mds::hub::parse_s3_url("s3://" + u.bucket + (u.prefix.empty() ? "" : "/" + u.prefix));
        MDS_FUZZ_CHECK(again.bucket == u.bucket && again.prefix == u.prefix);
    });
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;  // lower-case hex is not what SigV4 wants
}

void check_encode(std::string_view text, bool keep_slash) {
    const std::string enc = mds::hub::uri_encode(text, keep_slash);
    std::string dec;
    for (std::size_t i = 0; i < enc.size(); ++i) {
        const char c = enc[i];
        if (c == '%') {
            MDS_FUZZ_CHECK(i + 2 < enc.size());
            const int hi = hex_value(enc[i + 1]), lo = hex_value(enc[i + 2]);
            MDS_FUZZ_CHECK(hi >= 0 && lo >= 0);
            const char byte = static_cast<char>(hi * 16 + lo);
            MDS_FUZZ_CHECK(!is_unreserved(byte) && !(keep_slash && byte == '/'));  // never encoded needlessly
            dec.push_back(byte);
            i += 2;
        } else {
            MDS_FUZZ_CHECK(is_unreserved(c) || (keep_slash && c == '/'));
            dec.push_back(c);
        }
    }
    MDS_FUZZ_CHECK(dec == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (data[0] % 4) {
        case 0:
            fuzz_parse(text);
            break;
        case 1:
            fuzz_escape(text);
            break;
        case 2:
            check_url(std::string(text));
            check_url("s3://" + std::string(text));
            break;
        default:
            check_encode(text, false);
            check_encode(text, true);
            break;
    }
    return 0;
}
