// pare_rt's load-time passes one at a time (rt/passes.h): a tiny Before graph built here, the pass
// run alone, the After graph's structure and constants checked. Torch-free: links pare_rt alone.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "rt/internal.h"
#include "rt/passes.h"
#include "tests/rt/rt_graph.h"

namespace pare::rt {
namespace {

using Ops = std::vector<std::string>;

TEST(PassTable, EveryPassHasANameASummaryAndAFunction) {
  ASSERT_FALSE(graph_passes().empty());
  for (const Pass& p : graph_passes()) {
    EXPECT_GT(std::strlen(p.name), 0u);
    EXPECT_GT(std::strlen(p.summary), 10u) << p.name;
    EXPECT_NE(p.run, nullptr) << p.name;
  }
  EXPECT_THROW(find_pass("no_such_pass"), InternalError);
}

TEST(PassTable, RunPassesNamesThePassesThatChangedTheGraph) {
  Before b;
  b.input("x").node("Identity", {"x"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.output("y");
  run_passes(b.g, Options(), b.rep);
  EXPECT_EQ(b.rep.passes, (Ops{"bypass_identities", "sort_nodes"}));
  EXPECT_EQ(b.ops(), Ops{"Relu"});
  EXPECT_NE(b.rep.to_text().find("passes that changed the graph: bypass_identities sort_nodes"), std::string::npos);
}

TEST(PassTable, Int8PassesRunOnlyWhenQdqIsLowered) {
  Before b;
  b.quantized_input("x", "xq").dequantize("xq", "xd");
  b.node("Relu", {"xd"}, {"y"});
  b.output("y");
  Before c = b;
  run_passes(b.g, Options().int8(false), b.rep);
  for (auto& p : b.rep.passes) EXPECT_FALSE(find_pass(p).int8_only) << p;
  run_passes(c.g, Options(), c.rep);
  EXPECT_EQ(c.ops(), (Ops{"QuantizeLinear", "DequantizeLinear", "Relu"}));
}

TEST(DecodeMatmulNbits, DecodesFourBitWeightsIntoAFloatMatMul) {
  Before b;
  // K = 16, N = 1, one block of 16: every byte 0x98 holds codes 8 (low) and 9 (high); zero point 8.
  b.input("x").constant("B", ints<uint8_t>(DType::kUInt8, {1, 1, 8}, std::vector<uint8_t>(8, 0x98)));
  b.constant("scales", f32({1}, {0.5f}));
  b.node("MatMulNBits", {"x", "B", "scales"}, {"y"}, {{"K", int64_t{16}}, {"N", int64_t{1}}, {"block_size", int64_t{16}}},
         "com.microsoft");
  b.output("y");
  ASSERT_TRUE(b.run("decode_matmul_nbits"));
  ASSERT_EQ(b.ops(), Ops{"MatMul"});
  const Node& m = *b.live("MatMul");
  EXPECT_EQ(m.domain, "");
  const HTensor* w = b.g.constant(m.in[1]);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->dims, (std::vector<int64_t>{16, 1}));
  for (int64_t k = 0; k < 16; ++k) EXPECT_FLOAT_EQ(w->ptr<float>()[k], k % 2 ? 0.5f : 0.f) << k;
  EXPECT_FALSE(b.run("decode_matmul_nbits"));
}

TEST(BypassIdentities, ReadersReadTheIdentitysInput) {
  Before b;
  b.input("x").node("Identity", {"x"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.node("Identity", {"y"}, {"out"});  // a graph output: stays
  b.output("out");
  ASSERT_TRUE(b.run("bypass_identities"));
  EXPECT_EQ(b.ops(), (Ops{"Relu", "Identity"}));
  EXPECT_EQ(b.name(b.live("Relu")->in[0]), "x");
  EXPECT_FALSE(b.run("bypass_identities"));
}

// x -> Q -> DQ -> MatMul(int8 weight w, scale 0.05) -> y
Before int8_matmul(HTensor weight) {
  Before b;
  b.quantized_input("x", "xq").dequantize("xq", "xd");
  b.constant("w", std::move(weight)).constant("ws", f32({}, {0.05f})).constant("wz", ints<int8_t>(DType::kInt8, {}, {0}));
  b.node("DequantizeLinear", {"w", "ws", "wz"}, {"wd"});
  b.node("MatMul", {"xd", "wd"}, {"y"});
  b.output("y");
  return b;
}

TEST(FuseQdq, LowersDqMatMulIntoQMatMul) {
  Before b = int8_matmul(ints<int8_t>(DType::kInt8, {2, 3}, {1, -2, 3, -4, 5, -6}));
  ASSERT_TRUE(b.run("fuse_qdq"));
  const Node* q = b.live("QMatMul");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->domain, "pare_rt");
  EXPECT_EQ(b.name(q->in[0]), "xq");
  EXPECT_EQ(b.name(q->out[0]), "y");
  EXPECT_FLOAT_EQ(q->q.x_scale, 0.1f);
  EXPECT_EQ(q->q.x_zero, 128);
  EXPECT_EQ(q->q.w_scale, std::vector<float>{0.05f});
  EXPECT_EQ(b.live("MatMul"), nullptr);
  EXPECT_EQ(b.rep.int8_ops, 1);
  EXPECT_TRUE(b.rep.fallbacks.empty());
}

TEST(FuseQdq, SaysWhyAPatternStaysFloat) {
  Before b = int8_matmul(ints<uint8_t>(DType::kUInt8, {2, 3}, {1, 2, 3, 4, 5, 6}));
  b.g.values[static_cast<size_t>(b.v("wz"))].constant = u8(0);
  EXPECT_FALSE(b.run("fuse_qdq"));
  EXPECT_NE(b.live("MatMul"), nullptr);
  ASSERT_EQ(b.rep.fallbacks.size(), 1u);
  EXPECT_NE(b.rep.fallbacks[0].find("MatMul 'y_node': stays float"), std::string::npos) << b.rep.fallbacks[0];
  EXPECT_NE(b.rep.fallbacks[0].find("the weight is uint8"), std::string::npos) << b.rep.fallbacks[0];
}

TEST(FuseQdq, LowersDqAddIntoQAdd) {
  Before b;
  b.quantized_input("x0", "a").dequantize("a", "ad").quantized_input("x1", "c").dequantize("c", "cd");
  b.node("Add", {"ad", "cd"}, {"y"});
  b.output("y");
  ASSERT_TRUE(b.run("fuse_qdq"));
  const Node* q = b.live("QAdd");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(b.name(q->in[0]), "a");
  EXPECT_EQ(b.name(q->in[1]), "c");
  EXPECT_EQ(b.live("Add"), nullptr);
}

TEST(FuseQdq, RunsAPassThroughOpOnTheIntegers) {
  Before b;
  b.quantized_input("x", "xq").dequantize("xq", "xd");
  b.node("Flatten", {"xd"}, {"f"});
  b.node("QuantizeLinear", {"f", "s_xq", "z_xq"}, {"fq"});
  b.output("fq");
  ASSERT_TRUE(b.run("fuse_qdq"));
  EXPECT_EQ(b.ops(), (Ops{"QuantizeLinear", "DequantizeLinear", "Flatten"}));
  EXPECT_EQ(b.name(b.live("Flatten")->in[0]), "xq");
  EXPECT_EQ(b.name(b.live("Flatten")->out[0]), "fq");
}

TEST(DropDead, DropsNodesNobodyReads) {
  Before b;
  b.input("x").node("Relu", {"x"}, {"unused"});
  b.node("Neg", {"x"}, {"y"});
  b.output("y");
  ASSERT_TRUE(b.run("drop_dead"));
  EXPECT_EQ(b.ops(), Ops{"Neg"});
  EXPECT_FALSE(b.run("drop_dead"));
}

// A requantizing QConv 'c' whose output goes to a QAdd with residual r -> out.
Before conv_then_add() {
  Before b;
  b.input("x").input("r").constant("w", ints<int8_t>(DType::kInt8, {1, 1, 1, 1}, {1}));
  Node& c = b.node("QConv", {"x", "w"}, {"c"}, {}, "pare_rt");
  c.q.requantize = true;
  c.q.y_scale = 0.5f;
  c.q.y_type = DType::kUInt8;
  Node& a = b.node("QAdd", {"c", "r"}, {"out"}, {}, "pare_rt");
  a.q.requantize = true;
  a.q.b_scale = 0.25f;
  a.q.y_scale = 2.f;
  b.output("out");
  return b;
}

TEST(FuseResiduals, FoldsTheAddIntoTheConvAsASum) {
  Before b = conv_then_add();
  ASSERT_TRUE(b.run("fuse_residuals"));
  EXPECT_EQ(b.ops(), Ops{"QConv"});
  const Node& c = *b.live("QConv");
  EXPECT_TRUE(c.q.sum);
  ASSERT_EQ(c.in.size(), 3u);
  EXPECT_EQ(b.name(c.in[2]), "r");
  EXPECT_EQ(b.name(c.out[0]), "out");
  EXPECT_FLOAT_EQ(c.q.sum_scale, 0.25f);
  EXPECT_FLOAT_EQ(c.q.mid_scale, 0.5f);
  EXPECT_FLOAT_EQ(c.q.y_scale, 2.f);
}

TEST(NoteSaturation, NotesWideWeightsWithoutChangingTheGraph) {
  Before b = conv_then_add();
  b.g.values[static_cast<size_t>(b.v("w"))].constant = ints<int8_t>(DType::kInt8, {1, 1, 1, 1}, {100});
  EXPECT_FALSE(b.run("note_saturation"));
  EXPECT_EQ(b.ops(), (Ops{"QConv", "QAdd"}));
  for (auto& n : b.rep.notes) EXPECT_NE(n.find("VNNI"), std::string::npos) << n;  // only on CPUs without VNNI
}

TEST(FoldConstants, ComputesNodesOfConstantsAtLoad) {
  Before b;
  b.constant("a", f32({2}, {1, 2})).constant("c", f32({2}, {3, 4}));
  b.node("Add", {"a", "c"}, {"s"});
  b.input("x").node("Mul", {"x", "s"}, {"y"});
  b.output("y");
  ASSERT_TRUE(b.run("fold_constants"));
  EXPECT_EQ(b.ops(), Ops{"Mul"});
  const HTensor* s = b.g.constant(b.v("s"));
  ASSERT_NE(s, nullptr);
  EXPECT_FLOAT_EQ(s->ptr<float>()[0], 4.f);
  EXPECT_FLOAT_EQ(s->ptr<float>()[1], 6.f);
  EXPECT_EQ(b.rep.constant_nodes, 1);
}

TEST(FoldBatchNorms, FoldsScaleAndShiftIntoTheConv) {
  Before b;
  b.input("x").constant("w", f32({1, 1, 1, 1}, {2})).constant("bias", f32({1}, {1}));
  b.constant("gamma", f32({1}, {3})).constant("beta", f32({1}, {1})).constant("mean", f32({1}, {0.5f}));
  b.constant("var", f32({1}, {4}));
  b.node("Conv", {"x", "w", "bias"}, {"c"});
  b.node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"y"}, {{"epsilon", 0.f}});
  b.output("y");
  ASSERT_TRUE(b.run("fold_batch_norms"));
  EXPECT_EQ(b.ops(), Ops{"Conv"});
  const Node& c = *b.live("Conv");
  EXPECT_EQ(b.name(c.out[0]), "y");
  const float s = 3.f / 2.f;  // gamma / sqrt(var + eps)
  EXPECT_FLOAT_EQ(b.g.constant(c.in[1])->ptr<float>()[0], 2 * s);
  EXPECT_FLOAT_EQ(b.g.constant(c.in[2])->ptr<float>()[0], (1 - 0.5f) * s + 1);
  EXPECT_EQ(b.rep.folded_batch_norms, 1);
}

TEST(FuseActivations, MakesTheReluAPostOpOfTheConv) {
  Before b;
  b.input("x").constant("w", f32({1, 1, 1, 1}, {2}));
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Relu", {"c"}, {"y"});
  b.output("y");
  ASSERT_TRUE(b.run("fuse_activations"));
  EXPECT_EQ(b.ops(), Ops{"Conv"});
  const Node& c = *b.live("Conv");
  ASSERT_EQ(c.post.size(), 1u);
  EXPECT_EQ(c.post[0].alg, dnnl::algorithm::eltwise_relu);
  EXPECT_EQ(b.name(c.out[0]), "y");
}

TEST(SortNodes, PutsProducersFirstAndDropsDeadNodes) {
  Before b;
  b.input("x").node("Neg", {"a"}, {"y"});  // reads a, produced by the next node
  b.node("Relu", {"x"}, {"a"});
  b.node("Abs", {"x"}, {"gone"}).dead = true;
  b.output("y");
  ASSERT_TRUE(b.run("sort_nodes"));
  EXPECT_EQ(b.ops(), (Ops{"Relu", "Neg"}));
  EXPECT_EQ(b.g.nodes.size(), 2u);
  EXPECT_EQ(b.g.values[static_cast<size_t>(b.v("a"))].producer, 0);
  EXPECT_FALSE(b.run("sort_nodes"));
}

TEST(MarkInplace, LetsTheConvOverwriteAResidualNobodyReadsLater) {
  Before b;
  b.input("x").node("Relu", {"x"}, {"r"});
  b.constant("w", ints<int8_t>(DType::kInt8, {1, 1, 1, 1}, {1}));
  Node& c = b.node("QConv", {"x", "w", "r"}, {"y"}, {}, "pare_rt");
  c.q.sum = true;
  b.output("y");
  ASSERT_TRUE(b.run("mark_inplace"));
  EXPECT_TRUE(b.live("QConv")->q.inplace);

  b.node("Neg", {"r"}, {"later"});  // a later reader of the residual
  b.output("later");
  EXPECT_FALSE(b.run("mark_inplace"));
  EXPECT_FALSE(b.live("QConv")->q.inplace);
}

}  // namespace
}  // namespace pare::rt
