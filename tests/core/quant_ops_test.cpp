// QuantizeLinear / DequantizeLinear against hand-computed numbers (round half to even,
// saturation, per-tensor, per-axis and blocked), and a QDQ graph through ONNX and back.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/graph.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/op_registry.h"
#include "tests/test_util.h"

namespace pare::core {
namespace {

Node qnode(const std::string& op, int n_in, std::map<std::string, AttrValue> attrs = {}) {
  Node n;
  n.op_type = op;
  n.name = op + "_test";
  for (int i = 0; i < n_in; ++i) n.inputs.push_back("i" + std::to_string(i));
  n.outputs = {"o0"};
  n.attrs = std::move(attrs);
  return n;
}

at::Tensor run_quant(const Node& n, const std::vector<at::Tensor>& in) {
  return OpRegistry::global().get(n.op_type).forward(n, in, RunContext{}).at(0);
}

at::Tensor f32(std::vector<float> v) { return at::tensor(at::ArrayRef<float>(v), at::kFloat); }
at::Tensor i64(std::vector<int64_t> v) { return at::tensor(at::ArrayRef<int64_t>(v), at::kLong); }

TEST(QuantizeLinear, RoundsHalfToEvenAddsZeroPointAndSaturatesUint8) {
  // x / 0.5 = 0.5, 1.5, 2.5, -0.5, 600, -600, 3.2  -> round half even 0, 2, 2, -0, ...
  at::Tensor x = f32({0.25f, 0.75f, 1.25f, -0.25f, 300.f, -300.f, 1.6f});
  at::Tensor y = run_quant(qnode("QuantizeLinear", 3),
                      {x, at::scalar_tensor(0.5, at::kFloat), at::scalar_tensor(10, at::kByte)});
  ASSERT_EQ(y.scalar_type(), at::kByte);
  EXPECT_TRUE(y.to(at::kLong).equal(i64({10, 12, 12, 10, 255, 0, 13}))) << y;
}

TEST(QuantizeLinear, WithoutZeroPointIsUint8AndInt8SaturatesAtBothEnds) {
  at::Tensor y = run_quant(qnode("QuantizeLinear", 2), {f32({-1.f, 2.5f, 3.5f}), at::scalar_tensor(1.0, at::kFloat)});
  ASSERT_EQ(y.scalar_type(), at::kByte);
  EXPECT_TRUE(y.to(at::kLong).equal(i64({0, 2, 4}))) << y;
  at::Tensor z = run_quant(qnode("QuantizeLinear", 3),
                      {f32({-1000.f, -128.4f, 126.5f, 1000.f}), at::scalar_tensor(1.0, at::kFloat),
                       at::scalar_tensor(0, at::kChar)});
  ASSERT_EQ(z.scalar_type(), at::kChar);
  EXPECT_TRUE(z.to(at::kLong).equal(i64({-128, -128, 126, 127}))) << z;
}

TEST(QuantizeLinear, PerAxisUsesOneScaleAndZeroPointPerChannel) {
  // x [2, 3], axis 0: row 0 scale 1 zp 0, row 1 scale 2 zp -1.
  at::Tensor x = f32({1.f, -2.5f, 3.f, 4.f, 5.f, -7.f}).reshape({2, 3});
  at::Tensor y = run_quant(qnode("QuantizeLinear", 3, {{"axis", int64_t{0}}}),
                      {x, f32({1.f, 2.f}), at::tensor({0, -1}, at::kChar)});
  // row 1: 4/2=2 -1 = 1; 5/2=2.5 -> 2, -1 = 1; -7/2=-3.5 -> -4, -1 = -5
  EXPECT_TRUE(y.to(at::kLong).equal(i64({1, -2, 3, 1, 1, -5}).reshape({2, 3}))) << y;
}

TEST(QuantizeLinear, BlockedScalesCoverBlockSizeElementsAlongTheAxis) {
  at::Tensor x = f32({1.f, 2.f, 3.f, 4.f, 5.f}).reshape({1, 5});
  // Blocks of 2 along axis 1: scales 1, 2, 4 for elements {0,1}, {2,3}, {4}.
  at::Tensor y = run_quant(qnode("QuantizeLinear", 3, {{"axis", int64_t{1}}, {"block_size", int64_t{2}}}),
                      {x, f32({1.f, 2.f, 4.f}).reshape({1, 3}), at::zeros({1, 3}, at::kChar)});
  EXPECT_TRUE(y.to(at::kLong).equal(i64({1, 2, 2, 2, 1}).reshape({1, 5}))) << y;
}

TEST(QuantizeLinear, RejectsAPerAxisScaleOfTheWrongSize) {
  pare::testing::expect_input_error(
      [] {
        run_quant(qnode("QuantizeLinear", 2, {{"axis", int64_t{1}}}),
             {at::zeros({2, 3}), f32({1.f, 2.f})});
      },
      {"QuantizeLinear node 'QuantizeLinear_test'", "per-axis y_scale", "3 entries"});
}

TEST(DequantizeLinear, SubtractsZeroPointAndScalesPerTensorPerAxisAndInt32) {
  at::Tensor u = at::tensor({0, 10, 255}, at::kByte);
  at::Tensor y = run_quant(qnode("DequantizeLinear", 3), {u, at::scalar_tensor(0.5, at::kFloat), at::scalar_tensor(10, at::kByte)});
  EXPECT_TRUE(y.equal(f32({-5.f, 0.f, 122.5f}))) << y;
  // int8 [2, 2] per axis 1: column scales 0.25 and 2, zero points 1 and -2.
  at::Tensor s = at::tensor({-128, 127, 3, 0}, at::kChar).reshape({2, 2});
  at::Tensor z = run_quant(qnode("DequantizeLinear", 3, {{"axis", int64_t{1}}}),
                      {s, f32({0.25f, 2.f}), at::tensor({1, -2}, at::kChar)});
  EXPECT_TRUE(z.equal(f32({-32.25f, 258.f, 0.5f, 4.f}).reshape({2, 2}))) << z;
  at::Tensor b = run_quant(qnode("DequantizeLinear", 2), {at::tensor({-1000000, 3}, at::kInt), at::scalar_tensor(0.001, at::kFloat)});
  EXPECT_TRUE(at::allclose(b, f32({-1000.f, 0.003f}))) << b;
}

TEST(DequantizeLinear, RejectsAZeroPointOfAnotherType) {
  pare::testing::expect_input_error(
      [] {
        run_quant(qnode("DequantizeLinear", 3),
             {at::zeros({2}, at::kByte), at::scalar_tensor(1.0, at::kFloat), at::scalar_tensor(0, at::kChar)});
      },
      {"DequantizeLinear", "x_zero_point must have the type of x"});
}

TEST(QuantOps, QdqGraphSurvivesOnnxExportWithInt8Uint8AndInt32Initializers) {
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 3}});
  g.initializers["xs"] = at::scalar_tensor(0.02, at::kFloat);
  g.initializers["xz"] = at::scalar_tensor(128, at::kByte);
  g.initializers["wq"] = at::tensor({1, -2, 3, 127, -127, 0}, at::kChar).reshape({2, 3});
  g.initializers["ws"] = f32({0.01f, 0.03f});
  g.initializers["wz"] = at::zeros({2}, at::kChar);
  g.initializers["bq"] = at::tensor({100, -5000}, at::kInt);
  g.initializers["bs"] = f32({0.0002f, 0.0006f});
  g.add_node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  g.add_node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  g.add_node("DequantizeLinear", {"wq", "ws", "wz"}, {"wd"}, {{"axis", int64_t{0}}});
  g.add_node("DequantizeLinear", {"bq", "bs"}, {"bd"}, {{"axis", int64_t{0}}});
  g.add_node("Gemm", {"xd", "wd", "bd"}, {"y"}, {{"transB", int64_t{1}}});
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 2}});
  g.verify();
  at::Tensor x = at::rand({4, 3}) * 4 - 2;
  at::Tensor want;
  {
    Module m(g);
    want = m.forward({x}).at(0);
  }
  // The same by hand: fake-quantize x, dequantize w and b, then x @ w^T + b.
  at::Tensor xq = at::clamp(at::round(x / 0.02f) + 128, 0, 255);
  at::Tensor xd = (xq - 128) * 0.02f;
  at::Tensor wd = g.initializers["wq"].to(at::kFloat) * f32({0.01f, 0.03f}).reshape({2, 1});
  at::Tensor bd = g.initializers["bq"].to(at::kFloat) * f32({0.0002f, 0.0006f});
  EXPECT_TRUE(at::allclose(want, at::addmm(bd, xd, wd.t()), 1e-5, 1e-6));
  Graph back = parse_onnx(serialize_onnx(g), "qdq.onnx");
  EXPECT_EQ(back.initializers.at("wq").scalar_type(), at::kChar);
  EXPECT_EQ(back.initializers.at("xz").scalar_type(), at::kByte);
  EXPECT_EQ(back.initializers.at("bq").scalar_type(), at::kInt);
  Module m2(back);
  EXPECT_TRUE(m2.forward({x}).at(0).equal(want));
}

}  // namespace
}  // namespace pare::core
