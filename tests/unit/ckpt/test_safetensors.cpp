#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "mds/ckpt/safetensors.h"
#include "mds/util/error.h"
#include "test_support.h"

using namespace mds::ckpt;

namespace {

std::string raw_file(const std::string& path, const std::string& header, const std::string& data) {
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << data;
    return path;
}

}  // namespace

TEST_CASE("safetensors: write then read back, header padded to 8 bytes") {
    const std::string dir = mds::test::scratch_dir("safetensors").string();
    const float a[6] = {1, 2, 3, 4, 5, 6};
    const std::int64_t b[2] = {-7, 1LL << 40};
    const auto path = dir + "/t.safetensors";
    write_safetensors(path, {{"a", DType::F32, {2, 3}, a}, {"b.x", DType::I64, {2}, b}, {"empty", DType::BF16, {0, 4}, nullptr}},
                      {{"format", "pt"}});
    SafetensorsFile f(path);
    REQUIRE(f.tensors().size() == 3);
    CHECK(f.metadata().at("format") == "pt");
    const auto& ta = f.at("a");
    CHECK(ta.dtype == DType::F32);
    CHECK(ta.shape == std::vector<std::int64_t>{2, 3});
    CHECK(std::memcmp(ta.bytes.data(), a, sizeof a) == 0);
    CHECK(f.at("b.x").numel() == 2);
    CHECK(std::memcmp(f.at("b.x").bytes.data(), b, sizeof b) == 0);
    CHECK(f.at("empty").bytes.empty());
    CHECK_FALSE(f.contains("c"));
    CHECK_THROWS_WITH_AS(f.at("c"), doctest::Contains("no tensor \"c\""), mds::Error);
    std::ifstream in(path, std::ios::binary);
    unsigned char len[8];
    in.read(reinterpret_cast<char*>(len), 8);
    CHECK(len[0] % 8 == 0);
}

TEST_CASE("safetensors: malformed files are errors naming the file and the problem") {
    const std::string dir = mds::test::scratch_dir("safetensors_bad").string();
    auto fails = [&](const std::string& header, const std::string& data, const char* expect) {
        const auto path = raw_file(dir + "/bad.safetensors", header, data);
        CHECK_THROWS_WITH_AS(SafetensorsFile{path}, doctest::Contains(expect), mds::Error);
    };
    fails(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "12345678", "need 2 × 4 bytes");
    fails(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "1234", "unsupported dtype \"F33\"");
    fails(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "12345678", "cover 4 of 8 data bytes");
    fails(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "12345678", "starts at data offset 4, expected 0");
    fails(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,12]}})", "12345678", "outside the 8 data bytes");
    fails(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "1234", "negative dimension");
    fails(R"({"a":{"dtype":"F32","shape":[1]}})", "1234", "expected an object with dtype, shape and data_offsets");
    fails(R"({"a":)", "", "header JSON at offset");
    fails(R"([1,2])", "", "not a JSON object");
    {
        const auto path = dir + "/short.safetensors";
        std::ofstream(path) << "abc";
        CHECK_THROWS_WITH_AS(SafetensorsFile{path}, doctest::Contains("3 bytes, header length needs 8"), mds::Error);
    }
    {
        const auto path = dir + "/long.safetensors";
        std::ofstream out(path, std::ios::binary);
        const char len[8] = {'\xff', '\xff', 0, 0, 0, 0, 0, 0};
        out.write(len, 8);
        out << "{}";
        out.close();
        CHECK_THROWS_WITH_AS(SafetensorsFile{path}, doctest::Contains("exceeds the file"), mds::Error);
    }
}

TEST_CASE("safetensors: a number beyond double in the header is an mds::Error (found by fuzzing)") {
    const std::string dir = mds::test::scratch_dir("safetensors_overflow").string();
    const auto path = raw_file(dir + "/big.safetensors", R"({"w":{"dtype":1e516,"shape":[1],"data_offsets":[0,4]}})", "1234");
    CHECK_THROWS_WITH_AS(SafetensorsFile{path}, doctest::Contains("header JSON"), mds::Error);
}
