// TensorBoard events: record bytes compared with Python's protobuf + tensorboard's masked_crc32c
// (expected bytes produced with tensorboard 2.21's event_pb2 / summary_pb2), file naming, and a
// written file read back record by record.
#include <doctest/doctest.h>

#include <unistd.h>  // getpid

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "mds/observe/crc32c.h"
#include "mds/observe/tensorboard_writer.h"
#include "test_support.h"

using mds::test::slurp;

using namespace mds::observe;

namespace {

std::string from_hex(std::string_view hex) {
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
        out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
    return out;
}

std::uint64_t le(const std::string& s, std::size_t at, int bytes) {
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
    return v;
}

}  // namespace

TEST_CASE("tensorboard: a scalar record, byte for byte") {
    // Event(wall_time=1700000000.5, step=490, summary=Summary(value=[Value(tag="lm-loss-training/lm loss",
    // simple_value=2.5)])), framed as tensorboard's RecordWriter frames it.
    const std::string expect = from_hex(
        "2f000000000000006d5d1d500900002040fc54d94110ea032a210a1f0a186c6d2d6c6f73732d747261696e696e672f6c6d20"
        "6c6f737315000020401d676ad4");
    const std::string got = tfrecord_frame(encode_scalar_event("lm-loss-training/lm loss", 2.5f, 490, 1700000000.5));
    CHECK(got.size() == 63);
    CHECK(got == expect);
}

TEST_CASE("tensorboard: file_version event and proto3 defaults") {
    CHECK(encode_file_version_event(1700000000.25) ==
          from_hex("0900001040fc54d9411a0d627261696e2e4576656e743a3252050a036d6473"));
    // wall_time 0 and the empty tag are left out; simple_value 0 (a oneof member) and a negative step stay.
    CHECK(encode_scalar_event("t", 0.0f, -3, 0.0) == from_hex("10fdffffffffffffffff012a0a0a080a01741500000000"));
}

TEST_CASE("tensorboard: a text event, byte for byte") {
    // Python: Event(wall_time=2.0, step=7, summary=torch.utils.tensorboard.summary.text("lr", "0.5"))
    // .SerializeToString(), SummaryWriter.add_text's event.
    CHECK(encode_text_event("lr", "0.5", 7, 2.0) ==
          from_hex("09000000000000004010072a2c0a2a0a0f6c722f746578745f73756d6d617279420d08071204120208014203302e354a08"
                   "0a060a0474657874"));
}

TEST_CASE("tensorboard: file name as SummaryWriter's") {
    CHECK(tensorboard_event_file_name(1700000000, "node-1", 4242, 0) == "events.out.tfevents.1700000000.node-1.4242.0");
    CHECK(tensorboard_event_file_name(12, "h", 1, 3) == "events.out.tfevents.0000000012.h.1.3");
}

TEST_CASE("tensorboard: writer output parses back") {
    const auto dir = mds::test::scratch_dir("tb-writer") / "tb" / "nested";
    std::string path;
    {
        TensorBoardWriter w(dir.string(), 128);  // small buffer: several write() calls
        path = w.path();
        const auto name = std::filesystem::path(path).filename().string();
        CHECK(name.rfind("events.out.tfevents.", 0) == 0);
        std::string pid_part = ".";  // built stepwise: GCC 12's -Wrestrict misfires on "." + std::string
        pid_part += std::to_string(::getpid());
        pid_part += '.';
        CHECK(name.find(pid_part) != std::string::npos);
        CHECK(std::filesystem::file_size(path) > 0);  // the file_version event is written at once
        for (int i = 0; i < 50; ++i) w.add_scalar("loss", 1.0 / (i + 1), i * 1000, 1.5e9 + i);
        w.add_scalar("nan", std::numeric_limits<double>::quiet_NaN(), 51, 1.5e9);
        w.flush(true);
        CHECK(w.events_written() == 52);
    }
    const std::string data = slurp(path);
    std::size_t at = 0;
    int records = 0;
    while (at < data.size()) {
        REQUIRE(at + 12 <= data.size());
        const auto len = le(data, at, 8);
        CHECK(crc32c_mask(crc32c(data.data() + at, 8)) == le(data, at + 8, 4));
        REQUIRE(at + 12 + len + 4 <= data.size());
        CHECK(crc32c_mask(crc32c(data.data() + at + 12, len)) == le(data, at + 12 + len, 4));
        at += 12 + len + 4;
        ++records;
    }
    CHECK(at == data.size());
    CHECK(records == 52);  // file_version + 51 scalars

    // A second writer in the same process gets the next number, and a new file.
    TensorBoardWriter w2(dir.string());
    CHECK(w2.path() != path);
    std::filesystem::remove_all(dir.parent_path().parent_path());
}
