// QAT: the FakeQuantize op (exact QDQ numbers, straight-through and LSQ gradients), prepare_qat
// (the fake-quant graph equals quantize_static's QDQ graph at init) and convert_qat (after training,
// the QDQ graph gives the trained fake-quant graph's outputs to the bit).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "core/graph.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/op_registry.h"
#include "quantize/ptq.h"
#include "quantize/qat.h"
#include "tests/quantize/quant_test_util.h"
#include "tests/test_util.h"

namespace pare::quantize {
namespace {

using core::Dim;
using core::Graph;
using core::Node;
using testing::count;
using testing::run_eval;

Graph small_net() { return testing::conv_bn_net(3, 8); }

at::Tensor qat_calib() {
  at::manual_seed(11);
  return at::rand({64, 1, 6, 6});
}

// One FakeQuantize node applied to `x` (scale, zero point and attributes as given).
at::Tensor fake_quant(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zp,
                      std::map<std::string, core::AttrValue> attrs) {
  Node n;
  n.op_type = kFakeQuantOp;
  n.domain = kFakeQuantDomain;
  n.name = "fq";
  n.attrs = std::move(attrs);
  return core::OpRegistry::global().get(kFakeQuantOp).forward(n, {x, scale, zp}, core::RunContext{})[0];
}

// QuantizeLinear -> DequantizeLinear through the registry.
at::Tensor qdq(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zp, int64_t axis) {
  Node n;
  n.name = "q";
  n.op_type = "QuantizeLinear";
  if (axis >= 0) n.attrs["axis"] = axis;
  auto& reg = core::OpRegistry::global();
  at::Tensor q = reg.get("QuantizeLinear").forward(n, {x, scale, zp}, core::RunContext{})[0];
  n.op_type = "DequantizeLinear";
  return reg.get("DequantizeLinear").forward(n, {q, scale, zp}, core::RunContext{})[0];
}

TEST(FakeQuantize, EqualsQuantizeLinearThenDequantizeLinearToTheBit) {
  at::manual_seed(1);
  at::Tensor x = at::randn({64, 5}) * 3;
  // Per tensor, uint8 with a zero point; values half-way between codes included.
  at::Tensor s = at::scalar_tensor(0.0173f), z = at::scalar_tensor(int64_t{100}, at::kByte);
  at::Tensor xs = at::cat({x, (at::arange(-40, 40).to(at::kFloat) + 0.5f).reshape({-1, 5}) * 0.0173f});
  EXPECT_TRUE(fake_quant(xs, s, z, {{"qmin", int64_t{0}}, {"qmax", int64_t{255}}}).equal(qdq(xs, s, z, -1)));
  // Per axis 1, int8.
  at::Tensor sc = at::rand({5}) * 0.05 + 0.01, zc = at::zeros({5}, at::kChar);
  EXPECT_TRUE(fake_quant(x, sc, zc, {{"axis", int64_t{1}}, {"qmin", int64_t{-128}}, {"qmax", int64_t{127}}})
                  .equal(qdq(x, sc, zc, 1)));
  // int32 (biases): bounds beyond float32's exact integers.
  at::Tensor b = at::randn({5}) * 1e3, sb = at::full({5}, 1e-5f), zb = at::zeros({5}, at::kInt);
  EXPECT_TRUE(fake_quant(b, sb, zb, {{"axis", int64_t{0}}, {"qmin", int64_t{INT32_MIN}}, {"qmax", int64_t{INT32_MAX}}})
                  .equal(qdq(b, sb, zb, 0)));
}

TEST(FakeQuantize, StraightThroughGradientInsideTheRangeZeroOutside) {
  at::Tensor x = at::tensor({-2.0f, -0.3f, 0.0f, 0.26f, 0.9f, 3.0f}).set_requires_grad(true);
  at::Tensor s = at::scalar_tensor(0.01f), z = at::scalar_tensor(int64_t{0}, at::kChar);
  at::Tensor y = fake_quant(x, s, z, {{"qmin", int64_t{-127}}, {"qmax", int64_t{127}}});
  EXPECT_TRUE(y.requires_grad());
  (y * at::arange(1, 7).to(at::kFloat)).sum().backward();
  // Inside [-1.27, 1.27] the gradient passes unchanged; outside it is 0.
  EXPECT_TRUE(x.grad().equal(at::tensor({0.0f, 2.0f, 3.0f, 4.0f, 5.0f, 0.0f}))) << x.grad();
}

TEST(FakeQuantize, LearnableScaleGetsTheLsqGradient) {
  at::Tensor x = at::tensor({-2.0f, -0.304f, 0.262f, 3.0f});
  at::Tensor s = at::full({1}, 0.01f).set_requires_grad(true);
  at::Tensor z = at::scalar_tensor(int64_t{0}, at::kChar);
  at::Tensor y = fake_quant(x, s, z, {{"qmin", int64_t{-127}}, {"qmax", int64_t{127}}, {"learnable", int64_t{1}}});
  y.sum().backward();
  // d y / d s: qmin, round(x/s) - x/s, qmax; times g = 1 / sqrt(4 * 127).
  const double want = (-127 + (-30 + 30.4) + (26 - 26.2) + 127) / std::sqrt(4.0 * 127);
  EXPECT_NEAR(s.grad().item<double>(), want, 1e-4);
  // Without learnable = 1 the scale gets no gradient.
  at::Tensor s2 = at::full({1}, 0.01f).set_requires_grad(true);
  at::Tensor x2 = x.clone().set_requires_grad(true);
  fake_quant(x2, s2, z, {{"qmin", int64_t{-127}}, {"qmax", int64_t{127}}}).sum().backward();
  EXPECT_FALSE(s2.grad().defined());
  EXPECT_TRUE(x2.grad().defined());
}

TEST(PrepareQat, FakeQuantGraphEqualsTheStaticQdqGraphAtInit) {
  const Graph g = small_net();
  const at::Tensor x = qat_calib();
  for (const PtqOptions& o : {PtqOptions(), PtqOptions().per_channel(false).weight_bits(4),
                              PtqOptions().activations(QScheme::kSymmetricInt8).method(CalibMethod::kEntropy)}) {
    QatModel m = prepare_qat(g, x, QatOptions().ptq(o));
    PtqResult r = quantize_static(g, x, o);
    EXPECT_EQ(count(m.graph, "BatchNormalization"), 0);
    // x, r1, p1, f1, r2: 5 activations; w1, w2, w3 and their 3 biases.
    EXPECT_EQ(count(m.graph, kFakeQuantOp), 11);
    for (auto& n : m.graph.nodes)
      if (n.op_type == kFakeQuantOp) EXPECT_EQ(n.domain, kFakeQuantDomain);
    at::Tensor a = run_eval(m.graph, x), b = run_eval(r.graph, x);
    EXPECT_TRUE(a.equal(b)) << (a - b).abs().max();
    EXPECT_FALSE(a.equal(run_eval(g, x)));
  }
}

TEST(ConvertQat, UntrainedConversionIsExactlyTheStaticGraph) {
  const Graph g = small_net();
  const at::Tensor x = qat_calib();
  const PtqOptions o = PtqOptions().per_channel(false).weight_bits(4);
  QatModel m = prepare_qat(g, x, QatOptions().ptq(o));
  PtqResult c = convert_qat(m, core::Module(m.graph).to_graph(), x);
  PtqResult r = quantize_static(g, x, o);
  ASSERT_EQ(c.graph.nodes.size(), r.graph.nodes.size());
  for (size_t i = 0; i < c.graph.nodes.size(); ++i) {
    EXPECT_EQ(c.graph.nodes[i].op_type, r.graph.nodes[i].op_type);
    EXPECT_EQ(c.graph.nodes[i].inputs, r.graph.nodes[i].inputs);
  }
  ASSERT_EQ(c.graph.initializers.size(), r.graph.initializers.size());
  for (auto& [name, t] : r.graph.initializers) {
    ASSERT_TRUE(c.graph.initializers.count(name)) << name;
    EXPECT_TRUE(c.graph.initializers.at(name).equal(t)) << name;
  }
  // 4-bit weights: codes within [-7, 7] in int8 storage.
  for (auto& [name, t] : c.graph.initializers)
    if (t.scalar_type() == at::kChar && t.dim() >= 2) EXPECT_LE(t.abs().max().item<int>(), 7) << name;
  EXPECT_NE(c.report.weights.find("4-bit"), std::string::npos);
}

// A few SGD steps on the fake-quant graph: weights, biases and (LSQ) scales move, and the QDQ
// graph convert_qat writes gives the trained fake-quant graph's outputs exactly.
TEST(ConvertQat, AfterTrainingTheQdqGraphGivesTheFakeQuantOutputsExactly) {
  const Graph g = small_net();
  const at::Tensor x = qat_calib();
  for (bool learn : {false, true}) {
    SCOPED_TRACE(learn ? "learned scales" : "fixed scales");
    QatModel m = prepare_qat(g, x, QatOptions().ptq(PtqOptions().weight_bits(4)).learn_scales(learn));
    core::Module model(m.graph);
    model.train();
    at::manual_seed(2);
    at::Tensor target = at::randint(0, 3, {x.size(0)});
    std::map<std::string, at::Tensor> before;
    for (size_t i = 0; i < model.parameters().size(); ++i)
      before[model.parameter_names()[i]] = model.parameters()[i].detach().clone();
    for (int step = 0; step < 5; ++step) {
      for (auto& p : model.parameters())
        if (p.grad().defined()) p.mutable_grad().zero_();
      at::Tensor loss = at::cross_entropy_loss(model.forward({x})[0], target);
      loss.backward();
      at::NoGradGuard no_grad;
      for (auto& p : model.parameters())
        if (p.grad().defined()) p.sub_(p.grad() * 0.5);
    }
    // Every weight and (folded) bias got a gradient and moved; the scales moved only when learned.
    int weights = 0;
    for (auto& [name, t] : before) {
      const bool scale = name.find("_qat_scale") != std::string::npos;
      weights += !scale;
      EXPECT_EQ(model.initializer(name).equal(t), scale && !learn) << name;
    }
    EXPECT_EQ(weights, 6);
    const std::string sx = m.activation_scale.at("x");
    EXPECT_EQ(model.initializer(sx).equal(m.graph.initializers.at(sx)), !learn);
    Graph trained = model.to_graph();
    PtqResult r = convert_qat(m, trained, x);
    EXPECT_EQ(count(r.graph, kFakeQuantOp), 0);
    EXPECT_GT(count(r.graph, "QuantizeLinear"), 0);
    at::Tensor xt = at::rand({32, 1, 6, 6});
    at::Tensor a = run_eval(trained, xt), b = run_eval(r.graph, xt);
    EXPECT_TRUE(a.equal(b)) << (a - b).abs().max();
    // ... also after an ONNX round trip of the QDQ model.
    Graph back = core::parse_onnx(core::serialize_onnx(r.graph), "small.qat.onnx");
    EXPECT_TRUE(run_eval(back, xt).equal(b));
  }
}

TEST(ConvertQat, RejectsAGraphThatIsNotTheOnePrepared) {
  const Graph g = small_net();
  QatModel m = prepare_qat(g, qat_calib(), QatOptions());
  pare::testing::expect_input_error([&] { convert_qat(m, g, qat_calib()); }, {"has no initializer", "not the graph prepare_qat made"});
}

TEST(PrepareQat, RejectsBadWeightBitsAndQuantizedModels) {
  pare::testing::expect_input_error(
      [] { prepare_qat(small_net(), qat_calib(), QatOptions().ptq(PtqOptions().weight_bits(9))); },
      {"weight bits", "2..8", "9"});
  PtqResult r = quantize_static(small_net(), qat_calib(), PtqOptions());
  pare::testing::expect_input_error([&] { prepare_qat(r.graph, qat_calib(), QatOptions()); }, {"already quantized"});
}

}  // namespace
}  // namespace pare::quantize
