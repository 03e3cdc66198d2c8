#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "mds/ckpt/torch_file.h"
#include "mds/ckpt/torch_stream_writer.h"
#include "mds/util/error.h"
#include "test_support.h"

using namespace mds::ckpt;

TEST_CASE("TorchStreamWriter: storages streamed in pieces, empty ones included, read back by TorchFile") {
    const auto dir = mds::test::scratch_dir("torch-stream");
    const auto path = (dir / "t.pt").string();
    {
        TorchStreamWriter w(path);
        auto root = PyValue::dict();
        root.as_dict().set("a", w.declare(DType::F32, {2, 3}));
        root.as_dict().set("empty", w.declare(DType::BF16, {0}));
        root.as_dict().set("b", w.declare(DType::I64, {2}));
        w.begin(root);
        const float a[6] = {1, 2, 3, 4, 5, 6};
        w.write(std::as_bytes(std::span<const float>(a, 2)));
        CHECK(w.remaining_in_storage() == 16);
        w.write(std::as_bytes(std::span<const float>(a + 2, 4)));
        const std::int64_t b[2] = {7, -8};
        w.write(std::as_bytes(std::span<const std::int64_t>(b, 2)).first(4));  // pieces need not be whole elements
        w.write(std::as_bytes(std::span<const std::int64_t>(b, 2)).subspan(4));
        w.finish();
    }
    TorchFile f(path);
    const auto a = f.tensor(f.root().get("a"));
    CHECK(a.shape == std::vector<std::int64_t>{2, 3});
    float got[6];
    std::memcpy(got, a.bytes().data(), 24);
    CHECK(got[5] == 6.0f);
    CHECK(f.tensor(f.root().get("empty")).numel() == 0);
    std::int64_t b[2];
    std::memcpy(b, f.tensor(f.root().get("b")).bytes().data(), 16);
    CHECK(b[1] == -8);
    std::filesystem::remove_all(dir);
}

TEST_CASE("TorchStreamWriter refuses writes past a storage and an incomplete file") {
    const auto dir = mds::test::scratch_dir("torch-stream-bad");
    {
        TorchStreamWriter w((dir / "x.pt").string());
        auto root = PyValue::dict();
        root.as_dict().set("a", w.declare(DType::F32, {2}));
        w.begin(root);
        const float v[3] = {1, 2, 3};
        CHECK_THROWS_AS(w.write(std::as_bytes(std::span<const float>(v, 3))), mds::Error);
        w.write(std::as_bytes(std::span<const float>(v, 1)));
        CHECK_THROWS_WITH_AS(w.finish(), doctest::Contains("incomplete"), mds::Error);
    }
    CHECK_FALSE(std::filesystem::exists(dir / "x.pt"));  // never renamed into place
    std::filesystem::remove_all(dir);
}
