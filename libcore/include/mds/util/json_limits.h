// JSON documents from outside (a server's answer, a state file, squeue's output) checked for their
// nesting before they are parsed: nlohmann::json builds one value per level, so "[[[[..." costs
// about 100 bytes of memory per byte of input before any check of its shape could refuse it.
#pragma once

#include <string>
#include <string_view>

namespace mds {

// Deeper than any document mds reads (the Hub's answers nest 5 levels, squeue's about 8).
constexpr int kMaxJsonDepth = 64;

// Throws mds::Error("<what>: JSON nested deeper than 64 levels (at byte N)") when the arrays and
// objects of `text` (strings skipped) nest deeper than max_depth. Linear, allocates nothing.
void check_json_depth(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);

}  // namespace mds
