// quantize_static on a tiny Conv-BN-Relu-MaxPool-Flatten-Gemm graph: the QDQ structure, the
// numbers against fp32 and against an independent fake-quant computation, ONNX round trip, the
// report, and the errors for bad input.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "core/graph.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/op_registry.h"
#include "tests/quantize/quant_test_util.h"
#include "quantize/ptq.h"
#include "tests/test_util.h"

namespace pare::quantize {
namespace {

using core::Dim;
using core::Graph;
using testing::run_eval;

Graph tiny_cnn() { return testing::conv_bn_net(7); }

at::Tensor calib() {
  at::manual_seed(11);
  return at::rand({96, 1, 6, 6});
}

const core::Node* find(const Graph& g, const std::string& op, const std::string& input) {
  for (auto& n : g.nodes)
    if (n.op_type == op && !n.inputs.empty() && n.inputs[0] == input) return &n;
  return nullptr;
}

TEST(QuantizeStatic, InsertsQdqPairsInt8WeightsInt32BiasesAndKeepsReluFused) {
  PtqResult r = quantize_static(tiny_cnn(), calib(), PtqOptions());
  const Graph& q = r.graph;
  int bn = 0, qn = 0, dqn = 0;
  for (auto& n : q.nodes) {
    bn += n.op_type == "BatchNormalization";
    qn += n.op_type == "QuantizeLinear";
    dqn += n.op_type == "DequantizeLinear";
  }
  EXPECT_EQ(bn, 0);
  // Activations x, r1, p1 (shares r1's scale), f1 (shares r1's scale): 4 Q + 4 DQ; weights 2 DQ, biases 2 DQ.
  EXPECT_EQ(qn, 4);
  EXPECT_EQ(dqn, 8);
  // Conv's own output is not requantized: Relu reads it directly and its output is quantized.
  EXPECT_EQ(find(q, "QuantizeLinear", "c1"), nullptr);
  const core::Node* qr = find(q, "QuantizeLinear", "r1");
  const core::Node* qp = find(q, "QuantizeLinear", "p1");
  ASSERT_NE(qr, nullptr);
  ASSERT_NE(qp, nullptr);
  EXPECT_TRUE(q.initializers.at(qr->inputs[1]).equal(q.initializers.at(qp->inputs[1])));
  int int8 = 0, int32 = 0;
  for (auto& [name, t] : q.initializers) {
    int8 += t.scalar_type() == at::kChar && t.dim() >= 2;
    int32 += t.scalar_type() == at::kInt;
  }
  EXPECT_EQ(int8, 2);
  EXPECT_EQ(int32, 2);
  EXPECT_EQ(r.report.folded_batch_norms, 1);
  ASSERT_EQ(r.report.layers.size(), 2u);
  EXPECT_EQ(r.report.layers[0].fused, "Relu");
  EXPECT_TRUE(r.report.layers[0].per_channel);
  EXPECT_TRUE(r.report.layers[1].output.empty());  // the model output stays fp32
}

TEST(QuantizeStatic, OutputMatchesAnIndependentFakeQuantSimulation) {
  Graph g = tiny_cnn();
  at::Tensor x = calib();
  PtqResult r = quantize_static(g, x, PtqOptions().per_channel(false));
  // Recompute by hand with at:: ops: quantize x to uint8 with its min-max range, fold BN, etc.
  auto fq = [](const at::Tensor& t, double lo, double hi) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
    const float s = static_cast<float>((hi - lo) / 255.0);
    const double zp = std::nearbyint(-lo / s);
    return (at::clamp(at::round(t / s) + zp, 0, 255) - zp) * s;
  };
  auto fq_sym = [](const at::Tensor& w) {
    const float s = static_cast<float>(w.abs().max().item<double>() / 127.0);
    return std::make_pair(at::clamp(at::round(w / s), -128, 127) * s, s);
  };
  const double eps = 1e-5;
  at::Tensor k = g.initializers["bn_s"] / at::sqrt(g.initializers["bn_v"] + eps);
  at::Tensor w1 = g.initializers["w1"] * k.reshape({4, 1, 1, 1});
  at::Tensor b1 = (g.initializers["b1"] - g.initializers["bn_m"]) * k + g.initializers["bn_b"];
  const float sx = static_cast<float>((x.max().item<double>() - 0.0) / 255.0);
  at::Tensor xd = fq(x, x.min().item<double>(), x.max().item<double>());
  auto [w1d, sw1] = fq_sym(w1);
  at::Tensor b1d = at::round(b1 / (sx * sw1)) * (sx * sw1);
  at::Tensor r1 = at::relu(at::conv2d(x, w1, b1, 1, 1));  // fp32 range for calibration
  at::Tensor r1q = at::relu(at::conv2d(xd, w1d, b1d, 1, 1));
  const float sr = static_cast<float>(r1.max().item<double>() / 255.0);
  at::Tensor p1 = at::max_pool2d(fq(r1q, 0, r1.max().item<double>()), 3, 3).flatten(1);
  auto [w2d, sw2] = fq_sym(g.initializers["w2"]);
  at::Tensor b2d = at::round(g.initializers["b2"] / (sr * sw2)) * (sr * sw2);
  at::Tensor want = at::addmm(b2d, p1, w2d.t());
  at::Tensor got = run_eval(r.graph, x);
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4)) << (got - want).abs().max();
  // And it is close to, but not the same as, fp32.
  at::Tensor fp = run_eval(g, x);
  EXPECT_FALSE(got.equal(fp));
  EXPECT_GT(sqnr_db(fp, got), 25.0);
  EXPECT_NEAR(r.report.output_sqnr_db, sqnr_db(fp, got), 1e-3);  // fp32 reference: BN folded
}

TEST(QuantizeStatic, SurvivesOnnxSerializationAndTheChecker) {
  PtqResult r = quantize_static(tiny_cnn(), calib(), PtqOptions().method(CalibMethod::kEntropy));
  Graph back = core::parse_onnx(core::serialize_onnx(r.graph), "tiny.int8.onnx");
  at::Tensor x = calib();
  EXPECT_TRUE(run_eval(back, x).equal(run_eval(r.graph, x)));
  EXPECT_GE(back.opset, 13);
  EXPECT_NE(back.metadata.at("pare.quantization").find("entropy"), std::string::npos);
}

TEST(QuantizeStatic, ExcludeByOpTypeKeepsThatLayerInFp32AndReportsIt) {
  PtqResult r = quantize_static(tiny_cnn(), calib(), PtqOptions().exclude({"Gemm"}));
  ASSERT_EQ(r.report.layers.size(), 1u);
  EXPECT_EQ(r.report.layers[0].op, "Conv");
  ASSERT_EQ(r.report.skipped.size(), 1u);
  EXPECT_NE(r.report.skipped[0].find("'fc': excluded"), std::string::npos);
  const core::Node* fc = nullptr;
  for (auto& n : r.graph.nodes)
    if (n.name == "fc") fc = &n;
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->inputs[1], "w2");  // the fp32 weight, read directly
  EXPECT_NE(r.report.to_json().find("\"skipped\""), std::string::npos);
  EXPECT_NE(r.report.to_text().find("kept fp32: Gemm node 'fc': excluded"), std::string::npos);
}

TEST(QuantizeStatic, RejectsAnAlreadyQuantizedModel) {
  PtqResult r = quantize_static(tiny_cnn(), calib(), PtqOptions());
  pare::testing::expect_input_error([&] { quantize_static(r.graph, calib(), PtqOptions()); },
                                    {"already quantized", "QuantizeLinear"});
}

TEST(QuantizeStatic, RejectsCalibrationDataOfTheWrongShape) {
  pare::testing::expect_input_error(
      [] { quantize_static(tiny_cnn(), at::rand({8, 1, 5, 5}), PtqOptions().calib_name("--calib npy:x.npy")); },
      {"--calib npy:x.npy", "[8, 1, 5, 5]", "'x'", "[N,1,6,6]"});
}

TEST(QuantizeStatic, RejectsIncludingAnOpThatCannotBeQuantizedOrNamesThatMatchNothing) {
  pare::testing::expect_option_error(
      [] { quantize_static(tiny_cnn(), calib(), PtqOptions().include({"MaxPool"})); },
      "include", {"include MaxPool", "MaxPool node 'pool1'", "cannot be quantized"});
  pare::testing::expect_option_error(
      [] { quantize_static(tiny_cnn(), calib(), PtqOptions().exclude({"conv9"})); },
      "exclude", {"exclude conv9", "no node"});
}

TEST(QuantizeStatic, TiedWeightsBehindIdentityAreQuantizedAndStoredOnce) {
  // As torch.onnx writes the cloned layers of an nn.TransformerEncoder: Identity(initializer).
  at::manual_seed(5);
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 8}});
  g.initializers["w"] = at::randn({8, 8});
  g.add_node("Identity", {"w"}, {"w_tied"});
  g.add_node("MatMul", {"x", "w"}, {"h"}, {}, "mm1");
  g.add_node("Relu", {"h"}, {"r"});
  g.add_node("MatMul", {"r", "w_tied"}, {"y"}, {}, "mm2");
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 8}});
  PtqResult r = quantize_static(g, at::randn({32, 8}), PtqOptions());
  EXPECT_EQ(r.report.layers.size(), 2u);
  EXPECT_TRUE(r.report.skipped.empty());
  int int8 = 0, fp32 = 0;
  for (auto& [name, t] : r.graph.initializers) {
    int8 += t.scalar_type() == at::kChar && t.dim() == 2;
    fp32 += t.scalar_type() == at::kFloat && t.dim() == 2;
  }
  EXPECT_EQ(int8, 1);
  EXPECT_EQ(fp32, 0);
  EXPECT_LT(r.report.quantized_bytes, r.report.fp32_bytes);
}

// Issue 18, item 1: token logits [N, S, V] are compared along V, one argmax per position (the
// report used to say 0.00% for every sequence model).
TEST(QuantizeStatic, ArgmaxAgreementComparesTokenLogitsAlongTheVocabulary) {
  at::manual_seed(9);
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 5, 16}});
  g.initializers["w"] = at::randn({16, 12});
  g.add_node("MatMul", {"x", "w"}, {"logits"}, {}, "head");
  g.outputs.push_back({"logits", at::kFloat, {Dim::sym("N"), 5, 12}});
  const at::Tensor x = at::randn({40, 5, 16});
  PtqResult r = quantize_static(g, x, PtqOptions());
  EXPECT_EQ(r.report.argmax_rows, 40 * 5);
  // The same figure computed here, along the last axis.
  const at::Tensor fo = run_eval(g, x), qo = run_eval(r.graph, x);
  const double want = fo.argmax(2).eq(qo.argmax(2)).to(at::kDouble).mean().item<double>();
  EXPECT_GT(want, 0.9);
  EXPECT_NEAR(r.report.argmax_agreement, want, 2.0 / 200);  // batching may flip a near tie
  EXPECT_NE(r.report.to_text().find("% of 200"), std::string::npos) << r.report.to_text();
  EXPECT_EQ(class_axis(2), 1);
  EXPECT_EQ(class_axis(3), 2);
  EXPECT_EQ(class_axis(4), 1);
}

TEST(QuantizeStatic, EveryRegisteredOpHasAPolicy) {
  auto& reg = core::OpRegistry::global();
  policy_of("Conv");  // registers the policies
  for (const auto& name : reg.names()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(reg.get(name).has_facet(kPolicyFacet));
    const QuantPolicy& p = reg.get(name).facet<QuantPolicy>(kPolicyFacet);
    if (p.kind == QuantPolicy::Kind::kNone) EXPECT_FALSE(p.why_not.empty());
    if (p.kind == QuantPolicy::Kind::kCompute) EXPECT_TRUE(static_cast<bool>(p.weight_axis));
  }
}

// A new op, registered after quantize/ added its facet provider (docs/ARCHITECTURE.md, "Add an
// op"): it gets a policy all the same, runs in fp32 between the quantized layers, and including
// it is refused naming it.
TEST(QuantizeStatic, AnOpRegisteredLaterRunsInFp32AndIsRefusedByNameWhenIncluded) {
  policy_of("Conv");  // the provider is in place first
  pare::testing::register_test_ops();
  for (const char* op : {"PareTestSquare", "PareTestOpaque"}) {
    SCOPED_TRACE(op);
    at::manual_seed(5);
    Graph g;
    g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 8}});
    g.initializers["w1"] = at::randn({8, 16});
    g.initializers["w2"] = at::randn({16, 4});
    g.add_node("MatMul", {"x", "w1"}, {"h"}, {}, "fc1");
    g.add_node(op, {"h"}, {"s"}, {}, "new_op");
    g.add_node("MatMul", {"s", "w2"}, {"y"}, {}, "fc2");
    g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 4}});
    const at::Tensor x = at::randn({64, 8});
    PtqResult r = quantize_static(g, x, PtqOptions());
    EXPECT_EQ(r.report.layers.size(), 2u);
    EXPECT_EQ(std::count_if(r.graph.nodes.begin(), r.graph.nodes.end(), [&](const core::Node& n) { return n.op_type == op; }),
              1);
    EXPECT_GT(r.report.output_sqnr_db, 20.0);
    pare::testing::expect_option_error([&] { quantize_static(g, x, PtqOptions().include({op})); }, "include",
                                       {op, "cannot be quantized", "runs in fp32"});
  }
}

// A decoder layer (RMSNormalization, RotaryEmbedding, Attention: no int8 form) quantizes its four
// projections; the three transformer ops stay fp32 nodes and the norm's scale an fp32 weight.
TEST(QuantizeStatic, ADecoderLayerQuantizesItsProjectionsAndKeepsTheTransformerOpsInFp32) {
  Graph g = pare::testing::decoder_layer_graph(6, 7);
  at::manual_seed(7);
  PtqResult r = quantize_static(g, at::randn({32, 6, 16}), PtqOptions());
  EXPECT_EQ(r.report.layers.size(), 4u);
  for (const char* op : {"RMSNormalization", "RotaryEmbedding", "Attention"})
    EXPECT_EQ(std::count_if(r.graph.nodes.begin(), r.graph.nodes.end(), [&](const core::Node& n) { return n.op_type == op; }),
              op == std::string("RotaryEmbedding") ? 2 : 1) << op;
  ASSERT_TRUE(r.graph.is_initializer("norm.scale"));
  EXPECT_TRUE(r.graph.initializers.at("norm.scale").equal(g.initializers.at("norm.scale")));
  EXPECT_GT(r.report.output_sqnr_db, 20.0);
}

}  // namespace
}  // namespace pare::quantize
