// CRC-32C against published check values (RFC 3720 B.4, the "123456789" check), the hardware path
// against the table path, and TFRecord's mask.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "mds/observe/crc32c.h"

using namespace mds::observe;

TEST_CASE("crc32c: check values") {
    CHECK(crc32c("123456789") == 0xE3069283u);
    CHECK(crc32c_portable("123456789", 9) == 0xE3069283u);
    CHECK(crc32c("") == 0u);
    CHECK(crc32c("a") == 0xC1D04330u);
    // RFC 3720 appendix B.4: 32 bytes of zeros, of 0xFF, ascending and descending.
    std::vector<unsigned char> buf(32, 0);
    CHECK(crc32c(buf.data(), buf.size()) == 0x8A9136AAu);
    std::fill(buf.begin(), buf.end(), 0xFF);
    CHECK(crc32c(buf.data(), buf.size()) == 0x62A8AB43u);
    for (std::size_t i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i);
    CHECK(crc32c(buf.data(), buf.size()) == 0x46DD794Eu);
    for (std::size_t i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(31 - i);
    CHECK(crc32c(buf.data(), buf.size()) == 0x113FDB5Cu);
}

TEST_CASE("crc32c: hardware and table paths agree, incremental equals one-shot") {
    std::mt19937 rng(42);
    std::vector<unsigned char> data(5000);
    for (auto& b : data) b = static_cast<unsigned char>(rng());
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 63u, 64u, 1000u, 4999u, 5000u}) {
        for (std::size_t offset : {0u, 1u, 3u}) {
            if (offset + n > data.size()) continue;
            const auto expect = crc32c_portable(data.data() + offset, n);
            CHECK(crc32c(data.data() + offset, n) == expect);
            const std::size_t half = n / 3;
            CHECK(crc32c(data.data() + offset + half, n - half, crc32c(data.data() + offset, half)) == expect);
            CHECK(crc32c_portable(data.data() + offset + half, n - half, crc32c_portable(data.data() + offset, half)) ==
                  expect);
        }
    }
    const std::string path = crc32c_hardware_available() ? "SSE4.2 crc32 instruction" : "table (no SSE4.2)";
    MESSAGE("crc32c path: " << path);
}

TEST_CASE("crc32c: TFRecord mask") {
    // tensorboard's masked_crc32c(b"123456789") = 3347755237; masked_crc32c(b"") = 0xa282ead8.
    CHECK(crc32c_mask(crc32c("123456789")) == 3347755237u);
    CHECK(crc32c_mask(crc32c("")) == 0xa282ead8u);
    for (std::uint32_t v : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x80000000u}) CHECK(crc32c_unmask(crc32c_mask(v)) == v);
}
