// Trimming, case mapping and byte counts (mds/util/text.h).
#include <doctest/doctest.h>

#include "mds/util/text.h"

TEST_CASE("text: trim drops ASCII whitespace at both ends only") {
    CHECK(mds::trim("") == "");
    CHECK(mds::trim(" \t\r\n\v\f") == "");
    CHECK(mds::trim("  global_step20\n") == "global_step20");
    CHECK(mds::trim("a b\tc") == "a b\tc");  // inner whitespace kept
    CHECK(mds::trim("\xc2\xa0x\xc2\xa0") == "\xc2\xa0x\xc2\xa0");  // U+00A0 is no ASCII space
    CHECK(mds::trim(std::string_view("\0x\0", 3)) == std::string("\0x\0", 3));  // NUL is no space
}

TEST_CASE("text: case mapping touches ASCII letters only") {
    CHECK(mds::to_lower("GiB Intel-RAPL:0") == "gib intel-rapl:0");
    CHECK(mds::to_upper("fr gb-2") == "FR GB-2");
    CHECK(mds::to_lower("\xc3\x89t\xc3\xa9") == "\xc3\x89t\xc3\xa9");  // "Été": UTF-8 bytes as they are
    CHECK(mds::to_upper("@[`{") == "@[`{");  // the neighbours of the letter ranges
    CHECK(mds::to_lower("@[`{") == "@[`{");
}

TEST_CASE("text: format_bytes_iec uses binary units with one decimal") {
    CHECK(mds::format_bytes_iec(0) == "0 B");
    CHECK(mds::format_bytes_iec(1023) == "1023 B");
    CHECK(mds::format_bytes_iec(1024) == "1.0 KiB");
    CHECK(mds::format_bytes_iec(1536) == "1.5 KiB");
    CHECK(mds::format_bytes_iec(5ull << 30) == "5.0 GiB");
    CHECK(mds::format_bytes_iec(3ull << 50) == "3.0 PiB");
    CHECK(mds::format_bytes_iec(UINT64_MAX) == "16384.0 PiB");  // no unit past PiB
}

TEST_CASE("text: format_bytes uses decimal units with two decimals") {
    CHECK(mds::format_bytes(999) == "999 B");
    CHECK(mds::format_bytes(1000) == "1.00 kB");
    CHECK(mds::format_bytes(2.5e9) == "2.50 GB");
}
