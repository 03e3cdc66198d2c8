#include <doctest/doctest.h>

// After doctest: LibTorch defines its own CHECK (glog style), so this file spells DOCTEST_CHECK.
#include <ATen/ATen.h>

#include "mds/model/gpt_model.h"
#include "mds/trainer/comm.h"
#include "mds/trainer/finalize_grads.h"
#include "mds/trainer/grad_reducer.h"
#include "tensor_support.h"

using mds::trainer_test::floats;

using namespace mds::trainer;

namespace {

mds::model::GptConfig tiny() {
    mds::model::GptConfig c;
    c.num_layers = 2;
    c.hidden_size = 32;
    c.ffn_hidden_size = 64;
    c.num_attention_heads = 4;
    c.seq_length = 8;
    c.max_position_embeddings = 8;
    c.padded_vocab_size = 64;
    c.hidden_dropout = c.attention_dropout = 0.0;
    return c;
}

}  // namespace

TEST_CASE("the one-process communicator: rank 0 of 1, every group {0}, coordinates zeros") {
    const auto comm = Communicator::single_process();
    DOCTEST_CHECK(comm->rank() == 0);
    DOCTEST_CHECK(comm->world_size() == 1);
    DOCTEST_CHECK(comm->layout().tp() == 1);
    DOCTEST_CHECK(comm->layout().pp() == 1);
    DOCTEST_CHECK(comm->layout().dp() == 1);
    const auto c = comm->coordinates();
    DOCTEST_CHECK(c.tp == 0);
    DOCTEST_CHECK(c.dp == 0);
    DOCTEST_CHECK(c.pp == 0);
    for (const Group g : {Group::World, Group::Tensor, Group::Data, Group::Pipeline, Group::Embedding})
        DOCTEST_CHECK(comm->members(g) == std::vector<int>{0});
}

TEST_CASE("the one-process communicator's collectives are identities") {
    const auto comm = Communicator::single_process();
    // Numbers come back bit for bit (a trainer divides them by DP = 1 afterwards).
    const double x = 0.1 + 0.2;
    DOCTEST_CHECK(comm->sum(x, Group::Data) == x);
    DOCTEST_CHECK(comm->max(-3.5, Group::World) == -3.5);
    DOCTEST_CHECK(comm->max(std::vector<double>{15, 0, 2.25}, Group::World) == std::vector<double>{15, 0, 2.25});
    DOCTEST_CHECK(comm->max(std::vector<double>{}, Group::World).empty());

    // all_reduce_sum leaves the tensors, or only applies the scale.
    auto a = floats(6), b = floats(4).view({2, 2});
    comm->all_reduce_sum({a, b}, Group::Data);
    DOCTEST_CHECK(a.equal(floats(6)));
    DOCTEST_CHECK(b.equal(floats(4).view({2, 2})));
    comm->all_reduce_sum({a, b}, Group::Tensor, 0.5);
    DOCTEST_CHECK(a.equal(floats(6) * 0.5));
    DOCTEST_CHECK(b.equal(floats(4).view({2, 2}) * 0.5));

    auto m = floats(3);
    comm->all_reduce_max(m, Group::Tensor);
    DOCTEST_CHECK(m.equal(floats(3)));
    auto flat = floats(5);
    comm->start_all_reduce_sum(flat, Group::Data)();
    DOCTEST_CHECK(flat.equal(floats(5)));

    const auto gathered = comm->all_gather(floats(4), Group::Data);
    REQUIRE(gathered.size() == 1);
    DOCTEST_CHECK(gathered[0].equal(floats(4)));

    comm->exchange({});  // nothing to move
    // Point to point needs a peer: there is none.
    DOCTEST_CHECK_THROWS(comm->exchange({{floats(2), 0, true, 0}}));
    comm->barrier();
    comm->finish();
}

TEST_CASE("GradientReducer on one process: every gradient scaled, a missing one becomes zeros") {
    const auto comm = Communicator::single_process();
    mds::model::GptModel model(tiny(), at::kCPU, 1234);
    auto& params = model.parameters();
    for (std::size_t k = 0; k + 1 < params.size(); ++k) params[k].tensor.mutable_grad() = at::ones_like(params[k].tensor);
    GradientReducer reducer(params, *comm, 0.25, 4096);
    DOCTEST_CHECK(reducer.buckets() > 1);
    reducer.finish();
    for (std::size_t k = 0; k + 1 < params.size(); ++k) DOCTEST_CHECK(params[k].tensor.grad().equal(at::full_like(params[k].tensor, 0.25)));
    REQUIRE(params.back().tensor.grad().defined());
    DOCTEST_CHECK(params.back().tensor.grad().count_nonzero().item<std::int64_t>() == 0);
    DOCTEST_CHECK(reducer.started_during_backward() == 0);
}

TEST_CASE("finalize_model_grads on one process: the data-parallel mean, nothing else for one stage") {
    const auto comm = Communicator::single_process();
    mds::model::GptModel model(tiny(), at::kCPU, 1234);
    auto& params = model.parameters();
    for (auto& p : params) p.tensor.mutable_grad() = at::full_like(p.tensor, 3.0);
    finalize_model_grads(model, *comm, nullptr);  // DP = 1, PP = 1: nothing to do
    for (auto& p : params) DOCTEST_CHECK(p.tensor.grad().equal(at::full_like(p.tensor, 3.0)));
    GradientReducer reducer(params, *comm, 0.5);
    finalize_model_grads(model, *comm, &reducer);
    for (auto& p : params) DOCTEST_CHECK(p.tensor.grad().equal(at::full_like(p.tensor, 1.5)));
}

TEST_CASE("finalize_model_grads: a first pipeline stage's tied embedding gets a gradient (zeros without one)") {
    const auto comm = Communicator::single_process();
    mds::model::PipelineStage stage;
    stage.rank = 0;
    stage.size = 2;
    stage.first_block = 0;
    stage.end_block = 1;
    mds::model::GptModel model(tiny(), at::kCPU, 1234, {}, stage);
    auto& w = model.parameter(mds::model::kEmbeddingLayer, "word_embeddings.weight").tensor;
    DOCTEST_CHECK(!w.grad().defined());
    finalize_model_grads(model, *comm, nullptr);
    REQUIRE(w.grad().defined());
    DOCTEST_CHECK(w.grad().count_nonzero().item<std::int64_t>() == 0);
    // A gradient there is summed over the embedding group: {0} alone keeps it.
    w.mutable_grad() = at::full_like(w, 2.0);
    finalize_model_grads(model, *comm, nullptr);
    DOCTEST_CHECK(w.grad().equal(at::full_like(w, 2.0)));
}
