#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mds/ckpt/torch_file.h"
#include "mds/util/error.h"
#include "test_support.h"

using mds::test::error_of;
using mds::test::slurp;
using mds::test::spit;

using namespace mds::ckpt;

namespace {

// A torch.save file {"a": float32[4] = 1..4, "b": int64[3] = 7,8,9}; returns the offsets of both
// storages' bytes and of data.pkl in the file.
struct Sample {
    std::string path;
    std::size_t a_at = 0, b_at = 0, pkl_at = 0, pkl_size = 0;
};

Sample write_sample(const std::filesystem::path& dir) {
    Sample s;
    s.path = (dir / "sample.pt").string();
    const std::vector<float> a = {1, 2, 3, 4};
    const std::vector<std::int64_t> b = {7, 8, 9};
    TorchSaveWriter w(s.path);
    auto root = PyValue::dict();
    root.as_dict().set(PyValue::str("a"), w.add_tensor(DType::F32, {4}, std::as_bytes(std::span<const float>(a))));
    root.as_dict().set(PyValue::str("b"), w.add_tensor(DType::I64, {3}, std::as_bytes(std::span<const std::int64_t>(b))));
    w.finish(root);
    const ZipArchive z(s.path);
    s.a_at = z.record_entry("data/0").data_offset;
    s.b_at = z.record_entry("data/1").data_offset;
    s.pkl_at = z.record_entry("data.pkl").data_offset;
    s.pkl_size = z.record_entry("data.pkl").size;
    return s;
}

}  // namespace

TEST_CASE("TorchFile: a flipped byte in a storage is an error naming the file and the tensor, when its data is used") {
    const auto dir = mds::test::scratch_dir("torch_file_crc");
    const auto s = write_sample(dir);
    std::string bytes = slurp(s.path);
    bytes[s.a_at + 5] = static_cast<char>(bytes[s.a_at + 5] ^ 0x10);
    spit(s.path, bytes);

    const TorchFile f(s.path);
    const auto a = f.tensor(f.root().get("a"), "a");  // the header alone reads no data
    CHECK(a.shape == std::vector<std::int64_t>{4});
    const std::string err = error_of([&] { (void)a.bytes(); });
    CHECK(err.find(s.path) != std::string::npos);
    CHECK(err.find(": a:") != std::string::npos);
    CHECK(err.find("data/0 is damaged") != std::string::npos);
    CHECK(error_of([&] { (void)a.gather(); }) == err);  // checked again while it stays damaged
    // The undamaged tensor reads, and is checked once.
    const auto b = f.tensor(f.root().get("b"), "b");
    REQUIRE(b.bytes().size() == 24);
    std::int64_t last = 0;
    std::memcpy(&last, b.bytes().data() + 16, 8);
    CHECK(last == 9);
    CHECK(b.storage_verified->load());

    // --no-verify: the damaged bytes come through.
    const TorchFile loose(s.path, false);
    CHECK_FALSE(loose.verifies());
    CHECK(loose.tensor(loose.root().get("a"), "a").bytes().size() == 16);
    std::filesystem::remove_all(dir);
}

TEST_CASE("TorchFile: a flipped byte in data.pkl is an error naming the file and data.pkl") {
    const auto dir = mds::test::scratch_dir("torch_file_pkl");
    const auto s = write_sample(dir);
    std::string bytes = slurp(s.path);
    // Every byte of the pickle, one at a time: never a silent success.
    for (std::size_t i = 0; i < s.pkl_size; ++i) {
        std::string damaged = bytes;
        damaged[s.pkl_at + i] = static_cast<char>(damaged[s.pkl_at + i] ^ 0x01);
        spit(s.path, damaged);
        const std::string err = error_of([&] { TorchFile f(s.path); });
        CAPTURE(i);
        CHECK(err.find("data.pkl") != std::string::npos);
        CHECK(err.find(s.path) != std::string::npos);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("TorchFile: views whose sizes or strides overflow are refused, not wrapped") {
    const auto dir = mds::test::scratch_dir("torch_file_view");
    const auto s = write_sample(dir);
    const TorchFile f(s.path);
    const auto tensor_with = [&](std::int64_t offset, std::vector<std::int64_t> size, std::vector<std::int64_t> stride) {
        // A new _rebuild_tensor_v2 object (PyValues share their nodes: the file's stays as read).
        std::vector<PyValue> args = f.root().get("a").as_object().args.as_tuple();
        std::vector<PyValue> sz, st;
        for (auto d : size) sz.push_back(PyValue::integer(d));
        for (auto d : stride) st.push_back(PyValue::integer(d));
        args[1] = PyValue::integer(offset);
        args[2] = PyValue::tuple(std::move(sz));
        args[3] = PyValue::tuple(std::move(st));
        const auto v = PyValue::object("torch._utils", "_rebuild_tensor_v2", PyValue::tuple(std::move(args)));
        return error_of([&] { f.tensor(v, "a"); });
    };
    CHECK(tensor_with(0, {4}, {1}).empty());
    CHECK_FALSE(tensor_with(0, {5}, {1}).empty());
    CHECK_FALSE(tensor_with(0, {INT64_MAX / 2, 4}, {0, 1}).empty());
    CHECK_FALSE(tensor_with(0, {2, 2}, {INT64_MAX, 1}).empty());
    CHECK_FALSE(tensor_with(INT64_MAX, {2}, {1}).empty());
    CHECK_FALSE(tensor_with(-1, {2}, {1}).empty());
    std::filesystem::remove_all(dir);
}
