// The S3 client's XML reader (xml.h).
#include "mds/hub/xml.h"

#include <cstdint>

#include "mds/util/error.h"

namespace mds::hub {
namespace {

constexpr int kMaxDepth = 64;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool is_name_char(char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == ':' || c == '-' || c == '.';
}

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

class Parser {
public:
    Parser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

    XmlElement document() {
        if (starts("\xEF\xBB\xBF")) pos_ = 3;  // a UTF-8 byte order mark
        skip_misc();
        if (at_end() || s_[pos_] != '<') fail("expected the root element");
        XmlElement root = element(1);
        skip_misc();
        if (!at_end()) fail("content after the root element");
        return root;
    }

private:
    [[noreturn]] void fail(const std::string& problem) const {
        throw Error(what_ + ": malformed XML: " + problem + " at byte " + std::to_string(pos_));
    }
    bool at_end() const { return pos_ >= s_.size(); }
    bool starts(std::string_view p) const { return s_.substr(pos_, p.size()) == p; }

    void skip_until(std::string_view end, const char* what) {
        const auto e = s_.find(end, pos_);
        if (e == std::string_view::npos) fail(std::string("unterminated ") + what);
        pos_ = e + end.size();
    }

    // Whitespace, comments and processing instructions (the <?xml ...?> declaration) around the root.
    void skip_misc() {
        for (;;) {
            while (!at_end() && is_space(s_[pos_])) ++pos_;
            if (starts("<?")) skip_until("?>", "processing instruction");
            else if (starts("<!--")) skip_until("-->", "comment");
            else if (starts("<!")) fail("DOCTYPE and declarations are not accepted");
            else return;
        }
    }

    std::string name() {
        const std::size_t start = pos_;
        while (!at_end() && is_name_char(s_[pos_])) ++pos_;
        if (pos_ == start) fail("expected a name");
        return std::string(s_.substr(start, pos_ - start));
    }

    void reference(std::string& out) {
        const auto semi = s_.find(';', pos_);
        if (semi == std::string_view::npos || semi - pos_ > 12) fail("unterminated entity reference");
        const std::string_view ref = s_.substr(pos_ + 1, semi - pos_ - 1);
        if (ref == "amp") out.push_back('&');
        else if (ref == "lt") out.push_back('<');
        else if (ref == "gt") out.push_back('>');
        else if (ref == "quot") out.push_back('"');
        else if (ref == "apos") out.push_back('\'');
        else if (ref.size() > 1 && ref[0] == '#') {
            const bool hex = ref[1] == 'x';
            const std::string_view digits = ref.substr(hex ? 2 : 1);
            if (digits.empty()) fail("empty character reference");
            std::uint32_t cp = 0;
            for (char c : digits) {
                int v;
                if (c >= '0' && c <= '9') v = c - '0';
                else if (hex && c >= 'a' && c <= 'f') v = c - 'a' + 10;
                else if (hex && c >= 'A' && c <= 'F') v = c - 'A' + 10;
                else fail("bad character reference");
                cp = cp * (hex ? 16 : 10) + static_cast<std::uint32_t>(v);
                if (cp > 0x10FFFF) fail("character reference beyond U+10FFFF");
            }
            if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) fail("character reference to a code point XML forbids");
            append_utf8(out, cp);
        } else {
            std::string shown;  // printable, so that the message keeps its offset
            for (char ch : ref) shown.push_back(ch >= 0x20 && ch < 0x7f ? ch : '?');
            fail("undefined entity '&" + shown + ";'");
        }
        pos_ = semi + 1;
    }

    // The attributes of a start tag: read past (values checked for their quotes), dropped.
    void attributes() {
        for (;;) {
            while (!at_end() && is_space(s_[pos_])) ++pos_;
            if (at_end()) fail("unterminated start tag");
            if (s_[pos_] == '>' || s_[pos_] == '/') return;
            name();
            while (!at_end() && is_space(s_[pos_])) ++pos_;
            if (at_end() || s_[pos_] != '=') fail("expected '=' after an attribute name");
            ++pos_;
            while (!at_end() && is_space(s_[pos_])) ++pos_;
            if (at_end() || (s_[pos_] != '"' && s_[pos_] != '\'')) fail("expected a quoted attribute value");
            const char q = s_[pos_++];
            const auto e = s_.find(q, pos_);
            if (e == std::string_view::npos) fail("unterminated attribute value");
            if (s_.substr(pos_, e - pos_).find('<') != std::string_view::npos) fail("'<' in an attribute value");
            pos_ = e + 1;
        }
    }

    XmlElement element(int depth) {
        if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
        ++pos_;  // '<'
        XmlElement el;
        el.name = name();
        attributes();
        if (s_[pos_] == '/') {
            if (!starts("/>")) fail("expected '/>'");
            pos_ += 2;
            return el;
        }
        ++pos_;  // '>'
        for (;;) {
            if (at_end()) fail("unterminated element <" + el.name + ">");
            const char c = s_[pos_];
            if (c == '<') {
                if (starts("</")) {
                    pos_ += 2;
                    const std::string end = name();
                    if (end != el.name) fail("</" + end + "> closes <" + el.name + ">");
                    while (!at_end() && is_space(s_[pos_])) ++pos_;
                    if (at_end() || s_[pos_] != '>') fail("expected '>'");
                    ++pos_;
                    return el;
                }
                if (starts("<!--")) {
                    skip_until("-->", "comment");
                } else if (starts("<![CDATA[")) {
                    const std::size_t start = pos_ + 9;
                    pos_ = start;
                    skip_until("]]>", "CDATA section");
                    el.text.append(s_.substr(start, pos_ - 3 - start));
                } else if (starts("<?")) {
                    skip_until("?>", "processing instruction");
                } else if (starts("<!")) {
                    fail("declarations are not accepted inside elements");
                } else {
                    el.children.push_back(element(depth + 1));
                }
            } else if (c == '&') {
                reference(el.text);
            } else {
                el.text.push_back(c);
                ++pos_;
            }
        }
    }

    std::string_view s_;
    const std::string& what_;
    std::size_t pos_ = 0;
};

}  // namespace

const XmlElement* XmlElement::child(std::string_view child_name) const {
    for (const auto& c : children)
        if (c.name == child_name) return &c;
    return nullptr;
}

std::string XmlElement::child_text(std::string_view child_name, const std::string& fallback) const {
    const XmlElement* c = child(child_name);
    return c ? c->text : fallback;
}

std::vector<const XmlElement*> XmlElement::all(std::string_view child_name) const {
    std::vector<const XmlElement*> out;
    for (const auto& c : children)
        if (c.name == child_name) out.push_back(&c);
    return out;
}

XmlElement parse_xml(std::string_view text, const std::string& what) { return Parser(text, what).document(); }

std::string xml_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default: out.push_back(c);
        }
    }
    return out;
}

}  // namespace mds::hub
