// Shell quoting for commands that mds prints for a person to paste, or hands to `/bin/sh -c`
// (the `mds-sample-text ...` command of a loss alert): each word comes back as one word, with no
// expansion, whatever bytes it holds.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mds {

// `word` as one POSIX shell word. Words made only of [A-Za-z0-9_@%+=:,./-] (and not empty) are
// returned as they are, so ordinary flags and paths stay readable; anything else is put in single
// quotes, each ' inside written as '\'' ("it's" -> 'it'\''s'); "" -> ''.
std::string shell_quote(std::string_view word);

// The words quoted and joined by single spaces.
std::string shell_join(const std::vector<std::string>& words);

}  // namespace mds
