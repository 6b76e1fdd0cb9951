// fold_batch_norm: Before/After graphs give the same numbers and BatchNorm is gone.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/graph.h"
#include "core/module.h"
#include "tests/quantize/quant_test_util.h"
#include "quantize/fold_bn.h"

namespace pare::quantize {
namespace {

using core::Dim;
using core::Graph;
using testing::count;
using testing::run_eval;

void add_bn(Graph& g, const std::string& in, const std::string& out, int64_t c) {
  g.initializers["bn_scale"] = at::rand({c}) + 0.5;
  g.initializers["bn_b"] = at::randn({c});
  g.initializers["bn_mean"] = at::randn({c});
  g.initializers["bn_var"] = at::rand({c}) + 0.1;
  g.add_node("BatchNormalization", {in, "bn_scale", "bn_b", "bn_mean", "bn_var"}, {out},
             {{"epsilon", 1e-3f}}, "bn");
}

TEST(FoldBatchNorm, FusesConvFollowedByBn) {
  at::manual_seed(0);
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 3, 8, 8}});
  g.initializers["w"] = at::randn({4, 3, 3, 3});
  g.initializers["b"] = at::randn({4});
  g.add_node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}, "conv");
  add_bn(g, "c", "bn_out", 4);
  g.add_node("Relu", {"bn_out"}, {"y"});
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 4, 8, 8}});
  at::Tensor x = at::randn({2, 3, 8, 8});
  at::Tensor before = run_eval(g, x);
  Graph after = g;
  EXPECT_EQ(fold_batch_norm(after), 1);
  EXPECT_EQ(count(after, "BatchNormalization"), 0);
  EXPECT_EQ(count(after, "Conv"), 1);
  EXPECT_EQ(after.initializers.count("bn_mean"), 0u);  // unused initializers are dropped
  EXPECT_TRUE(at::allclose(run_eval(after, x), before, 1e-4, 1e-5));
}

TEST(FoldBatchNorm, FusesGemmWithAndWithoutTransposedWeight) {
  for (int64_t trans_b : {0, 1}) {
    SCOPED_TRACE(trans_b);
    at::manual_seed(1);
    Graph g;
    g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 6}});
    g.initializers["w"] = trans_b ? at::randn({5, 6}) : at::randn({6, 5});
    g.initializers["c"] = at::randn({5});
    g.add_node("Gemm", {"x", "w", "c"}, {"h"}, {{"transB", trans_b}, {"beta", 0.5f}}, "fc");
    add_bn(g, "h", "y", 5);
    g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 5}});
    at::Tensor x = at::randn({3, 6});
    at::Tensor before = run_eval(g, x);
    EXPECT_EQ(fold_batch_norm(g), 1);
    EXPECT_EQ(count(g, "BatchNormalization"), 0);
    EXPECT_TRUE(at::allclose(run_eval(g, x), before, 1e-4, 1e-5));
  }
}

TEST(FoldBatchNorm, LeavesAConvWhoseOutputIsAlsoReadElsewhere) {
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 3, 4, 4}});
  g.initializers["w"] = at::randn({3, 3, 1, 1});
  g.add_node("Conv", {"x", "w"}, {"c"}, {}, "conv");
  add_bn(g, "c", "n", 3);
  g.add_node("Add", {"n", "c"}, {"y"});
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 3, 4, 4}});
  EXPECT_EQ(fold_batch_norm(g), 0);
  EXPECT_EQ(count(g, "BatchNormalization"), 1);
}

}  // namespace
}  // namespace pare::quantize
