// Helpers shared by the quantize test suites.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/graph.h"
#include "core/module.h"

namespace pare::quantize::testing {

/// How many nodes of `g` run `op`.
inline int count(const core::Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

/// Conv -> BatchNorm -> Relu -> MaxPool -> Flatten -> Gemm "fc" (3 classes) on x [N, 1, 6, 6]: a
/// BatchNorm to fold, a fused Relu, passthrough scales, int32 biases. With `hidden` > 0 the head is
/// Gemm "fc1" (hidden units) -> Relu -> Gemm "fc2" instead. Weights drawn from `seed`.
inline core::Graph conv_bn_net(uint64_t seed, int64_t hidden = 0) {
  using core::Dim;
  at::manual_seed(seed);
  core::Graph g;
  g.name = hidden > 0 ? "small" : "tiny";
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 1, 6, 6}});
  g.initializers["w1"] = at::randn({4, 1, 3, 3}) * 0.5;
  g.initializers["b1"] = at::randn({4}) * 0.1;
  g.initializers["bn_s"] = at::rand({4}) + 0.5;
  g.initializers["bn_b"] = at::randn({4}) * 0.1;
  g.initializers["bn_m"] = at::randn({4}) * 0.1;
  g.initializers["bn_v"] = at::rand({4}) + 0.5;
  const int64_t first = hidden > 0 ? hidden : 3;
  g.initializers["w2"] = at::randn({first, 16}) * 0.3;
  g.initializers["b2"] = at::randn({first}) * 0.1;
  if (hidden > 0) {
    g.initializers["w3"] = at::randn({3, hidden}) * 0.3;
    g.initializers["b3"] = at::randn({3}) * 0.1;
  }
  g.add_node("Conv", {"x", "w1", "b1"}, {"c1"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}, "conv1");
  g.add_node("BatchNormalization", {"c1", "bn_s", "bn_b", "bn_m", "bn_v"}, {"n1"}, {}, "bn1");
  g.add_node("Relu", {"n1"}, {"r1"}, {}, "relu1");
  g.add_node("MaxPool", {"r1"}, {"p1"},
             {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{3, 3}}}, "pool1");
  g.add_node("Flatten", {"p1"}, {"f1"}, {}, "flat");
  if (hidden > 0) {
    g.add_node("Gemm", {"f1", "w2", "b2"}, {"h"}, {{"transB", int64_t{1}}}, "fc1");
    g.add_node("Relu", {"h"}, {"r2"}, {}, "relu2");
    g.add_node("Gemm", {"r2", "w3", "b3"}, {"y"}, {{"transB", int64_t{1}}}, "fc2");
  } else {
    g.add_node("Gemm", {"f1", "w2", "b2"}, {"y"}, {{"transB", int64_t{1}}}, "fc");
  }
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 3}});
  g.verify();
  return g;
}

/// Output 0 of `g` on `x`, in eval mode without autograd.
inline at::Tensor run_eval(const core::Graph& g, const at::Tensor& x) {
  core::Module m(g);
  m.eval();
  at::NoGradGuard no_grad;
  return m.forward({x}).at(0);
}

}  // namespace pare::quantize::testing
