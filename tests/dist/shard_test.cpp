// Tests for dist/shard.h: tensor-parallel and pipeline teachers give the whole model's outputs.
// The ranks are threads of this process, each with a real Gloo group over a TCPStore on a free port.
#include "dist/shard.h"

#include <ATen/core/grad_mode.h>

#include <gtest/gtest.h>

#include <algorithm>

#include "core/module.h"
#include "core/onnx_io.h"
#include "dist/tensor_parallel.h"
#include "tests/dist_util.h"
#include "tests/test_util.h"

using namespace pare;
using pare::testing::expect_input_error;
using pare::testing::on_ranks;

namespace {

at::Tensor whole_output(const core::Graph& g, const at::Tensor& x) {
  core::Module m(g);
  m.eval();
  at::NoGradGuard no_grad;
  return m.forward({x})[0];
}

// Each rank feeds its own rows (rank r: 2 + r rows); its outputs must equal the whole model's on them.
void expect_sharded_equals_whole(const core::Graph& g, const at::Tensor& x, dist::TeacherParallel mode,
                                 int ranks, double tol, double max_share) {
  const at::Tensor want = whole_output(g, x);
  on_ranks(ranks, [&](int r, std::shared_ptr<dist::ProcessGroup> pg) {
    dist::ShardedModel sm(g, mode, pg->new_group("teacher"));
    int64_t first = 0;
    for (int q = 0; q < r; ++q) first += 2 + q;
    for (int repeat = 0; repeat < 2; ++repeat) {  // the collectives line up call after call
      at::Tensor got = sm.forward(x.narrow(0, first, 2 + r));
      ASSERT_EQ(got.sizes(), want.narrow(0, first, 2 + r).sizes());
      const double diff = (got - want.narrow(0, first, 2 + r)).abs().max().item<double>();
      EXPECT_LE(diff, tol) << g.name << " " << dist::teacher_parallel_name(mode) << " rank " << r;
    }
    const auto& rep = sm.report();
    ASSERT_EQ(rep.rank_params.size(), static_cast<size_t>(ranks));
    EXPECT_EQ(rep.rank_params[r], sm.shard().parameter_count());
    for (auto p : rep.rank_params)
      EXPECT_LE(static_cast<double>(p), max_share * rep.params) << g.name << "\n" << rep.to_text();
  });
}

at::Tensor images(int64_t n, int64_t c = 1, int64_t hw = 28) {
  at::manual_seed(3);
  return at::rand({n, c, hw, hw});
}

const char* kTransformer = "transformer:vocab=50,d=32,heads=4,layers=2,classes=10,seq=8";

}  // namespace

TEST(TensorParallel, CnnMatchesTheWholeModelWithAboutHalfTheWeightsPerRank) {
  expect_sharded_equals_whole(core::load_model("cnn", 1), images(5), dist::TeacherParallel::kTensor, 2, 1e-5, 0.52);
}

TEST(TensorParallel, ResNetAndTransformerMatchTheWholeModel) {
  expect_sharded_equals_whole(core::load_model("resnet:1", 1), images(5), dist::TeacherParallel::kTensor, 2, 1e-5, 0.55);
  at::manual_seed(4);
  expect_sharded_equals_whole(core::load_model(kTransformer, 1), at::randint(0, 50, {5, 8}, at::kLong),
                              dist::TeacherParallel::kTensor, 2, 1e-5, 0.55);
}

TEST(TensorParallel, SplitsAttentionByHeadsAndEachMlpOnceWithOneAllReducePerBlock) {
  dist::Shard s = dist::shard_tensor_parallel(core::load_model(kTransformer, 1), 1, 2);
  int reduces = 0, gathers = 0;
  for (auto& n : s.graph.nodes) {
    reduces += n.op_type == "AllReduce";
    gathers += n.op_type == "AllGather";
  }
  // The token embedding's partial sums (split by rows), then per layer: attention out-projection and
  // FFN fc2 (Megatron); the classifier's columns at the end.
  EXPECT_EQ(reduces, 5);
  EXPECT_EQ(gathers, 1);
  // Only the position embedding stays whole, by design (its indices are computed).
  ASSERT_EQ(s.report.replicated.size(), 1u) << s.report.to_text();
  EXPECT_NE(s.report.replicated[0].find("'pos_embed'"), std::string::npos);
  // The head split: rank 1's q projection holds columns 16..31 of the whole one.
  core::Graph whole = core::load_model(kTransformer, 1);
  const at::Tensor& wq = whole.initializers.at("layer0.attn.q.weight");
  bool found = false;
  for (auto& [k, t] : s.graph.initializers)
    if (k.rfind("layer0.attn.q.weight", 0) == 0) {
      found = true;
      EXPECT_TRUE(t.equal(wq.narrow(1, 16, 16))) << k;
    }
  EXPECT_TRUE(found);
}

// Every registered op has a sharding rule, as every op has prune's facets: its own (Conv, Gemm,
// ...), one from its core traits, or "run it whole" (opaque ops and ops that say nothing).
TEST(ShardFacets, EveryRegisteredOpHasARule) {
  pare::testing::register_test_ops();
  const core::OpRegistry& reg = dist::detail::shard_registry();
  for (const auto& name : reg.names())
    EXPECT_TRUE(reg.get(name).has_facet(dist::detail::kShardFacet)) << name;
}

// New ops (tests/test_util.h; docs/ARCHITECTURE.md, "Add an op"): one declared elementwise in its
// registry entry stays split between a column- and a row-parallel layer (one all-reduce, no
// gather); one that declares nothing gets its input made whole first. Both give the whole
// model's outputs.
TEST(TensorParallel, ANewElementwiseOpStaysSplitAndAnOpaqueOneIsMadeWhole) {
  pare::testing::register_test_ops();
  for (const std::string op : {"PareTestSquare", "PareTestOpaque"}) {
    SCOPED_TRACE(op);
    at::manual_seed(5);
    core::Graph g;
    g.name = "new_op_" + op;
    g.inputs.push_back({"x", at::kFloat, {core::Dim::sym("N"), 8}});
    g.initializers["w1"] = at::randn({8, 16});
    g.initializers["w2"] = at::randn({16, 4});
    g.add_node("MatMul", {"x", "w1"}, {"h"}, {}, "fc1");
    g.add_node(op, {"h"}, {"s"}, {}, "new_op");
    g.add_node("MatMul", {"s", "w2"}, {"y"}, {}, "fc2");
    g.outputs.push_back({"y", at::kFloat, {core::Dim::sym("N"), 4}});
    core::infer_shapes(g);
    expect_sharded_equals_whole(g, at::randn({5, 8}), dist::TeacherParallel::kTensor, 2, 1e-4, 0.55);
    dist::Shard s = dist::shard_tensor_parallel(g, 0, 2);
    int reduces = 0, gathers = 0;
    std::string gathered;
    for (auto& n : s.graph.nodes) {
      reduces += n.op_type == "AllReduce";
      if (n.op_type == "AllGather") {
        ++gathers;
        gathered += n.outputs[0] + " ";
      }
    }
    const core::Node* node = nullptr;
    for (auto& n : s.graph.nodes)
      if (n.op_type == op) node = &n;
    ASSERT_NE(node, nullptr) << s.report.to_text();
    if (op == "PareTestSquare") {
      EXPECT_EQ(reduces, 1) << s.report.to_text();
      EXPECT_EQ(gathers, 0) << s.report.to_text();
    } else {
      EXPECT_NE(gathered.find(node->inputs[0] + " "), std::string::npos)
          << "the opaque op reads " << node->inputs[0] << ", not a gathered value (" << gathered << ")";
    }
  }
}

// A decoder layer of ONNX opset 23 ops (RMSNormalization, RotaryEmbedding, Attention with 4 query
// heads over 2 KV heads, causal): the projections split by heads, RotaryEmbedding and Attention
// keep the split with num_heads / q_num_heads / kv_num_heads halved, one all-reduce after the
// out-projection, and the sharded layer computes the whole one.
TEST(TensorParallel, AttentionSplitsByHeadsWithTheirKvGroups) {
  at::manual_seed(6);
  const int64_t s = 5, hidden = 16;
  core::Graph g = pare::testing::decoder_layer_graph(s, 6);
  core::infer_shapes(g);
  expect_sharded_equals_whole(g, at::randn({5, s, hidden}), dist::TeacherParallel::kTensor, 2, 1e-5, 0.6);
  dist::Shard sh = dist::shard_tensor_parallel(g, 1, 2);
  int reduces = 0, gathers = 0;
  for (auto& n : sh.graph.nodes) {
    reduces += n.op_type == "AllReduce";
    gathers += n.op_type == "AllGather";
    if (n.op_type == "Attention") {
      EXPECT_EQ(n.attr_int("q_num_heads", 0), 2);
      EXPECT_EQ(n.attr_int("kv_num_heads", 0), 1);
    }
    if (n.name == "rope_k") EXPECT_EQ(n.attr_int("num_heads", 0), 1);
  }
  EXPECT_EQ(reduces, 1) << sh.report.to_text();
  EXPECT_EQ(gathers, 0) << sh.report.to_text();
  EXPECT_TRUE(sh.report.replicated.empty()) << sh.report.to_text();
}

TEST(TensorParallel, AShardRunWithoutItsGroupSaysHowToRunIt) {
  dist::Shard s = dist::shard_tensor_parallel(core::load_model("cnn", 1), 0, 2);
  core::Module m(s.graph);
  m.eval();
  expect_input_error([&] { m.forward({images(1)}); }, {"AllReduce", "pare launch"});
}

// The same ops on the same rows; only the batch size differs from the whole run (2..4 rows
// against 9), which may change a kernel's blocking in the last bits.
TEST(Pipeline, StagesGiveTheWholeModelsOutputs) {
  // The cnn's first Gemm holds 71% of its weights: a stage boundary cannot split it.
  expect_sharded_equals_whole(core::load_model("cnn", 1), images(5), dist::TeacherParallel::kPipeline, 2, 1e-6, 0.95);
  expect_sharded_equals_whole(core::load_model("resnet:1", 1), images(9), dist::TeacherParallel::kPipeline, 3, 1e-6, 0.7);
  at::manual_seed(4);
  expect_sharded_equals_whole(core::load_model(kTransformer, 1), at::randint(0, 50, {9, 8}, at::kLong),
                              dist::TeacherParallel::kPipeline, 3, 1e-6, 0.7);
}

TEST(Pipeline, StagesSplitTheWeightsAndCrossWithTheResidualStream) {
  core::Graph g = core::load_model(kTransformer, 1);
  int64_t params = 0;
  for (int r = 0; r < 2; ++r) {
    dist::Shard s = dist::pipeline_stage(g, r, 2);
    params += s.graph.parameter_count();
    EXPECT_EQ(s.report.rank_params[r], s.graph.parameter_count());
    if (r == 0) {
      ASSERT_EQ(s.report.boundary_bytes.size(), 1u);
      EXPECT_GT(s.report.boundary_bytes[0], 0);
      EXPECT_EQ(s.graph.inputs.at(0).name, "input");
    } else {
      EXPECT_EQ(s.graph.outputs.at(0).name, "logits");
    }
  }
  // Every weight is held once (only the scalar constants are shared).
  EXPECT_LE(params, g.parameter_count() + 8);
  EXPECT_GE(params, g.parameter_count());
  expect_input_error([&] { dist::pipeline_stage(core::load_model("mlp:4-3", 1), 0, 8); }, {"too few", "8 pipeline stages"});
}

TEST(Pipeline, AWeightLimitPerStageIsKeptOrRefused) {
  core::Graph g = core::load_model("resnet:1", 1);
  const int64_t total = g.initializer_bytes();
  // Unlimited, the stages balance FLOPs and bytes together; the ResNet's weights sit late.
  auto free = dist::pipeline_stage(g, 0, 2).report;
  const int64_t limit = total * 55 / 100;
  ASSERT_GT(*std::max_element(free.rank_bytes.begin(), free.rank_bytes.end()), limit) << free.to_text();
  auto capped = dist::pipeline_stage(g, 0, 2, limit).report;
  for (auto b : capped.rank_bytes) EXPECT_LE(b, limit) << capped.to_text();
  expect_input_error([&] { dist::pipeline_stage(g, 0, 2, total / 10); }, {"do not fit in 2 pipeline stages"});
  // One Gemm holds 71% of the cnn's weights: no cut between nodes gets a stage under 60%.
  core::Graph cnn = core::load_model("cnn", 1);
  expect_input_error([&] { dist::pipeline_stage(cnn, 1, 2, cnn.initializer_bytes() * 6 / 10); },
                     {"no cut between nodes"});
}

TEST(TeacherParallel, AutoSaysWhyItPicksNoneTensorOrPipeline) {
  core::Graph g = core::load_model("cnn", 1);
  dist::World one;
  EXPECT_EQ(dist::choose_teacher_parallel(g, one, 1).mode, dist::TeacherParallel::kNone);
  dist::World two;
  two.world_size = two.local_world_size = 2;
  auto fits = dist::choose_teacher_parallel(g, two, int64_t{1} << 40);
  EXPECT_EQ(fits.mode, dist::TeacherParallel::kNone);
  EXPECT_NE(fits.why.find("fit"), std::string::npos) << fits.why;
  auto tp = dist::choose_teacher_parallel(g, two, 1000);
  EXPECT_EQ(tp.mode, dist::TeacherParallel::kTensor) << tp.why;
  two.local_world_size = 1;  // two nodes
  auto pp = dist::choose_teacher_parallel(g, two, 1000);
  EXPECT_EQ(pp.mode, dist::TeacherParallel::kPipeline) << pp.why;
  EXPECT_NE(pp.why.find("2 nodes"), std::string::npos) << pp.why;
  expect_input_error([] { dist::parse_teacher_parallel("fsdp", "--teacher-parallel"); }, {"--teacher-parallel", "none, tp, pp or auto", "fsdp"});
}
