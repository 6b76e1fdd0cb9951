// quantize_weight_only and the MatMulNBits op it writes: hand-computed codes, numbers against an
// independent block-wise int4 computation, ONNX round trip, errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/graph.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/op_registry.h"
#include "quantize/observer.h"
#include "quantize/weight_only.h"
#include "tests/test_util.h"

namespace pare::quantize {
namespace {

using core::Dim;
using core::Graph;

TEST(MatMulNBits, UnpacksLowNibbleFirstAndSubtractsTheDefaultZeroPoint) {
  // One row of K = 16 codes 0, 1, ..., 15 (bytes 0x10, 0x32, ...): w = (q - 8) * 0.5.
  at::Tensor b = at::empty({1, 1, 8}, at::kByte);
  for (int i = 0; i < 8; ++i) b[0][0][i] = (2 * i) | ((2 * i + 1) << 4);
  core::Node n;
  n.op_type = "MatMulNBits";
  n.name = "mm";
  n.inputs = {"a", "b", "s"};
  n.outputs = {"y"};
  n.attrs = {{"K", int64_t{16}}, {"N", int64_t{1}}, {"bits", int64_t{4}}, {"block_size", int64_t{16}}};
  at::Tensor a = at::zeros({2, 16});
  a[0].fill_(1);
  a[1][15] = 1;  // picks code 15: (15 - 8) * 0.5
  at::Tensor y = core::OpRegistry::global().get("MatMulNBits").forward(n, {a, b, at::full({1}, 0.5f)}, {}).at(0);
  EXPECT_FLOAT_EQ(y[0][0].item<float>(), -4.0f);  // sum(q - 8) = -8, times 0.5
  EXPECT_FLOAT_EQ(y[1][0].item<float>(), 3.5f);
}

Graph wide_mlp() {
  at::manual_seed(3);
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 40}});
  g.initializers["w1"] = at::randn({24, 40}) * 0.2;  // Gemm transB: [N, K]
  g.initializers["b1"] = at::randn({24}) * 0.1;
  g.initializers["w2"] = at::randn({24, 5}) * 0.2;  // MatMul: [K, N]
  g.add_node("Gemm", {"x", "w1", "b1"}, {"h"}, {{"transB", int64_t{1}}}, "fc1");
  g.add_node("Relu", {"h"}, {"r"});
  g.add_node("MatMul", {"r", "w2"}, {"y"}, {}, "fc2");
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 5}});
  return g;
}

// Block-wise symmetric int4 of w [N, K] along K, written independently of the pass.
at::Tensor int4_reference(const at::Tensor& w, int64_t group) {
  at::Tensor out = at::empty_like(w);
  for (int64_t r = 0; r < w.size(0); ++r)
    for (int64_t k0 = 0; k0 < w.size(1); k0 += group) {
      at::Tensor blk = w[r].narrow(0, k0, std::min(group, w.size(1) - k0));
      const float s = blk.abs().max().item<float>() / 7.0f;
      out[r].narrow(0, k0, blk.size(0)).copy_(at::clamp(at::round(blk / s), -8, 7) * s);
    }
  return out;
}

TEST(WeightOnly, RewritesGemmAndMatMulIntoMatMulNBitsWithTheSameNumbersAsAReference) {
  Graph g = wide_mlp();
  WeightOnlyResult r = quantize_weight_only(g, WeightOnlyOptions().group(16));
  ASSERT_EQ(r.layers.size(), 2u);
  int nbits = 0, adds = 0;
  for (auto& n : r.graph.nodes) {
    nbits += n.op_type == "MatMulNBits";
    adds += n.op_type == "Add";
    if (n.op_type == "MatMulNBits") EXPECT_EQ(n.domain, "com.microsoft");
  }
  EXPECT_EQ(nbits, 2);
  EXPECT_EQ(adds, 1);  // fc1's bias
  EXPECT_EQ(r.graph.initializers.count("w1"), 0u);
  EXPECT_LT(r.quantized_bytes * 4, r.fp32_bytes);
  at::Tensor x = at::randn({6, 40});
  at::Tensor w1 = int4_reference(g.initializers["w1"], 16);
  at::Tensor w2 = int4_reference(g.initializers["w2"].t().contiguous(), 16);
  at::Tensor want = at::matmul(at::relu(at::addmm(g.initializers["b1"], x, w1.t())), w2.t());
  core::Module m(r.graph);
  at::NoGradGuard no_grad;
  at::Tensor got = m.forward({x}).at(0);
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5)) << (got - want).abs().max();
  core::Module fp(g);
  EXPECT_GT(sqnr_db(fp.forward({x}).at(0), got), 15.0);
  // Through ONNX (com.microsoft opset import, uint8 packed codes) and back.
  Graph back = core::parse_onnx(core::serialize_onnx(r.graph), "mlp.int4.onnx");
  core::Module m2(back);
  EXPECT_TRUE(m2.forward({x}).at(0).equal(got));
}

TEST(WeightOnly, RejectsAGroupThatIsNotAPowerOfTwoAndAQuantizedModel) {
  pare::testing::expect_option_error([] { quantize_weight_only(wide_mlp(), WeightOnlyOptions().group(24)); },
                                    "group", {"group must", "power of two", "24"});
  WeightOnlyResult r = quantize_weight_only(wide_mlp(), WeightOnlyOptions());
  Graph q = r.graph;
  q.initializers["junk"] = at::zeros({2}, at::kChar);
  pare::testing::expect_input_error([&] { quantize_weight_only(q, WeightOnlyOptions()); },
                                    {"already quantized"});
}

}  // namespace
}  // namespace pare::quantize
