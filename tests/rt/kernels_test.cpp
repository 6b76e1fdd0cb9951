// pare_rt's kernel builders say why they refuse a node (BuildCtx::refuse): the plan runs the
// reference kernel instead and keeps the reason for the lowering report.
#include <gtest/gtest.h>

#include <string>

#include "rt/internal.h"
#include "tests/rt/rt_graph.h"

namespace pare::rt {
namespace {

std::unique_ptr<Plan> plan(const Graph& g, const std::vector<std::vector<int64_t>>& dims) {
  static WeightCache weights;
  dnnl::stream s(cpu_engine());
  return build_plan(g, dims, cpu_engine(), s, weights);
}

TEST(KernelRefusals, GemmWithAlphaAndAComputedBiasSaysWhy) {
  Before b;
  b.input("x").input("c").constant("w", f32({3, 4}, std::vector<float>(12, 1.f)));
  b.node("Gemm", {"x", "w", "c"}, {"y"}, {{"alpha", 2.f}, {"transB", int64_t{1}}});
  b.output("y");
  auto p = plan(b.g, {{2, 4}, {2, 3}});
  ASSERT_EQ(p->fallbacks.size(), 1u);
  EXPECT_EQ(p->fallbacks[0], "Gemm 'y_node': reference kernel: alpha=2 beta=1 with C computed at run time; oneDNN "
                             "adds the bias before scaling, so C must be a constant (or alpha=1 beta=1)");
}

TEST(KernelRefusals, AKernelThatTakesTheNodeLeavesNoFallback) {
  Before b;
  b.input("x").constant("w", f32({3, 4}, std::vector<float>(12, 1.f)));
  b.node("Gemm", {"x", "w"}, {"y"}, {{"transB", int64_t{1}}});
  b.output("y");
  EXPECT_TRUE(plan(b.g, {{2, 4}})->fallbacks.empty());
}

TEST(KernelRefusals, EltwiseOnIntegersNamesTheDtype) {
  Before b;
  b.input("x", DType::kInt32).node("Abs", {"x"}, {"y"});
  b.output("y");
  auto p = plan(b.g, {{2, 3}});
  ASSERT_EQ(p->fallbacks.size(), 1u);
  EXPECT_NE(p->fallbacks[0].find("Abs 'y_node': reference kernel: the input is int32"), std::string::npos)
      << p->fallbacks[0];
}

}  // namespace
}  // namespace pare::rt
