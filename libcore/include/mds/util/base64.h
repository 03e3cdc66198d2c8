// Standard base64 (RFC 4648 §4, with padding): mail headers (RFC 2047) and the Hub's commit payloads.
#pragma once

#include <string>
#include <string_view>

namespace mds {

std::string base64_encode(std::string_view bytes);

}  // namespace mds
