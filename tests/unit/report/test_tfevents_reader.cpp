// TensorBoard event-file reader: a file written by mds's own TensorBoardWriter, a TF2-style
// tensor scalar built by hand, a damaged record (error with the byte offset) and a cut-off last
// record (left out, not an error).
#include <doctest/doctest.h>

#include <bit>
#include <filesystem>
#include <fstream>
#include <string>

#include "mds/observe/tensorboard_writer.h"
#include "mds/report/tfevents_reader.h"
#include "mds/util/error.h"
#include "test_support.h"

using mds::test::slurp;

using namespace mds::report;
namespace fs = std::filesystem;

namespace {

void varint(std::string& out, std::uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7F) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

void bytes_field(std::string& out, unsigned field, const std::string& b) {
    varint(out, field << 3 | 2);
    varint(out, b.size());
    out += b;
}

// tf.summary.scalar's event: Summary.Value{tag, metadata{plugin_data{plugin_name "scalars"}},
// tensor{dtype DT_FLOAT, tensor_shape {}, float_val packed [v]}}.
// `dtype` and the packed values of field `field` (float_val 5, half_val 13, ...).
std::string tf2_tensor_event(const std::string& tag, unsigned dtype, unsigned field, const std::string& packed,
                             std::int64_t step) {
    std::string plugin, metadata, tensor, value, summary, event;
    bytes_field(plugin, 1, "scalars");
    bytes_field(metadata, 1, plugin);
    varint(tensor, 1 << 3);
    varint(tensor, dtype);
    bytes_field(tensor, 2, "");  // empty shape: a scalar
    bytes_field(tensor, field, packed);
    bytes_field(value, 1, tag);
    bytes_field(value, 9, metadata);
    bytes_field(value, 8, tensor);
    bytes_field(summary, 1, value);
    varint(event, 2 << 3);
    varint(event, static_cast<std::uint64_t>(step));
    bytes_field(event, 5, summary);
    return event;
}

std::string tf2_scalar_event(const std::string& tag, float v, std::int64_t step) {
    std::string packed;
    const auto bits = std::bit_cast<std::uint32_t>(v);
    for (int i = 0; i < 4; ++i) packed.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
    return tf2_tensor_event(tag, 1, 5, packed, step);  // DT_FLOAT, float_val
}

// DT_HALF: half_val holds each half's 16 bits as an int32 varint.
std::string tf2_half_event(const std::string& tag, std::int32_t half_bits, std::int64_t step) {
    std::string packed;
    varint(packed, static_cast<std::uint64_t>(static_cast<std::int64_t>(half_bits)));  // int32: sign-extended
    return tf2_tensor_event(tag, 19, 13, packed, step);
}

}  // namespace

TEST_CASE("scalars written by mds's TensorBoardWriter read back") {
    const auto dir = mds::test::scratch_dir("report-tb");
    {
        mds::observe::TensorBoardWriter w(dir.string());
        w.add_scalar("lm-loss-training/lm loss", 6.5, 10, 1000.0);
        w.add_scalar("learning-rate/learning-rate", 3e-4, 10, 1000.5);
        w.add_scalar("lm-loss-training/lm loss", 0.0, 20, 1001.0);
    }
    fs::path file;
    for (const auto& e : fs::directory_iterator(dir)) file = e.path();
    const auto r = read_event_file(file.string());
    CHECK(r.records == 4);  // the file_version event, then three scalars
    REQUIRE(r.scalars.size() == 3);
    CHECK(r.scalars[0].tag == "lm-loss-training/lm loss");
    CHECK(r.scalars[0].step == 10);
    CHECK(r.scalars[0].value == 6.5);
    CHECK(r.scalars[0].wall_time == 1000.0);
    CHECK(r.scalars[1].value == static_cast<double>(3e-4f));  // TensorBoard keeps float32
    CHECK(r.scalars[2].value == 0.0);
    CHECK(r.scalars[2].step == 20);
    CHECK(r.truncated_bytes == 0);

    // A writer killed mid-record: the complete records are read, the rest is left out.
    const std::string bytes = slurp(file);
    const auto cut = parse_event_file(std::string_view(bytes).substr(0, bytes.size() - 5), "cut");
    CHECK(cut.scalars.size() == 2);
    CHECK(cut.truncated_bytes > 0);

    // A flipped bit: an error naming the record's byte offset.
    std::string damaged = bytes;
    damaged[damaged.size() - 10] ^= 0x20;
    CHECK_THROWS_WITH_AS(parse_event_file(damaged, "ev"), doctest::Contains("ev: record at byte"), mds::Error);
    CHECK_THROWS_AS(parse_event_file("this is not an event file, just text", "txt"), mds::Error);
    fs::remove_all(dir);
}

TEST_CASE("TF2 tensor-valued scalars and torch-style simple values in one file") {
    std::string file = mds::observe::tfrecord_frame(mds::observe::encode_file_version_event(1.0));
    file += mds::observe::tfrecord_frame(tf2_scalar_event("loss", 2.75f, 7));
    file += mds::observe::tfrecord_frame(mds::observe::encode_scalar_event("lr", 0.5f, 7, 2.0));
    const auto r = parse_event_file(file, "mixed");
    REQUIRE(r.scalars.size() == 2);
    CHECK(r.scalars[0].tag == "loss");
    CHECK(r.scalars[0].value == 2.75);
    CHECK(r.scalars[0].step == 7);
    CHECK(r.scalars[1].tag == "lr");
    CHECK(r.scalars[1].value == 0.5);
}

TEST_CASE("DT_HALF scalars: the half's bits from half_val; a negative int32 there reads as its low 16 bits") {
    std::string file = mds::observe::tfrecord_frame(mds::observe::encode_file_version_event(1.0));
    file += mds::observe::tfrecord_frame(tf2_half_event("loss", 0x3E00, 3));   // 1.5
    file += mds::observe::tfrecord_frame(tf2_half_event("loss", -0x4200, 4));  // 0xBE00 in the low bits: -1.5
    const auto r = parse_event_file(file, "half");
    REQUIRE(r.scalars.size() == 2);
    CHECK(r.scalars[0].value == 1.5);
    CHECK(r.scalars[1].value == -1.5);
    CHECK(r.scalars[1].step == 4);
}
