#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <ATen/ATen.h>

#include "mds/trainer/comm.h"
#include "tensor_support.h"

using mds::trainer_test::floats;

using namespace mds::trainer;

TEST_CASE("gradient buckets: consecutive tensors of one dtype up to the byte cap, an oversized tensor alone") {
    // 4-byte floats: 10 + 10 elements fit 100 bytes, the third does not; 40 elements (160 bytes) is a bucket of its own.
    const std::vector<at::Tensor> t{floats(10), floats(10), floats(10), floats(40), floats(5)};
    using B = std::vector<std::pair<std::size_t, std::size_t>>;
    DOCTEST_CHECK(cut_buckets(t, 100) == B{{0, 2}, {2, 3}, {3, 4}, {4, 5}});
    DOCTEST_CHECK(cut_buckets(t, 1 << 20) == B{{0, 5}});
    DOCTEST_CHECK(cut_buckets({}, 100).empty());
    // A dtype change starts a new bucket even when the bytes would fit.
    const std::vector<at::Tensor> mixed{floats(2), floats(2).to(at::kHalf), floats(2).to(at::kHalf), floats(2)};
    DOCTEST_CHECK(cut_buckets(mixed, 1 << 20) == B{{0, 1}, {1, 3}, {3, 4}});
}

TEST_CASE("flatten and unflatten round-trip shapes and values, non-contiguous tensors included") {
    const auto a = floats(6).view({2, 3});
    const auto b = floats(4).view({2, 2}).t();  // non-contiguous
    const auto flat = flatten({a, b});
    REQUIRE(flat.numel() == 10);
    DOCTEST_CHECK(flat.narrow(0, 0, 6).equal(a.reshape({-1})));
    DOCTEST_CHECK(flat.narrow(0, 6, 4).equal(b.reshape({-1})));
    // flatten copies: changing the flat tensor leaves the inputs alone until unflatten writes it back.
    flat.mul_(2);
    DOCTEST_CHECK(a.sum().item<float>() == 15.0f);
    const auto a2 = at::zeros({2, 3}), b2 = at::zeros({2, 2}).t();
    unflatten(flat, {a2, b2});
    DOCTEST_CHECK(a2.equal(a * 2));
    DOCTEST_CHECK(b2.equal(b * 2));
    const auto one = flatten({a});
    one.add_(1);
    DOCTEST_CHECK(a.sum().item<float>() == 15.0f);
}
