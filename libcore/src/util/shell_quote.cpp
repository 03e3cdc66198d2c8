// POSIX shell quoting (shell_quote.h).
#include "mds/util/shell_quote.h"

namespace mds {
namespace {

// Bytes that mean nothing to sh anywhere in an argument word. '~' is not one (tilde expansion at
// the start); '=' is: it only makes an assignment in a command's first words, which mds never
// quotes for.
bool plain(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '@' ||
           c == '%' || c == '+' || c == '=' || c == ':' || c == ',' || c == '.' || c == '/' || c == '-';
}

}  // namespace

std::string shell_quote(std::string_view word) {
    bool all_plain = !word.empty();
    for (char c : word) all_plain = all_plain && plain(c);
    if (all_plain) return std::string(word);
    std::string q = "'";
    for (char c : word) {
        if (c == '\'')
            q += "'\\''";  // close the quotes, an escaped ', reopen
        else
            q += c;
    }
    q += '\'';
    return q;
}

std::string shell_join(const std::vector<std::string>& words) {
    std::string s;
    for (const auto& w : words) {
        if (!s.empty()) s += ' ';
        s += shell_quote(w);
    }
    return s;
}

}  // namespace mds
