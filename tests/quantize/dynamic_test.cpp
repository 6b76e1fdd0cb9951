// quantize_dynamic: the DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add) structure,
// the numbers against an independent computation (activation scale from each batch's range), and
// the ops' exact integer arithmetic.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "core/graph.h"
#include "core/onnx_io.h"
#include "core/op_registry.h"
#include "quantize/dynamic.h"
#include "quantize/observer.h"
#include "quantize/ptq.h"
#include "tests/quantize/quant_test_util.h"
#include "tests/test_util.h"

namespace pare::quantize {
namespace {

using core::Dim;
using core::Graph;
using testing::run_eval;

// Gemm (transB, bias) -> Relu -> MatMul, the second reading the Relu output twice over.
Graph mlp() {
  at::manual_seed(4);
  Graph g;
  g.name = "mlp";
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 12}});
  g.initializers["w1"] = at::randn({16, 12}) * 0.3;
  g.initializers["b1"] = at::randn({16}) * 0.1;
  g.initializers["w2"] = at::randn({16, 5}) * 0.3;
  g.add_node("Gemm", {"x", "w1", "b1"}, {"h"}, {{"transB", int64_t{1}}}, "fc1");
  g.add_node("Relu", {"h"}, {"r"}, {}, "relu");
  g.add_node("MatMul", {"r", "w2"}, {"y"}, {}, "fc2");
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 5}});
  g.verify();
  return g;
}

// ONNX DynamicQuantizeLinear followed by dequantization, computed by hand.
at::Tensor dq_dynamic(const at::Tensor& x) {
  const float lo = std::min(0.0f, x.min().item<float>()), hi = std::max(0.0f, x.max().item<float>());
  const float s = (hi - lo) / 255.0f;
  const float zp = std::nearbyint(std::clamp(-lo / s, 0.0f, 255.0f));
  return (at::clamp(at::round(x / s) + zp, 0, 255) - zp) * s;
}

TEST(QuantizeDynamic, RewritesGemmAndMatMulIntoIntegerMatMulsWithRuntimeScales) {
  DynamicResult r = quantize_dynamic(mlp(), DynamicOptions());
  std::map<std::string, int> ops;
  for (auto& n : r.graph.nodes) ops[n.op_type]++;
  EXPECT_EQ(ops["Gemm"] + ops["MatMul"], 0);
  EXPECT_EQ(ops["DynamicQuantizeLinear"], 2);
  EXPECT_EQ(ops["MatMulInteger"], 2);
  EXPECT_EQ(ops["Cast"], 2);
  EXPECT_EQ(ops["Add"], 1);  // fc1's bias
  ASSERT_EQ(r.layers.size(), 2u);
  for (auto& [name, t] : r.graph.initializers)
    if (t.dim() == 2) EXPECT_EQ(t.scalar_type(), at::kChar) << name;
  EXPECT_LT(r.quantized_bytes, r.fp32_bytes);
}

TEST(QuantizeDynamic, OutputMatchesAnIndependentComputationWithPerBatchScales) {
  const Graph g = mlp();
  for (bool per_channel : {true, false}) {
    SCOPED_TRACE(per_channel ? "per channel" : "per tensor");
    DynamicResult r = quantize_dynamic(g, DynamicOptions().per_channel(per_channel));
    at::manual_seed(9);
    at::Tensor x = at::randn({20, 12});
    auto w = [&](const at::Tensor& kn) {
      QuantParams p = weight_params(kn, per_channel ? 1 : -1);
      return fake_quantize(kn, p);
    };
    at::Tensor h = at::relu(at::matmul(dq_dynamic(x), w(g.initializers.at("w1").t().contiguous())) +
                            g.initializers.at("b1"));
    at::Tensor want = at::matmul(dq_dynamic(h), w(g.initializers.at("w2")));
    at::Tensor got = run_eval(r.graph, x);
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max();
    // The scale follows the batch: a batch 10x larger gets a 10x coarser grid, not saturation.
    at::Tensor big = run_eval(r.graph, x * 10);
    EXPECT_GT(sqnr_db(run_eval(g, x * 10), big), 25.0);
    // And the model survives the ONNX round trip.
    Graph back = core::parse_onnx(core::serialize_onnx(r.graph), "mlp.dyn.onnx");
    EXPECT_TRUE(run_eval(back, x).equal(got));
  }
}

TEST(QuantizeDynamic, MatMulIntegerIsExact) {
  at::manual_seed(2);
  at::Tensor a = at::randint(0, 256, {3, 7, 300}).to(at::kByte);
  at::Tensor b = at::randint(-128, 128, {300, 9}).to(at::kChar);
  at::Tensor za = at::scalar_tensor(int64_t{131}, at::kByte);
  at::Tensor zb = at::randint(-3, 3, {9}).to(at::kChar);
  core::Node n;
  n.op_type = "MatMulInteger";
  n.name = "mmi";
  at::Tensor y = core::OpRegistry::global().get("MatMulInteger").forward(n, {a, b, za, zb}, {})[0];
  at::Tensor want = at::matmul(a.to(at::kLong) - 131, b.to(at::kLong) - zb.to(at::kLong));
  EXPECT_EQ(y.scalar_type(), at::kInt);
  EXPECT_TRUE(y.to(at::kLong).equal(want));
}

TEST(QuantizeDynamic, RejectsQuantizedModelsAndUnknownExcludes) {
  DynamicResult r = quantize_dynamic(mlp(), DynamicOptions());
  pare::testing::expect_input_error([&] { quantize_dynamic(r.graph, DynamicOptions()); }, {"already quantized"});
  pare::testing::expect_option_error([] { quantize_dynamic(mlp(), DynamicOptions().exclude({"fc9"})); },
                                    "exclude", {"exclude fc9", "no node"});
  DynamicResult e = quantize_dynamic(mlp(), DynamicOptions().exclude({"fc2"}));
  ASSERT_EQ(e.layers.size(), 1u);
  ASSERT_EQ(e.skipped.size(), 1u);
  EXPECT_NE(e.skipped[0].find("'fc2': excluded"), std::string::npos);
}

}  // namespace
}  // namespace pare::quantize
