// Core op registry entries: each op's forward against hand-computed numbers or an independent
// at:: computation, plus a walk over every registered op.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/graph.h"
#include "core/op_registry.h"

namespace pare::core {
namespace {

/// A node whose inputs are "i0", "i1", ... ("" where `omitted`), outputs "o0", "o1", ...
Node make_node(const std::string& op, int n_in, int n_out = 1,
               std::map<std::string, AttrValue> attrs = {}, std::set<int> omitted = {}) {
  Node n;
  n.op_type = op;
  n.name = op + "_test";
  for (int i = 0; i < n_in; ++i) n.inputs.push_back(omitted.count(i) ? "" : "i" + std::to_string(i));
  for (int i = 0; i < n_out; ++i) n.outputs.push_back("o" + std::to_string(i));
  n.attrs = std::move(attrs);
  return n;
}

std::vector<at::Tensor> run(const Node& n, const std::vector<at::Tensor>& in, bool training = false) {
  RunContext ctx;
  ctx.training = training;
  return OpRegistry::global().get(n.op_type).forward(n, in, ctx);
}

at::Tensor run1(const Node& n, const std::vector<at::Tensor>& in, bool training = false) {
  auto out = run(n, in, training);
  EXPECT_FALSE(out.empty());
  return out.at(0);
}

at::Tensor floats(std::vector<float> v, std::vector<int64_t> shape = {}) {
  at::Tensor t = at::tensor(at::ArrayRef<float>(v), at::kFloat);
  return shape.empty() ? t : t.reshape(shape);
}

at::Tensor ints(std::vector<int64_t> v) { return at::tensor(at::ArrayRef<int64_t>(v), at::kLong); }

at::Tensor bools(std::vector<int64_t> v) { return ints(std::move(v)).ne(0); }

std::vector<int64_t> vec(const at::Tensor& t) { return to_int_vector(t); }

void expect_close(const at::Tensor& got, const at::Tensor& want, double atol = 1e-5) {
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(at::allclose(got.to(at::kDouble), want.to(at::kDouble), 1e-5, atol))
      << "got\n" << got << "\nwant\n" << want;
}

int64_t flops(const Node& n, const std::vector<std::vector<int64_t>>& in,
              const std::vector<std::vector<int64_t>>& out) {
  return OpRegistry::global().get(n.op_type).flops(n, in, out);
}

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// ---- registry ----------------------------------------------------------------------------

TEST(CoreOps, EveryOpHasForwardDocAndSaneArity) {
  auto& reg = OpRegistry::global();
  auto names = reg.names();
  ASSERT_FALSE(names.empty());
  for (const auto& name : names) {
    const OpDef& op = reg.get(name);
    SCOPED_TRACE(name);
    EXPECT_EQ(op.name, name);
    EXPECT_TRUE(static_cast<bool>(op.forward));
    EXPECT_FALSE(op.doc.empty());
    EXPECT_GE(op.inputs_min, 0);
    EXPECT_TRUE(op.inputs_max == -1 || op.inputs_max >= op.inputs_min);
    EXPECT_GE(op.outputs_min, 1);
    EXPECT_TRUE(op.outputs_max == -1 || op.outputs_max >= op.outputs_min);
    std::set<std::string> attr_names;
    for (const auto& a : op.attrs) EXPECT_TRUE(attr_names.insert(a.name).second) << a.name;
    for (int i : op.weight_inputs()) EXPECT_TRUE(op.inputs_max == -1 || i < op.inputs_max);
    for (int i : op.state_inputs()) EXPECT_TRUE(op.inputs_max == -1 || i < op.inputs_max);
  }
}

TEST(CoreOps, RegistersTheRequiredOps) {
  const char* required[] = {
      "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Relu", "Clip", "Erf", "Tanh", "Sigmoid",
      "Equal", "Where", "Cast", "Identity", "Neg", "Exp", "Log", "Abs", "Reciprocal", "Less",
      "Greater", "Not", "And", "Or", "Softmax", "LogSoftmax", "Conv", "Gemm", "MatMul",
      "BatchNormalization", "LayerNormalization", "MaxPool", "AveragePool", "GlobalAveragePool",
      "Flatten", "Dropout", "ReduceMean", "ReduceSum", "ReduceMax", "Shape", "Gather", "Reshape",
      "Transpose", "Slice", "Concat", "Unsqueeze", "Squeeze", "Constant", "ConstantOfShape",
      "Expand", "Split", "Range", "Tile", "Size"};
  for (const char* name : required) EXPECT_NE(OpRegistry::global().find(name), nullptr) << name;
}

TEST(CoreOps, DeclaresTheOnnxAttributes) {
  auto& reg = OpRegistry::global();
  for (const char* a : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
    EXPECT_NE(reg.get("Conv").find_attr(a), nullptr) << a;
  for (const char* a : {"alpha", "beta", "transA", "transB"})
    EXPECT_NE(reg.get("Gemm").find_attr(a), nullptr) << a;
  for (const char* a : {"epsilon", "momentum", "training_mode"})
    EXPECT_NE(reg.get("BatchNormalization").find_attr(a), nullptr) << a;
  EXPECT_EQ(reg.get("Conv").weight_inputs(), (std::vector<int>{1, 2}));
  EXPECT_EQ(reg.get("BatchNormalization").state_inputs(), (std::vector<int>{3, 4}));
  EXPECT_EQ(reg.get("Gather").weight_inputs(), (std::vector<int>{0}));
}

TEST(CoreOps, WeightDeclarationsAreWellFormed) {
  auto& reg = OpRegistry::global();
  for (const auto& name : reg.names()) {
    const OpDef& op = reg.get(name);
    SCOPED_TRACE(name);
    std::set<int> seen;
    for (const WeightInput& w : op.weights) {
      EXPECT_TRUE(seen.insert(w.input).second) << "input " << w.input << " declared twice";
      EXPECT_TRUE(w.input >= 0 && (op.inputs_max == -1 || w.input < op.inputs_max)) << w.input;
    }
  }
  auto axes = [](const char* op, int input, int64_t rank, std::map<std::string, core::AttrValue> attrs = {}) {
    const WeightAxes a = weight_axes(Node{op, "", {}, {}, std::move(attrs), ""}, input, rank);
    return std::make_pair(a.out, a.in);
  };
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(axes("Conv", 1, 4), P(0, 1));
  EXPECT_EQ(axes("Conv", 2, 1), P(0, -1));
  EXPECT_EQ(axes("ConvTranspose", 1, 4), P(1, 0));
  EXPECT_EQ(axes("Gemm", 1, 2), P(1, 0));
  EXPECT_EQ(axes("Gemm", 1, 2, {{"transB", int64_t{1}}}), P(0, 1));
  EXPECT_EQ(axes("Gemm", 2, 2), P(1, -1));
  EXPECT_EQ(axes("MatMul", 1, 2), P(1, 0));
  EXPECT_EQ(axes("MatMul", 0, 2), P(0, 1));
  EXPECT_EQ(axes("MatMul", 1, 3), P(-1, -1));  // batched weights: channels not followed
  EXPECT_EQ(axes("Relu", 0, 2), P(-1, -1));
  EXPECT_EQ(reg.get("BatchNormalization").weight(1)->role, WeightRole::kScale);
  EXPECT_EQ(reg.get("BatchNormalization").weight(3)->role, WeightRole::kMean);
  EXPECT_EQ(reg.get("Gather").weight(0)->role, WeightRole::kTable);
  EXPECT_TRUE(reg.get("Gather").traits.opaque_channels);
  EXPECT_TRUE(reg.get("LSTM").traits.opaque_channels);
  EXPECT_FALSE(reg.get("Relu").traits.opaque_channels);
}

TEST(CoreOps, GradientsFlowThroughTrainableOps) {
  at::manual_seed(0);
  {
    auto x = at::randn({2, 3, 5, 5}).requires_grad_();
    auto w = at::randn({4, 3, 3, 3}).requires_grad_();
    auto b = at::randn({4}).requires_grad_();
    run1(make_node("Conv", 3, 1, {{"pads", std::vector<int64_t>{0, 1, 1, 0}}}), {x, w, b}).sum().backward();
    for (auto* t : {&x, &w, &b}) {
      ASSERT_TRUE(t->grad().defined());
      EXPECT_GT(t->grad().abs().sum().item<double>(), 0.0);
    }
  }
  {
    auto a = at::randn({3, 4}).requires_grad_();
    auto w = at::randn({5, 4}).requires_grad_();
    auto c = at::randn({5}).requires_grad_();
    run1(make_node("Gemm", 3, 1, {{"transB", int64_t{1}}, {"alpha", 2.0f}}), {a, w, c}).sum().backward();
    // d/dw sum(2 * a @ w^T + c) = 2 * column sums of a, per output row.
    expect_close(w.grad(), (2 * a.detach().sum(0)).unsqueeze(0).expand({5, 4}));
    expect_close(c.grad(), at::full({5}, 3.0));
  }
  {
    auto a = at::randn({2, 3, 4}).requires_grad_();
    auto b = at::randn({4, 5}).requires_grad_();
    run1(make_node("MatMul", 2), {a, b}).sum().backward();
    ASSERT_TRUE(a.grad().defined() && b.grad().defined());
    expect_close(b.grad(), a.detach().sum(at::IntArrayRef{0, 1}).unsqueeze(1).expand({4, 5}));
  }
  {
    auto x = at::randn({2, 3, 4}).requires_grad_();
    auto s = at::randn({4}).requires_grad_();
    auto b = at::randn({4}).requires_grad_();
    run1(make_node("LayerNormalization", 3), {x, s, b}).pow(2).sum().backward();
    for (auto* t : {&x, &s, &b}) {
      ASSERT_TRUE(t->grad().defined());
      EXPECT_GT(t->grad().abs().sum().item<double>(), 0.0);
    }
  }
  for (bool training : {false, true}) {
    auto x = at::randn({4, 3, 2, 2}).requires_grad_();
    auto s = at::rand({3}).add_(0.5).requires_grad_();
    auto b = at::randn({3}).requires_grad_();
    auto mean = at::zeros({3}), var = at::ones({3});
    run1(make_node("BatchNormalization", 5), {x, s, b, mean, var}, training).pow(2).sum().backward();
    for (auto* t : {&x, &s, &b}) {
      ASSERT_TRUE(t->grad().defined()) << training;
      EXPECT_GT(t->grad().abs().sum().item<double>(), 0.0);
    }
  }
}

// ---- elementwise --------------------------------------------------------------------------

TEST(Elementwise, BroadcastingArithmetic) {
  auto a = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = floats({10, 20, 30});
  expect_close(run1(make_node("Add", 2), {a, b}), floats({11, 22, 33, 14, 25, 36}, {2, 3}));
  expect_close(run1(make_node("Sub", 2), {a, b}), floats({-9, -18, -27, -6, -15, -24}, {2, 3}));
  expect_close(run1(make_node("Mul", 2), {b, a}), floats({10, 40, 90, 40, 100, 180}, {2, 3}));
  expect_close(run1(make_node("Pow", 2), {a, floats({2})}), floats({1, 4, 9, 16, 25, 36}, {2, 3}));
}

TEST(Elementwise, IntegerDivTruncatesTowardZero) {
  auto y = run1(make_node("Div", 2), {ints({-7, 7, -8, 9}), ints({2, 2, 3, -4})});
  EXPECT_EQ(y.scalar_type(), at::kLong);
  EXPECT_EQ(vec(y), (std::vector<int64_t>{-3, 3, -2, -2}));
  expect_close(run1(make_node("Div", 2), {floats({1, -3}), floats({2})}), floats({0.5, -1.5}));
}

TEST(Clip, OptionalInputsAndAttributes) {
  auto x = floats({-2, -0.5, 0.5, 2});
  auto lo = floats({-1}).reshape({}), hi = floats({1}).reshape({});
  expect_close(run1(make_node("Clip", 3), {x, lo, hi}), floats({-1, -0.5, 0.5, 1}));
  expect_close(run1(make_node("Clip", 2), {x, lo}), floats({-1, -0.5, 0.5, 2}));
  expect_close(run1(make_node("Clip", 3, 1, {}, {1}), {x, at::Tensor(), hi}),
               floats({-2, -0.5, 0.5, 1}));
  expect_close(run1(make_node("Clip", 1), {x}), x);
  expect_close(run1(make_node("Clip", 1, 1, {{"min", 0.0f}, {"max", 0.6f}}), {x}),
               floats({0, 0, 0.5, 0.6}));
}

TEST(Cast, ConvertsByOnnxTypeNumber) {
  auto x = floats({1.7f, -1.7f, 0.0f});
  auto to_i64 = run1(make_node("Cast", 1, 1, {{"to", int64_t{7}}}), {x});
  EXPECT_EQ(to_i64.scalar_type(), at::kLong);
  EXPECT_EQ(vec(to_i64), (std::vector<int64_t>{1, -1, 0}));
  auto to_bool = run1(make_node("Cast", 1, 1, {{"to", int64_t{9}}}), {x});
  EXPECT_EQ(to_bool.scalar_type(), at::kBool);
  EXPECT_EQ(vec(to_bool), (std::vector<int64_t>{1, 1, 0}));
  auto to_f = run1(make_node("Cast", 1, 1, {{"to", int64_t{1}}}), {ints({3, -2})});
  expect_close(to_f, floats({3, -2}));
  EXPECT_THROW(run1(make_node("Cast", 1, 1, {{"to", int64_t{8}}}), {x}), InputError);  // string
}

TEST(Where, SelectsWithBroadcasting) {
  auto cond = bools({1, 0, 1}).reshape({1, 3});
  auto x = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  auto y = floats({-1});
  expect_close(run1(make_node("Where", 3), {cond, x, y}), floats({1, -1, 3, 4, -1, 6}, {2, 3}));
}

TEST(Elementwise, ComparisonsAndLogic) {
  auto a = floats({1, 2, 3}), b = floats({2, 2, 2});
  EXPECT_EQ(vec(run1(make_node("Equal", 2), {a, b})), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(vec(run1(make_node("Less", 2), {a, b})), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(vec(run1(make_node("Greater", 2), {a, b})), (std::vector<int64_t>{0, 0, 1}));
  auto t = bools({1, 1, 0, 0});
  auto u = bools({1, 0, 1, 0});
  EXPECT_EQ(vec(run1(make_node("And", 2), {t, u})), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(vec(run1(make_node("Or", 2), {t, u})), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(vec(run1(make_node("Not", 1), {t})), (std::vector<int64_t>{0, 0, 1, 1}));
}

TEST(Elementwise, UnaryMath) {
  auto x = floats({-1, 0, 4});
  expect_close(run1(make_node("Relu", 1), {x}), floats({0, 0, 4}));
  expect_close(run1(make_node("Neg", 1), {x}), floats({1, 0, -4}));
  expect_close(run1(make_node("Abs", 1), {x}), floats({1, 0, 4}));
  expect_close(run1(make_node("Sqrt", 1), {floats({4, 9})}), floats({2, 3}));
  expect_close(run1(make_node("Reciprocal", 1), {floats({4, -0.5})}), floats({0.25, -2}));
  expect_close(run1(make_node("Sigmoid", 1), {floats({0})}), floats({0.5}));
  expect_close(run1(make_node("Erf", 1), {floats({0, 1})}), floats({0, 0.8427007929f}));
  expect_close(run1(make_node("Log", 1), {run1(make_node("Exp", 1), {x})}), x);
  expect_close(run1(make_node("Identity", 1), {x}), x);
}

TEST(Softmax, AxisOpset13) {
  auto x = floats({0, std::log(3.0f)});
  expect_close(run1(make_node("Softmax", 1), {x}), floats({0.25, 0.75}));
  at::manual_seed(1);
  auto r = at::randn({2, 3, 4});
  auto y = run1(make_node("Softmax", 1, 1, {{"axis", int64_t{1}}}), {r});
  expect_close(y, at::softmax(r, 1));
  expect_close(y.sum(1), at::ones({2, 4}));
  expect_close(run1(make_node("Softmax", 1), {r}), at::softmax(r, 2));
  expect_close(run1(make_node("LogSoftmax", 1, 1, {{"axis", int64_t{-2}}}), {r}),
               at::log_softmax(r, 1));
}

// ---- nn -----------------------------------------------------------------------------------

TEST(Gemm, TransposesAlphaBeta) {
  at::manual_seed(2);
  auto a = at::randn({4, 3});  // used as A^T: [3, 4]
  auto b = at::randn({5, 4});  // used as B^T: [4, 5]
  auto c = at::randn({5});
  auto n = make_node("Gemm", 3, 1,
                     {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}});
  expect_close(run1(n, {a, b, c}), 0.5 * at::mm(a.t(), b.t()) + 2 * c);
  auto no_c = make_node("Gemm", 2, 1, {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}});
  expect_close(run1(no_c, {a, b}), 0.5 * at::mm(a.t(), b.t()));
  // Hand-computed: [[1, 2]] @ [[3], [4]] + 10 = 21.
  expect_close(run1(make_node("Gemm", 3), {floats({1, 2}, {1, 2}), floats({3, 4}, {2, 1}), floats({10})}),
               floats({21}, {1, 1}));
  EXPECT_EQ(flops(n, {{4, 3}, {5, 4}, {5}}, {{3, 5}}), 2 * 3 * 5 * 4);
}

TEST(MatMul, NumpyBroadcasting) {
  at::manual_seed(3);
  auto a = at::randn({2, 1, 3, 4}), b = at::randn({5, 4, 2});
  auto y = run1(make_node("MatMul", 2), {a, b});
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{2, 5, 3, 2}));
  expect_close(y, at::matmul(a, b));
  EXPECT_EQ(flops(make_node("MatMul", 2), {{2, 1, 3, 4}, {5, 4, 2}}, {{2, 5, 3, 2}}), 2 * 60 * 4);
}

TEST(Conv, HandComputed) {
  auto x = at::arange(9, at::kFloat).reshape({1, 1, 3, 3});
  auto w = at::ones({1, 1, 2, 2});
  expect_close(run1(make_node("Conv", 2), {x, w}), floats({8, 12, 20, 24}, {1, 1, 2, 2}));
}

TEST(Conv, GroupedMatchesPerGroupConvolutions) {
  at::manual_seed(4);
  auto x = at::randn({2, 4, 6, 6});
  auto w = at::randn({6, 2, 3, 3});
  auto b = at::randn({6});
  auto y = run1(make_node("Conv", 3, 1, {{"group", int64_t{2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
                {x, w, b});
  auto want = at::cat({at::conv2d(x.slice(1, 0, 2), w.slice(0, 0, 3), b.slice(0, 0, 3), 1, 1),
                       at::conv2d(x.slice(1, 2, 4), w.slice(0, 3, 6), b.slice(0, 3, 6), 1, 1)},
                      1);
  expect_close(y, want, 1e-4);
  auto n = make_node("Conv", 3, 1, {{"group", int64_t{2}}});
  EXPECT_EQ(flops(n, {{2, 4, 6, 6}, {6, 2, 3, 3}, {6}}, {{2, 6, 4, 4}}), 2 * (2 * 6 * 16) * (2 * 9));
}

TEST(Conv, DepthwiseStrided) {
  at::manual_seed(5);
  auto x = at::randn({2, 3, 7, 7});
  auto w = at::randn({3, 1, 3, 3});
  auto y = run1(make_node("Conv", 2, 1,
                          {{"group", int64_t{3}}, {"strides", std::vector<int64_t>{2, 2}},
                           {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"kernel_shape", std::vector<int64_t>{3, 3}}}),
                {x, w});
  std::vector<at::Tensor> per_channel;
  for (int64_t c = 0; c < 3; ++c)
    per_channel.push_back(at::conv2d(x.slice(1, c, c + 1), w.slice(0, c, c + 1), {}, 2, 1));
  expect_close(y, at::cat(per_channel, 1), 1e-4);
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{2, 3, 4, 4}));
}

TEST(Conv, AsymmetricPadsMatchExplicitPad) {
  at::manual_seed(6);
  auto x = at::randn({1, 2, 5, 6});
  auto w = at::randn({3, 2, 3, 2});
  // ONNX pads [top, left, bottom, right] = [0, 1, 2, 1]; constant_pad_nd takes [left, right, top, bottom].
  auto y = run1(make_node("Conv", 2, 1, {{"pads", std::vector<int64_t>{0, 1, 2, 1}}}), {x, w});
  expect_close(y, at::conv2d(at::constant_pad_nd(x, {1, 1, 0, 2}), w), 1e-4);
}

TEST(Conv, AutoPadSame) {
  at::manual_seed(7);
  auto x = at::randn({1, 1, 5, 5});
  auto w = at::randn({1, 1, 4, 4});
  // Total pad 3 per dim: SAME_UPPER puts the extra one at the end, SAME_LOWER at the beginning.
  auto upper = run1(make_node("Conv", 2, 1, {{"auto_pad", std::string("SAME_UPPER")}}), {x, w});
  expect_close(upper, at::conv2d(at::constant_pad_nd(x, {1, 2, 1, 2}), w), 1e-4);
  auto lower = run1(make_node("Conv", 2, 1, {{"auto_pad", std::string("SAME_LOWER")}}), {x, w});
  expect_close(lower, at::conv2d(at::constant_pad_nd(x, {2, 1, 2, 1}), w), 1e-4);
  auto valid = run1(make_node("Conv", 2, 1, {{"auto_pad", std::string("VALID")}}), {x, w});
  EXPECT_EQ(valid.sizes(), (at::IntArrayRef{1, 1, 2, 2}));
}

TEST(Conv, OneDimensionalDilated) {
  at::manual_seed(8);
  auto x = at::randn({2, 2, 9});
  auto w = at::randn({3, 2, 3});
  auto b = at::randn({3});
  auto y = run1(make_node("Conv", 3, 1, {{"dilations", std::vector<int64_t>{2}}, {"pads", std::vector<int64_t>{2, 2}}}),
                {x, w, b});
  expect_close(y, at::conv1d(x, w, b, 1, 2, 2), 1e-4);
}

TEST(ConvTranspose, MatchesLibtorchAndCropsPads) {
  at::manual_seed(9);
  auto x = at::randn({1, 2, 3, 3});
  auto w = at::randn({2, 3, 3, 3});
  auto y = run1(make_node("ConvTranspose", 2, 1,
                          {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                           {"output_padding", std::vector<int64_t>{1, 1}}}),
                {x, w});
  expect_close(y, at::conv_transpose2d(x, w, {}, 2, 1, 1), 1e-4);
  auto asym = run1(make_node("ConvTranspose", 2, 1,
                             {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{0, 1, 1, 0}}}),
                   {x, w});
  auto full = at::conv_transpose2d(x, w, {}, 2);
  expect_close(asym, full.slice(2, 0, full.size(2) - 1).slice(3, 1, full.size(3)), 1e-4);
}

TEST(MaxPool, CeilModeHandComputed) {
  auto x = at::arange(1, 26, at::kFloat).reshape({1, 1, 5, 5});
  auto attrs = std::map<std::string, AttrValue>{{"kernel_shape", std::vector<int64_t>{2, 2}},
                                                {"strides", std::vector<int64_t>{2, 2}}};
  expect_close(run1(make_node("MaxPool", 1, 1, attrs), {x}), floats({7, 9, 17, 19}, {1, 1, 2, 2}));
  attrs["ceil_mode"] = int64_t{1};
  expect_close(run1(make_node("MaxPool", 1, 1, attrs), {x}),
               floats({7, 9, 10, 17, 19, 20, 22, 24, 25}, {1, 1, 3, 3}));
}

TEST(MaxPool, AsymmetricPadsCountAsMinusInfinity) {
  auto x = -at::arange(1, 10, at::kFloat).reshape({1, 1, 3, 3});  // all negative
  auto y = run1(make_node("MaxPool", 1, 1,
                          {{"kernel_shape", std::vector<int64_t>{2, 2}},
                           {"pads", std::vector<int64_t>{0, 0, 1, 1}}}),
                {x});
  // Windows that reach into the pads still take the max of the real elements only.
  expect_close(y, floats({-1, -2, -3, -4, -5, -6, -7, -8, -9}, {1, 1, 3, 3}));
}

TEST(MaxPool, IndicesFlattenTheWholeTensor) {
  auto x = at::arange(32, at::kFloat).reshape({2, 1, 4, 4});
  auto outs = run(make_node("MaxPool", 1, 2,
                            {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}}),
                  {x});
  ASSERT_EQ(outs.size(), 2u);
  // Values equal their flat index in x, so the indices equal the maxima.
  EXPECT_EQ(vec(outs[1]), vec(outs[0].to(at::kLong)));
  EXPECT_EQ(vec(outs[1]), (std::vector<int64_t>{5, 7, 13, 15, 21, 23, 29, 31}));
}

TEST(AveragePool, CountIncludePad) {
  auto ones = at::ones({1, 1, 3, 3});
  auto attrs = std::map<std::string, AttrValue>{{"kernel_shape", std::vector<int64_t>{3, 3}},
                                                {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  expect_close(run1(make_node("AveragePool", 1, 1, attrs), {ones}), at::ones({1, 1, 3, 3}));
  attrs["count_include_pad"] = int64_t{1};
  expect_close(run1(make_node("AveragePool", 1, 1, attrs), {ones}),
               floats({4, 6, 4, 6, 9, 6, 4, 6, 4}, {1, 1, 3, 3}) / 9);
}

TEST(AveragePool, AsymmetricPadsHandComputed) {
  auto x = floats({1, 2, 3, 4}, {1, 1, 2, 2});
  auto attrs = std::map<std::string, AttrValue>{{"kernel_shape", std::vector<int64_t>{2, 2}},
                                                {"pads", std::vector<int64_t>{0, 0, 1, 1}}};
  expect_close(run1(make_node("AveragePool", 1, 1, attrs), {x}), floats({2.5, 3, 3.5, 4}, {1, 1, 2, 2}));
  attrs["count_include_pad"] = int64_t{1};
  expect_close(run1(make_node("AveragePool", 1, 1, attrs), {x}),
               floats({2.5, 1.5, 1.75, 1}, {1, 1, 2, 2}));
}

TEST(GlobalAveragePool, MeansSpatialDims) {
  auto x = at::arange(8, at::kFloat).reshape({1, 2, 2, 2});
  expect_close(run1(make_node("GlobalAveragePool", 1), {x}), floats({1.5, 5.5}, {1, 2, 1, 1}));
}

TEST(BatchNormalization, EvalUsesRunningStats) {
  at::manual_seed(10);
  auto x = at::randn({4, 3, 2, 2});
  auto s = at::rand({3}) + 0.5, b = at::randn({3}), mean = at::randn({3}), var = at::rand({3}) + 0.5;
  auto mean0 = mean.clone(), var0 = var.clone();
  auto y = run1(make_node("BatchNormalization", 5, 1, {{"epsilon", 1e-3f}}), {x, s, b, mean, var});
  auto bc = [](const at::Tensor& t) { return t.reshape({1, 3, 1, 1}); };
  expect_close(y, (x - bc(mean0)) / at::sqrt(bc(var0) + 1e-3) * bc(s) + bc(b), 1e-4);
  EXPECT_TRUE(at::equal(mean, mean0));
  EXPECT_TRUE(at::equal(var, var0));
}

TEST(BatchNormalization, TrainingUpdatesRunningStatsWithOnnxMomentum) {
  at::manual_seed(11);
  auto x = at::randn({8, 3, 4, 4}) * 2 + 1;
  auto s = at::rand({3}) + 0.5, b = at::randn({3});
  auto mean = at::zeros({3}), var = at::ones({3});
  auto n = make_node("BatchNormalization", 5, 1, {{"momentum", 0.8f}, {"epsilon", 1e-5f}});
  auto y = run1(n, {x, s, b, mean, var}, /*training=*/true);
  auto batch_mean = x.mean({0, 2, 3});
  auto batch_var = x.var({0, 2, 3}, /*unbiased=*/false);
  auto bc = [](const at::Tensor& t) { return t.reshape({1, 3, 1, 1}); };
  expect_close(y, (x - bc(batch_mean)) / at::sqrt(bc(batch_var) + 1e-5) * bc(s) + bc(b), 1e-4);
  // ONNX momentum weighs the old running value: 0.8 * old + 0.2 * batch (unbiased variance, as
  // PyTorch updates it).
  expect_close(mean, 0.2 * batch_mean, 1e-5);
  expect_close(var, 0.8 + 0.2 * x.var({0, 2, 3}, /*unbiased=*/true), 1e-5);
}

TEST(BatchNormalization, TrainingModeGraphLeavesInputsUntouchedInEval) {
  at::manual_seed(12);
  auto x = at::randn({8, 2});
  auto mean = at::zeros({2}), var = at::ones({2});
  auto outs = run(make_node("BatchNormalization", 5, 3, {{"training_mode", int64_t{1}}}),
                  {x, at::ones({2}), at::zeros({2}), mean, var});
  ASSERT_EQ(outs.size(), 3u);
  expect_close(outs[0], (x - x.mean(0)) / at::sqrt(x.var(0, false) + 1e-5), 1e-4);
  expect_close(outs[1], 0.1 * x.mean(0));
  EXPECT_TRUE(at::equal(mean, at::zeros({2})));
}

TEST(LayerNormalization, MatchesManual) {
  at::manual_seed(13);
  auto x = at::randn({2, 3, 4});
  auto s = at::randn({3, 4}), b = at::randn({3, 4});
  auto outs = run(make_node("LayerNormalization", 3, 3, {{"axis", int64_t{1}}, {"epsilon", 1e-3f}}), {x, s, b});
  ASSERT_EQ(outs.size(), 3u);
  auto mean = x.mean({1, 2}, true);
  auto inv = at::rsqrt(x.var({1, 2}, false, true) + 1e-3);
  expect_close(outs[0], (x - mean) * inv * s + b, 1e-4);
  expect_close(outs[1], mean, 1e-5);
  expect_close(outs[2], inv, 1e-4);
  // Default axis -1, no bias.
  auto s4 = at::randn({4});
  auto y = run1(make_node("LayerNormalization", 2), {x, s4});
  expect_close(y, (x - x.mean(-1, true)) * at::rsqrt(x.var(-1, false, true) + 1e-5) * s4, 1e-4);
  // A scale only broadcastable to the normalized shape takes the spelled-out path.
  auto yb = run1(make_node("LayerNormalization", 2, 1, {{"axis", int64_t{1}}}), {x, s4});
  expect_close(yb, (x - mean) * at::rsqrt(x.var({1, 2}, false, true) + 1e-5) * s4, 1e-4);
}

TEST(Dropout, EvalIsIdentityTrainingDrops) {
  at::manual_seed(14);
  auto x = at::rand({1000}) + 1;
  auto outs = run(make_node("Dropout", 1, 2), {x});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_TRUE(at::equal(outs[0], x));
  EXPECT_TRUE(outs[1].all().item<bool>());
  auto ratio = floats({0.25}).reshape({});
  auto y = run1(make_node("Dropout", 2), {x, ratio}, /*training=*/true);
  auto kept = y.ne(0);
  expect_close(y.masked_select(kept), x.masked_select(kept) / 0.75);
  const double frac = kept.to(at::kFloat).mean().item<double>();
  EXPECT_GT(frac, 0.65);
  EXPECT_LT(frac, 0.85);
  // The graph's training_mode input overrides the run context.
  auto off = at::scalar_tensor(false, at::kBool);
  EXPECT_TRUE(at::equal(run1(make_node("Dropout", 3), {x, ratio, off}, true), x));
}

TEST(Flatten, Axis) {
  auto x = at::arange(24, at::kFloat).reshape({2, 3, 4});
  EXPECT_EQ(run1(make_node("Flatten", 1), {x}).sizes(), (at::IntArrayRef{2, 12}));
  EXPECT_EQ(run1(make_node("Flatten", 1, 1, {{"axis", int64_t{0}}}), {x}).sizes(), (at::IntArrayRef{1, 24}));
  auto y = run1(make_node("Flatten", 1, 1, {{"axis", int64_t{-1}}}), {x});
  expect_close(y, x.reshape({6, 4}));
}

TEST(Reduce, AxesKeepdimsAndNoop) {
  auto x = at::arange(6, at::kFloat).reshape({2, 3});
  expect_close(run1(make_node("ReduceMean", 1, 1, {{"axes", std::vector<int64_t>{1}}}), {x}),
               floats({1, 4}, {2, 1}));
  expect_close(run1(make_node("ReduceSum", 2, 1, {{"keepdims", int64_t{0}}}), {x, ints({0})}),
               floats({3, 5, 7}));
  expect_close(run1(make_node("ReduceMax", 1, 1, {{"keepdims", int64_t{0}}}), {x}), floats({5}).reshape({}));
  expect_close(run1(make_node("ReduceSum", 2, 1, {{"noop_with_empty_axes", int64_t{1}}}), {x, ints({})}), x);
  expect_close(run1(make_node("ReduceMean", 1, 1, {{"axes", std::vector<int64_t>{-2, -1}}}), {x}),
               floats({2.5}, {1, 1}));
  auto xi = ints({1, 2, 3});
  auto si = run1(make_node("ReduceSum", 1), {xi});
  EXPECT_EQ(si.scalar_type(), at::kLong);
  EXPECT_EQ(vec(si), (std::vector<int64_t>{6}));
}

// ---- tensor -------------------------------------------------------------------------------

TEST(Shape, StartEndAndInt64Cpu) {
  auto x = at::zeros({2, 3, 4, 5});
  auto s = run1(make_node("Shape", 1), {x});
  EXPECT_EQ(s.scalar_type(), at::kLong);
  EXPECT_EQ(s.device().type(), at::kCPU);
  EXPECT_EQ(vec(s), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(vec(run1(make_node("Shape", 1, 1, {{"start", int64_t{1}}, {"end", int64_t{-1}}}), {x})),
            (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(vec(run1(make_node("Size", 1), {x})), (std::vector<int64_t>{120}));
}

TEST(Gather, NegativeIndicesAndShape) {
  auto data = at::arange(12, at::kFloat).reshape({3, 4});
  auto y = run1(make_node("Gather", 2, 1, {{"axis", int64_t{1}}}), {data, ints({-1, 0, 1, 1}).reshape({2, 2})});
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{3, 2, 2}));
  expect_close(y[1], floats({7, 4, 5, 5}, {2, 2}));
  auto scalar = run1(make_node("Gather", 2), {data, at::scalar_tensor(-1, at::kLong)});
  expect_close(scalar, floats({8, 9, 10, 11}));
  // Shape subgraphs: gather one dim of a Shape output.
  auto dim = run1(make_node("Gather", 2), {ints({7, 8, 9}), at::scalar_tensor(1, at::kLong)});
  EXPECT_EQ(dim.dim(), 0);
  EXPECT_EQ(dim.item<int64_t>(), 8);
}

TEST(Reshape, ZeroCopiesAndMinusOneInfers) {
  auto x = at::arange(24, at::kFloat).reshape({2, 3, 4});
  auto y = run1(make_node("Reshape", 2), {x, ints({0, -1})});
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{2, 12}));
  expect_close(y, x.reshape({2, 12}));
  EXPECT_EQ(run1(make_node("Reshape", 2), {x, ints({-1, 0, 2})}).sizes(), (at::IntArrayRef{4, 3, 2}));
  auto empty = at::zeros({0, 3});
  EXPECT_EQ(run1(make_node("Reshape", 2, 1, {{"allowzero", int64_t{1}}}), {empty, ints({3, 0})}).sizes(),
            (at::IntArrayRef{3, 0}));
  EXPECT_THROW(run1(make_node("Reshape", 2), {x, ints({-1, -1})}), InputError);
}

TEST(Transpose, DefaultReversesAndPerm) {
  auto x = at::arange(24, at::kFloat).reshape({2, 3, 4});
  expect_close(run1(make_node("Transpose", 1), {x}), x.permute({2, 1, 0}));
  expect_close(run1(make_node("Transpose", 1, 1, {{"perm", std::vector<int64_t>{0, 2, 1}}}), {x}),
               x.permute({0, 2, 1}));
}

TEST(Slice, NegativeStepsAndClamping) {
  auto x = at::arange(10, at::kLong);
  auto reversed = run1(make_node("Slice", 5), {x, ints({-1}), ints({kMin}), ints({0}), ints({-1})});
  EXPECT_EQ(vec(reversed), (std::vector<int64_t>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(vec(run1(make_node("Slice", 5), {x, ints({8}), ints({1}), ints({0}), ints({-3})})),
            (std::vector<int64_t>{8, 5, 2}));
  EXPECT_EQ(vec(run1(make_node("Slice", 3), {x, ints({2}), ints({kMax})})),
            (std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(run1(make_node("Slice", 5), {x, ints({2}), ints({5}), ints({0}), ints({-1})}).numel(), 0);
  auto m = at::arange(12, at::kLong).reshape({3, 4});
  auto y = run1(make_node("Slice", 5), {m, ints({0, 3}), ints({kMax, 0}), ints({0, -1}), ints({2, -2})});
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{2, 2}));
  EXPECT_EQ(vec(y), (std::vector<int64_t>{3, 1, 11, 9}));
  // A gradient flows back through a reversed slice.
  auto f = at::arange(4, at::kFloat).requires_grad_();
  (run1(make_node("Slice", 5), {f, ints({-1}), ints({kMin}), ints({0}), ints({-2})}) * floats({1, 10}))
      .sum()
      .backward();
  expect_close(f.grad(), floats({0, 10, 0, 1}));
}

TEST(Concat, JoinsAlongAxis) {
  auto y = run1(make_node("Concat", 3, 1, {{"axis", int64_t{0}}}), {ints({1}), ints({2, 3}), ints({4})});
  EXPECT_EQ(vec(y), (std::vector<int64_t>{1, 2, 3, 4}));
  auto a = at::zeros({2, 3}), b = at::ones({2, 1});
  EXPECT_EQ(run1(make_node("Concat", 2, 1, {{"axis", int64_t{-1}}}), {a, b}).sizes(), (at::IntArrayRef{2, 4}));
}

TEST(Unsqueeze, AxesInputOpset13) {
  auto x = at::arange(12, at::kFloat).reshape({3, 4});
  auto y = run1(make_node("Unsqueeze", 2), {x, ints({0, -1})});
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{1, 3, 4, 1}));
  expect_close(y.reshape({3, 4}), x);
  EXPECT_EQ(run1(make_node("Unsqueeze", 2), {x, ints({1, 3})}).sizes(), (at::IntArrayRef{3, 1, 4, 1}));
  EXPECT_EQ(run1(make_node("Unsqueeze", 1, 1, {{"axes", std::vector<int64_t>{0}}}), {x}).sizes(),
            (at::IntArrayRef{1, 3, 4}));
  EXPECT_EQ(run1(make_node("Unsqueeze", 2), {at::scalar_tensor(5, at::kLong), ints({0})}).sizes(),
            (at::IntArrayRef{1}));
}

TEST(Squeeze, AxesInputOpset13) {
  auto x = at::zeros({1, 3, 1, 4, 1});
  EXPECT_EQ(run1(make_node("Squeeze", 2), {x, ints({0, -1})}).sizes(), (at::IntArrayRef{3, 1, 4}));
  EXPECT_EQ(run1(make_node("Squeeze", 1), {x}).sizes(), (at::IntArrayRef{3, 4}));
  EXPECT_EQ(run1(make_node("Squeeze", 1, 1, {{"axes", std::vector<int64_t>{2}}}), {x}).sizes(),
            (at::IntArrayRef{1, 3, 4, 1}));
  EXPECT_THROW(run1(make_node("Squeeze", 2), {x, ints({1})}), InputError);
}

TEST(Constant, ValueAttributes) {
  auto t = floats({1, 2, 3});
  auto y = run1(make_node("Constant", 0, 1, {{"value", t}}), {});
  expect_close(y, t);
  y.requires_grad_(true);
  EXPECT_FALSE(t.requires_grad());  // the attribute is not touched by autograd on the output
  auto f = run1(make_node("Constant", 0, 1, {{"value_float", 2.5f}}), {});
  EXPECT_EQ(f.dim(), 0);
  EXPECT_FLOAT_EQ(f.item<float>(), 2.5f);
  auto fs = run1(make_node("Constant", 0, 1, {{"value_floats", std::vector<float>{1, 2}}}), {});
  expect_close(fs, floats({1, 2}));
  auto i = run1(make_node("Constant", 0, 1, {{"value_int", int64_t{4}}}), {});
  EXPECT_EQ(i.scalar_type(), at::kLong);
  EXPECT_EQ(i.dim(), 0);
  EXPECT_EQ(vec(run1(make_node("Constant", 0, 1, {{"value_ints", std::vector<int64_t>{3, 4}}}), {})),
            (std::vector<int64_t>{3, 4}));
}

TEST(ConstantOfShape, FillsWithValue) {
  auto z = run1(make_node("ConstantOfShape", 1), {ints({2, 3})});
  EXPECT_EQ(z.scalar_type(), at::kFloat);
  expect_close(z, at::zeros({2, 3}));
  auto v = run1(make_node("ConstantOfShape", 1, 1, {{"value", ints({7})}}), {ints({3})});
  EXPECT_EQ(v.scalar_type(), at::kLong);
  EXPECT_EQ(vec(v), (std::vector<int64_t>{7, 7, 7}));
}

TEST(Expand, BidirectionalBroadcast) {
  auto x = floats({1, 2, 3}, {3, 1});
  auto y = run1(make_node("Expand", 2), {x, ints({2, 1, 4})});
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{2, 3, 4}));
  expect_close(y[1].select(1, 3), floats({1, 2, 3}));
  // A 1 in the shape keeps the input's dim.
  EXPECT_EQ(run1(make_node("Expand", 2), {at::zeros({3, 4}), ints({1})}).sizes(), (at::IntArrayRef{3, 4}));
  EXPECT_THROW(run1(make_node("Expand", 2), {at::zeros({3, 4}), ints({2, 4})}), InputError);
}

TEST(Split, SizesInputAndEqualParts) {
  auto x = at::arange(10, at::kLong);
  auto parts = run(make_node("Split", 2, 2), {x, ints({3, 7})});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(vec(parts[0]), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(parts[1].numel(), 7);
  auto halves = run(make_node("Split", 1, 2), {x});
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_EQ(vec(halves[1]), (std::vector<int64_t>{5, 6, 7, 8, 9}));
  EXPECT_THROW(run(make_node("Split", 2, 2), {x, ints({3, 3})}), InputError);
}

TEST(Range, IntAndFloat) {
  auto r = run1(make_node("Range", 3), {at::scalar_tensor(1, at::kLong), at::scalar_tensor(10, at::kLong),
                                        at::scalar_tensor(3, at::kLong)});
  EXPECT_EQ(r.scalar_type(), at::kLong);
  EXPECT_EQ(vec(r), (std::vector<int64_t>{1, 4, 7}));
  auto f = run1(make_node("Range", 3), {at::scalar_tensor(1.0, at::kFloat), at::scalar_tensor(0.0, at::kFloat),
                                        at::scalar_tensor(-0.25, at::kFloat)});
  expect_close(f, floats({1, 0.75, 0.5, 0.25}));
  EXPECT_EQ(run1(make_node("Range", 3), {at::scalar_tensor(5, at::kLong), at::scalar_tensor(1, at::kLong),
                                          at::scalar_tensor(1, at::kLong)})
                .numel(),
            0);
}

TEST(Tile, RepeatsEachDim) {
  auto x = ints({1, 2}).reshape({1, 2});
  auto y = run1(make_node("Tile", 2), {x, ints({2, 2})});
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{2, 4}));
  EXPECT_EQ(vec(y), (std::vector<int64_t>{1, 2, 1, 2, 1, 2, 1, 2}));
}

TEST(Pad, ConstantAndEdge) {
  auto x = floats({1, 2, 3, 4}, {1, 2, 2});
  auto c = run1(make_node("Pad", 3), {x, ints({0, 0, 1, 0, 0, 0}), floats({9}).reshape({})});
  expect_close(c, floats({9, 1, 2, 9, 3, 4}, {1, 2, 3}));
  auto e = run1(make_node("Pad", 2, 1, {{"mode", std::string("edge")}}), {x, ints({0, 1, 0, 0, 0, 0})});
  expect_close(e, floats({1, 2, 1, 2, 3, 4}, {1, 3, 2}));
}

}  // namespace
}  // namespace pare::core
