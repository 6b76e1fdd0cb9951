// The op harness's case table (see op_harness.h): every op core registers, with the attribute
// and input variants real exports use. Inputs keep away from where an op is not differentiable
// (kinks, ties, poles) so that central differences are meaningful, and from where the reference
// and pare may round apart for a legitimate reason (x / scale just beside a half step).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <limits>
#include <mutex>

#include "tests/core/op_harness.h"

namespace pare::core::op_harness {
namespace {

using Ints = std::vector<int64_t>;
using Tensors = std::vector<at::Tensor>;

constexpr int64_t kBig = std::numeric_limits<int64_t>::max();

/// The table's own generator (the global one is left alone for the other tests), reseeded by
/// all_cases().
at::Generator& gen() {
  static at::Generator g = at::make_generator<at::CPUGeneratorImpl>(0);
  return g;
}

at::Tensor randn(Ints s, double scale = 1) { return at::randn(s, gen(), at::kFloat) * scale; }
at::Tensor uni(Ints s, double lo, double hi) { return at::rand(s, gen(), at::kFloat) * (hi - lo) + lo; }
/// Values in [lo, hi) of type `t` (float by default: integer-valued floats make ties).
at::Tensor ints(Ints s, int64_t lo, int64_t hi, at::ScalarType t = at::kFloat) {
  return at::randint(lo, hi, s, gen(), at::kLong).to(t);
}
at::Tensor bools(Ints s) { return at::randint(0, 2, s, gen(), at::kLong).ne(0); }
/// Magnitudes in [lo, hi) with random signs: away from 0 (poles, kinks).
at::Tensor signed_uni(Ints s, double lo, double hi) {
  return uni(s, lo, hi) * (bools(s).to(at::kFloat) * 2 - 1);
}
at::Tensor i64(Ints v) { return at::tensor(at::ArrayRef<int64_t>(v), at::kLong); }
at::Tensor i64s(int64_t v) { return at::scalar_tensor(v, at::kLong); }
at::Tensor f32s(float v) { return at::scalar_tensor(v, at::kFloat); }
at::Tensor f32(std::vector<float> v, Ints s) {
  return at::tensor(at::ArrayRef<float>(v), at::kFloat).reshape(s);
}
at::Tensor omitted() { return at::Tensor(); }

void add_elementwise_cases(std::vector<OpCase>& v) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    const bool div = std::string(op) == "Div";
    v.push_back(OpCase(op, "Broadcast", {randn({2, 3, 4}), div ? signed_uni({3, 1}, 0.5, 2) : randn({3, 1})})
                    .grad({0, 1}));
    v.push_back(OpCase(op, "FirstBroadcastScalar", {randn({}), div ? signed_uni({2, 3}, 0.5, 2) : randn({2, 3})})
                    .grad({0, 1}));
    // Integer Div truncates toward zero in ONNX (C), not toward -inf (Python).
    v.push_back(OpCase(op, "Int64", {ints({2, 5}, -20, 20, at::kLong),
                                     ints({5}, 1, 7, at::kLong) * (bools({5}).to(at::kLong) * 2 - 1)}));
  }
  v.push_back(OpCase("Pow", "FloatExponent", {uni({2, 3}, 0.5, 2), uni({3}, -2, 2)}).grad({0, 1}));
  v.push_back(OpCase("Pow", "Int64Exponent", {signed_uni({2, 3}, 0.5, 2), i64s(3)}).grad({0}));
  // Float Mod needs fmod=1 in ONNX; integer Mod without it takes the divisor's sign.
  v.push_back(OpCase("Mod", "FmodFloat", {randn({2, 4}, 5), uni({4}, 1, 3)})
                  .attrs({{"fmod", int64_t{1}}}).grad({0}));
  v.push_back(OpCase("Mod", "Int64DivisorSign", {ints({3, 4}, -20, 20, at::kLong),
                                                 ints({4}, 1, 7, at::kLong) * (bools({4}).to(at::kLong) * 2 - 1)}));
  v.push_back(OpCase("Mod", "FmodInt32", {ints({3, 4}, -20, 20, at::kInt), ints({4}, 1, 7, at::kInt)})
                  .attrs({{"fmod", int64_t{1}}}));
  for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}) {
    v.push_back(OpCase(op, "FloatTiesBroadcast", {ints({2, 3, 4}, -2, 3), ints({4}, -2, 3)}));
    v.push_back(OpCase(op, "Int64", {ints({3, 4}, -2, 3, at::kLong), i64s(0)}));
  }
  for (const char* op : {"And", "Or", "Xor"})
    v.push_back(OpCase(op, "Broadcast", {bools({2, 3, 4}), bools({3, 1})}));
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    v.push_back(OpCase(op, "ThreeInputsBroadcast", {randn({2, 3}), randn({3}), randn({2, 1})}).grad({0, 1, 2}));
    v.push_back(OpCase(op, "OneInput", {randn({2, 3})}).grad({0}));
  }
  v.push_back(OpCase("Max", "Int64", {ints({2, 3}, -9, 9, at::kLong), ints({3}, -9, 9, at::kLong)}));

  struct Unary {
    const char* op;
    at::Tensor x;
    Attrs attrs;
    double atol;
  };
  // Round: exact halves go to the even neighbour.
  const at::Tensor halves = f32({-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 3.5f, -3.5f}, {8});
  const Unary unary[] = {
      {"Identity", randn({2, 3}), {}, 0},
      {"Neg", randn({2, 3, 4}), {}, 0},
      {"Abs", randn({2, 3, 4}), {}, 0},
      {"Sqrt", uni({2, 3, 4}, 0.1, 9), {}, 1e-6},
      {"Exp", randn({2, 3, 4}, 2), {}, 1e-5},
      {"Log", uni({2, 3, 4}, 0.05, 20), {}, 1e-6},
      {"Reciprocal", signed_uni({2, 3, 4}, 0.25, 4), {}, 1e-6},
      {"Floor", randn({2, 3, 4}, 4), {}, 0},
      {"Ceil", randn({2, 3, 4}, 4), {}, 0},
      {"Round", randn({2, 3, 4}, 4), {}, 0},
      {"Sign", randn({2, 3, 4}, 3), {}, 0},
      {"Sin", randn({2, 3, 4}, 3), {}, 1e-6},
      {"Cos", randn({2, 3, 4}, 3), {}, 1e-6},
      {"Erf", randn({2, 3, 4}, 2), {}, 1e-6},
      {"Tanh", randn({2, 3, 4}, 2), {}, 1e-6},
      {"Sigmoid", randn({2, 3, 4}, 3), {}, 1e-6},
      {"Relu", randn({2, 3, 4}), {}, 0},
      {"LeakyRelu", randn({2, 3, 4}), {{"alpha", 0.1f}}, 1e-6},
      {"Elu", randn({2, 3, 4}, 2), {{"alpha", 0.7f}}, 1e-6},
      {"HardSigmoid", randn({2, 3, 4}, 3), {{"alpha", 0.3f}, {"beta", 0.4f}}, 1e-6},
      {"HardSwish", randn({2, 3, 4}, 4), {}, 1e-6},
      {"Softplus", randn({2, 3, 4}, 4), {}, 1e-5},
      {"Tan", uni({2, 3, 4}, -1.2, 1.2), {}, 1e-5},
      {"Asin", uni({2, 3, 4}, -0.9, 0.9), {}, 1e-6},
      {"Acos", uni({2, 3, 4}, -0.9, 0.9), {}, 1e-6},
      {"Atan", randn({2, 3, 4}, 3), {}, 1e-6},
      {"Sinh", randn({2, 3, 4}, 2), {}, 1e-5},
      {"Cosh", randn({2, 3, 4}, 2), {}, 1e-5},
      {"Asinh", randn({2, 3, 4}, 3), {}, 1e-6},
      {"Acosh", uni({2, 3, 4}, 1.1, 5), {}, 1e-6},
      {"Atanh", uni({2, 3, 4}, -0.9, 0.9), {}, 1e-6},
      {"Selu", signed_uni({2, 3, 4}, 0.1, 3), {}, 1e-6},
      {"Celu", signed_uni({2, 3, 4}, 0.1, 3), {{"alpha", 0.8f}}, 1e-6},
  };
  for (const auto& u : unary) v.push_back(OpCase(u.op, "Float", {u.x}).attrs(u.attrs).tol(u.atol).grad({0}));
  // Exact halves and zeros, where these steps are not differentiable: forward only.
  v.push_back(OpCase("Round", "HalvesToEven", {at::cat({halves, randn({8}, 4)})}).tol(0));
  v.push_back(OpCase("Sign", "Zeros", {f32({0.f, -0.f, 1.5f, -2.f}, {4})}).tol(0));
  v.push_back(OpCase("LeakyRelu", "DefaultAlpha", {randn({3, 4})}).grad({0}));
  v.push_back(OpCase("Abs", "Int64", {ints({3, 4}, -9, 9, at::kLong)}));
  v.push_back(OpCase("Neg", "Int32", {ints({3, 4}, -9, 9, at::kInt)}));
  v.push_back(OpCase("Relu", "Scalar", {randn({})}));
  v.push_back(OpCase("Not", "Bool", {bools({2, 5})}));
  // Steps at +-alpha / +-lambd: forward only.
  v.push_back(OpCase("ThresholdedRelu", "Alpha", {randn({3, 4}, 2)}).attrs({{"alpha", 0.5f}}).tol(0));
  v.push_back(OpCase("Shrink", "LambdBias", {randn({3, 4}, 2)}).attrs({{"lambd", 0.7f}, {"bias", 0.2f}}).tol(1e-6));
  v.push_back(OpCase("Trilu", "UpperK", {randn({2, 4, 5}), i64s(1)}).tol(0).grad({0}));
  v.push_back(OpCase("Trilu", "LowerDefaultK", {randn({3, 3})}).attrs({{"upper", int64_t{0}}}).tol(0).grad({0}));
  v.push_back(OpCase("NegativeLogLikelihoodLoss", "MeanWeightedIgnore",
                     {at::log_softmax(randn({4, 5}), 1), i64({0, 3, 1, 4}), uni({5}, 0.5, 2)})
                  .attrs({{"ignore_index", int64_t{1}}})
                  .tol(1e-6)
                  .grad({0}));
  v.push_back(OpCase("NegativeLogLikelihoodLoss", "NCdNone",
                     {at::log_softmax(randn({2, 3, 4}), 1), ints({2, 4}, 0, 3, at::kLong)})
                  .attrs({{"reduction", std::string("none")}})
                  .tol(1e-6)
                  .grad({0}));
  v.push_back(OpCase("SoftmaxCrossEntropyLoss", "Sum", {randn({3, 4}, 2), i64({1, 0, 3})})
                  .attrs({{"reduction", std::string("sum")}})
                  .tol(1e-5)
                  .grad({0}));

  // Cast (`to` is an ONNX data type number: FLOAT 1, UINT8 2, INT8 3, INT32 6, INT64 7, BOOL 9,
  // DOUBLE 11).
  v.push_back(OpCase("Cast", "FloatToInt64Truncates", {randn({3, 4}, 5)}).attrs({{"to", int64_t{7}}}));
  v.push_back(OpCase("Cast", "FloatToInt32", {randn({3, 4}, 5)}).attrs({{"to", int64_t{6}}}));
  v.push_back(OpCase("Cast", "FloatToUint8", {uni({3, 4}, 0, 200)}).attrs({{"to", int64_t{2}}}));
  v.push_back(OpCase("Cast", "FloatToInt8", {uni({3, 4}, -100, 100)}).attrs({{"to", int64_t{3}}}));
  v.push_back(OpCase("Cast", "FloatToBool", {ints({2, 5}, -1, 2)}).attrs({{"to", int64_t{9}}}));
  v.push_back(OpCase("Cast", "BoolToFloat", {bools({2, 5})}).attrs({{"to", int64_t{1}}}));
  v.push_back(OpCase("Cast", "Int64ToFloat", {ints({5}, -100, 100, at::kLong)}).attrs({{"to", int64_t{1}}}));
  v.push_back(OpCase("Cast", "FloatToDouble", {randn({2, 3})}).attrs({{"to", int64_t{11}}}).grad({0}));

  v.push_back(OpCase("Clip", "InputBounds", {randn({2, 3, 4}, 3), f32s(-1.f), f32s(2.f)}).tol(0).grad({0}));
  v.push_back(OpCase("Clip", "OnlyMax", {randn({2, 3, 4}, 3), omitted(), f32s(0.5f)}).tol(0).grad({0}));
  v.push_back(OpCase("Clip", "NoBounds", {randn({2, 3})}).tol(0).grad({0}));
  v.push_back(OpCase("Clip", "Int64", {ints({3, 4}, -20, 20, at::kLong), i64s(-5), i64s(7)}));
  v.push_back(OpCase("Clip", "AttributesOpset6", {randn({2, 3, 4}, 3)})
                  .attrs({{"min", -0.5f}, {"max", 1.5f}}).opset(6).tol(0).grad({0}));

  v.push_back(OpCase("Where", "Broadcast", {bools({3, 1}), randn({2, 3, 4}), randn({4})}).tol(0).grad({1, 2}));
  v.push_back(OpCase("Where", "Int64", {bools({4}), ints({4}, 0, 9, at::kLong), i64s(-1)}));

  v.push_back(OpCase("Softmax", "DefaultLastAxis", {randn({2, 3, 5}, 3)}).tol(1e-6).grad({0}));
  v.push_back(OpCase("Softmax", "Axis1", {randn({2, 4, 3}, 3)}).attrs({{"axis", int64_t{1}}}).tol(1e-6).grad({0}));
  v.push_back(OpCase("LogSoftmax", "DefaultLastAxis", {randn({2, 7}, 3)}).grad({0}));
  v.push_back(OpCase("LogSoftmax", "Axis0", {randn({3, 4}, 3)}).attrs({{"axis", int64_t{0}}}).grad({0}));
}

void add_nn_cases(std::vector<OpCase>& v) {
  using S = std::string;
  v.push_back(OpCase("Conv", "Pads1Bias", {randn({1, 3, 5, 5}), randn({4, 3, 3, 3}), randn({4})})
                  .attrs({{"pads", Ints{1, 1, 1, 1}}}).tol(1e-5, 1e-4).grad({0, 1, 2}));
  v.push_back(OpCase("Conv", "Groups2Stride2Dilation2", {randn({2, 4, 9, 9}), randn({6, 2, 3, 3}), randn({6})})
                  .attrs({{"group", int64_t{2}}, {"strides", Ints{2, 2}}, {"dilations", Ints{2, 2}},
                          {"pads", Ints{1, 1, 1, 1}}})
                  .tol(1e-5, 1e-4).grad({1}));
  v.push_back(OpCase("Conv", "Depthwise", {randn({1, 4, 6, 6}), randn({4, 1, 3, 3})})
                  .attrs({{"group", int64_t{4}}, {"pads", Ints{1, 1, 1, 1}}}).tol(1e-5, 1e-4).grad({0, 1}));
  v.push_back(OpCase("Conv", "AsymmetricPads", {randn({1, 3, 6, 6}), randn({4, 3, 3, 3}), randn({4})})
                  .attrs({{"pads", Ints{0, 1, 2, 0}}, {"strides", Ints{1, 2}}}).tol(1e-5, 1e-4).grad({0}));
  v.push_back(OpCase("Conv", "SameUpperStride2", {randn({1, 3, 7, 7}), randn({4, 3, 3, 3})})
                  .attrs({{"auto_pad", S("SAME_UPPER")}, {"strides", Ints{2, 2}}}).tol(1e-5, 1e-4));
  v.push_back(OpCase("Conv", "SameLowerEvenKernel", {randn({1, 2, 6, 6}), randn({3, 2, 2, 2})})
                  .attrs({{"auto_pad", S("SAME_LOWER")}}).tol(1e-5, 1e-4));
  v.push_back(OpCase("Conv", "1D", {randn({2, 3, 9}), randn({4, 3, 3}), randn({4})})
                  .attrs({{"pads", Ints{1, 1}}, {"strides", Ints{2}}}).tol(1e-5, 1e-4).grad({0, 1, 2}));
  v.push_back(OpCase("Conv", "3D", {randn({1, 2, 4, 4, 4}), randn({3, 2, 2, 2, 2}), randn({3})})
                  .attrs({{"pads", Ints{1, 0, 1, 0, 1, 0}}}).tol(1e-5, 1e-4));

  v.push_back(OpCase("ConvTranspose", "Stride2Pads1OutputPadding", {randn({1, 3, 3, 3}), randn({3, 2, 3, 3}), randn({2})})
                  .attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"output_padding", Ints{1, 1}}})
                  .tol(1e-5, 1e-4).grad({0, 1, 2}));
  v.push_back(OpCase("ConvTranspose", "Group2AsymmetricPads", {randn({1, 4, 3, 3}), randn({4, 1, 3, 3})})
                  .attrs({{"group", int64_t{2}}, {"pads", Ints{0, 1, 1, 0}}}).tol(1e-5, 1e-4).grad({0, 1}));
  v.push_back(OpCase("ConvTranspose", "OutputShape", {randn({1, 2, 4, 4}), randn({2, 3, 3, 3})})
                  .attrs({{"strides", Ints{2, 2}}, {"output_shape", Ints{8, 8}}}).tol(1e-5, 1e-4));
  v.push_back(OpCase("ConvTranspose", "SameUpper", {randn({1, 2, 3, 3}), randn({2, 2, 2, 2})})
                  .attrs({{"strides", Ints{2, 2}}, {"auto_pad", S("SAME_UPPER")}}).tol(1e-5, 1e-4));
  v.push_back(OpCase("ConvTranspose", "1DDilation2", {randn({2, 3, 5}), randn({3, 2, 3}), randn({2})})
                  .attrs({{"dilations", Ints{2}}}).tol(1e-5, 1e-4).grad({0, 1, 2}));

  v.push_back(OpCase("Gemm", "TransBAlphaBetaBroadcastC", {randn({3, 5}), randn({4, 5}), randn({4})})
                  .attrs({{"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}}).tol(1e-5, 1e-4).grad({0, 1, 2}));
  v.push_back(OpCase("Gemm", "TransANoC", {randn({5, 3}), randn({5, 4})})
                  .attrs({{"transA", int64_t{1}}}).tol(1e-5, 1e-4).grad({0, 1}));
  v.push_back(OpCase("Gemm", "ColumnC", {randn({3, 5}), randn({5, 4}), randn({3, 1})}).tol(1e-5, 1e-4).grad({2}));
  v.push_back(OpCase("MatMul", "Batched", {randn({2, 3, 4}), randn({4, 5})}).tol(1e-5, 1e-4).grad({0, 1}));
  v.push_back(OpCase("MatMul", "BroadcastBatch", {randn({2, 1, 3, 4}), randn({3, 4, 2})}).tol(1e-5, 1e-4).grad({0, 1}));
  v.push_back(OpCase("MatMul", "VectorLeft", {randn({4}), randn({4, 3})}).tol(1e-5, 1e-4).grad({0, 1}));
  v.push_back(OpCase("MatMul", "VectorRight", {randn({2, 4}), randn({4})}).tol(1e-5, 1e-4).grad({0, 1}));

  v.push_back(OpCase("BatchNormalization", "Inference",
                     {randn({2, 3, 4, 4}), uni({3}, 0.5, 1.5), randn({3}), randn({3}), uni({3}, 0.5, 1.5)})
                  .attrs({{"epsilon", 1e-3f}}).grad({0, 1, 2}));
  v.push_back(OpCase("BatchNormalization", "TrainingModeBatchStatistics",
                     {randn({4, 3, 2, 2}), uni({3}, 0.5, 1.5), randn({3}), randn({3}), uni({3}, 0.5, 1.5)})
                  .attrs({{"training_mode", int64_t{1}}, {"momentum", 0.8f}}).outputs(3).opset(15).tol(1e-5, 1e-5)
                  .grad({0, 1, 2}).grad_outputs(1));
  v.push_back(OpCase("BatchNormalization", "Rank2",
                     {randn({4, 3}), uni({3}, 0.5, 1.5), randn({3}), randn({3}), uni({3}, 0.5, 1.5)}).grad({0}));
  v.push_back(OpCase("LayerNormalization", "LastAxisMeanInvStd", {randn({2, 3, 8}, 2), randn({8}), randn({8})})
                  .attrs({{"epsilon", 1e-5f}}).outputs(3).grad({0, 1, 2}));
  v.push_back(OpCase("LayerNormalization", "Axis1", {randn({2, 3, 4}), randn({3, 4}), randn({3, 4})})
                  .attrs({{"axis", int64_t{1}}}).grad({0, 1, 2}));
  v.push_back(OpCase("LayerNormalization", "NoBias", {randn({4, 6}), uni({6}, 0.5, 1.5)})
                  .attrs({{"epsilon", 1e-3f}}).grad({0, 1}));

  v.push_back(OpCase("MaxPool", "K3S2Pads1Indices", {randn({1, 2, 7, 7})})
                  .attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})
                  .outputs(2).tol(0).grad({0}));
  v.push_back(OpCase("MaxPool", "CeilMode", {randn({1, 2, 6, 6})})
                  .attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}})
                  .tol(0).grad({0}));
  v.push_back(OpCase("MaxPool", "Dilation2", {randn({1, 2, 7, 7})})
                  .attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}}).tol(0));
  v.push_back(OpCase("MaxPool", "AsymmetricPads", {randn({1, 2, 5, 5})})
                  .attrs({{"kernel_shape", Ints{2, 2}}, {"pads", Ints{0, 1, 1, 0}}}).tol(0).grad({0}));
  v.push_back(OpCase("MaxPool", "1DSameUpper", {randn({2, 3, 7})})
                  .attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"auto_pad", S("SAME_UPPER")}}).tol(0));
  v.push_back(OpCase("AveragePool", "Pads1ExcludePad", {randn({1, 2, 5, 5})})
                  .attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}).tol(1e-6).grad({0}));
  v.push_back(OpCase("AveragePool", "Pads1IncludePad", {randn({1, 2, 5, 5})})
                  .attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"count_include_pad", int64_t{1}}})
                  .tol(1e-6).grad({0}));
  v.push_back(OpCase("AveragePool", "AsymmetricPadsExcludePad", {randn({1, 2, 5, 5})})
                  .attrs({{"kernel_shape", Ints{2, 3}}, {"pads", Ints{1, 0, 0, 2}}, {"strides", Ints{1, 2}}})
                  .tol(1e-6).grad({0}));
  v.push_back(OpCase("AveragePool", "CeilModeStride2", {randn({1, 2, 6, 6})})
                  .attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}})
                  .tol(1e-6));
  v.push_back(OpCase("GlobalAveragePool", "Rank4", {randn({2, 3, 4, 5})}).tol(1e-6).grad({0}));
  v.push_back(OpCase("GlobalMaxPool", "Rank3", {randn({2, 3, 7})}).tol(0).grad({0}));
  v.push_back(OpCase("Flatten", "Axis2", {randn({2, 3, 4, 5})}).attrs({{"axis", int64_t{2}}}).tol(0).grad({0}));
  v.push_back(OpCase("Flatten", "Axis0", {randn({2, 3, 4})}).attrs({{"axis", int64_t{0}}}).tol(0));
  v.push_back(OpCase("Dropout", "InferenceRatioInputMask", {randn({2, 3}), f32s(0.3f)}).outputs(2).tol(0).grad({0}));
  v.push_back(OpCase("Dropout", "InferenceDefault", {randn({2, 3, 4})}).tol(0));

  const char* reduce[] = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                          "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp"};
  for (const char* op : reduce) {
    const bool sum = std::string(op) == "ReduceSum";  // axes an input from opset 13, the others from 18
    const bool prod = std::string(op) == "ReduceProd";
    auto x = [&](Ints s) { return prod ? signed_uni(s, 0.5, 1.5) : randn(s); };
    OpCase one(op, "Axis1Keepdims", {x({2, 3, 4})});
    if (sum) one.inputs.push_back(i64({1}));
    else one.attrs({{"axes", Ints{1}}});
    v.push_back(one.tol(1e-5, 1e-5).grad({0}));
    OpCase two(op, "TwoAxesNoKeepdims", {x({2, 3, 4})});
    if (sum) two.inputs.push_back(i64({0, -1}));
    else two.attrs({{"axes", Ints{0, -1}}});
    two.attrs_["keepdims"] = int64_t{0};
    v.push_back(two.tol(1e-5, 1e-5).grad({0}));
    v.push_back(OpCase(op, "AllAxes", {x({2, 3})}).tol(1e-5, 1e-5).grad({0}));
  }
  v.push_back(OpCase("ReduceSum", "Int64", {ints({3, 4}, -50, 50, at::kLong), i64({0})}));
  v.push_back(OpCase("ReduceMean", "AxesInputOpset18", {randn({2, 3, 4}), i64({-2})}).opset(18).grad({0}));
  v.push_back(OpCase("ReduceMax", "NoopWithEmptyAxesOpset18", {randn({2, 3})})
                  .attrs({{"noop_with_empty_axes", int64_t{1}}}).opset(18).tol(0));
}

void add_tensor_cases(std::vector<OpCase>& v) {
  v.push_back(OpCase("Shape", "Rank4", {randn({2, 3, 4, 5})}));
  v.push_back(OpCase("Shape", "StartEndOpset15", {randn({2, 3, 4, 5})})
                  .attrs({{"start", int64_t{1}}, {"end", int64_t{-1}}}).opset(15));
  v.push_back(OpCase("Size", "Rank3", {randn({2, 3, 4})}));
  v.push_back(OpCase("Gather", "Axis0NegativeIndices", {randn({5, 4}), i64({0, -1, 2, -3}).reshape({2, 2})})
                  .tol(0).grad({0}));
  v.push_back(OpCase("Gather", "Axis1ScalarIndex", {randn({3, 5, 2}), i64s(-2)})
                  .attrs({{"axis", int64_t{1}}}).tol(0).grad({0}));
  v.push_back(OpCase("Gather", "Int32Indices", {ints({6, 3}, -9, 9, at::kLong), ints({4}, -6, 6, at::kInt)}));
  v.push_back(OpCase("GatherElements", "Axis1NegativeIndices", {randn({3, 4}), ints({3, 2}, -4, 4, at::kLong)})
                  .attrs({{"axis", int64_t{1}}}).tol(0).grad({0}));
  v.push_back(OpCase("Reshape", "ZeroCopiesMinusOneInfers", {randn({2, 3, 4}), i64({0, -1})}).tol(0).grad({0}));
  v.push_back(OpCase("Reshape", "Int64", {ints({2, 6}, -50, 50, at::kLong), i64({3, 4})}));
  v.push_back(OpCase("Transpose", "Perm", {randn({2, 3, 4, 5})}).attrs({{"perm", Ints{0, 2, 3, 1}}}).tol(0).grad({0}));
  v.push_back(OpCase("Transpose", "DefaultReverses", {randn({2, 3, 4})}).tol(0));
  v.push_back(OpCase("Slice", "NegativeStepReverses", {randn({3, 5}), i64({-1}), i64({-kBig}), i64({1}), i64({-1})})
                  .tol(0).grad({0}));
  v.push_back(OpCase("Slice", "StepsOmitted", {randn({4, 6}), i64({1, -4}), i64({kBig, -1}), i64({0, 1})})
                  .tol(0).grad({0}));
  v.push_back(OpCase("Slice", "AxesOmittedStep2", {randn({9}), i64({7}), i64({0}), omitted(), i64({-2})}).tol(0));
  v.push_back(OpCase("Concat", "Axis1ThreeInputs", {randn({2, 1, 3}), randn({2, 4, 3}), randn({2, 2, 3})})
                  .attrs({{"axis", int64_t{1}}}).tol(0).grad({0, 1, 2}));
  v.push_back(OpCase("Concat", "Int64NegativeAxis", {ints({2, 2}, 0, 9, at::kLong), ints({2, 1}, 0, 9, at::kLong)})
                  .attrs({{"axis", int64_t{-1}}}));
  v.push_back(OpCase("Unsqueeze", "AxesInput", {randn({2, 3}), i64({3, 1})}).opset(13).tol(0).grad({0}));
  v.push_back(OpCase("Unsqueeze", "AxesAttributeOpset11", {randn({2, 3})}).attrs({{"axes", Ints{0, -1}}}).opset(11).tol(0));
  v.push_back(OpCase("Squeeze", "AxesInput", {randn({2, 1, 3, 1}), i64({-1, 1})}).opset(13).tol(0).grad({0}));
  v.push_back(OpCase("Squeeze", "NoAxesDropsEveryOne", {randn({1, 3, 1, 2})}).opset(13).tol(0));
  v.push_back(OpCase("Constant", "Tensor", {}).attrs({{"value", randn({2, 3})}}).tol(0));
  v.push_back(OpCase("Constant", "ValueFloats", {}).attrs({{"value_floats", std::vector<float>{1.f, -1.f, 2.5f}}}).tol(0));
  v.push_back(OpCase("Constant", "ValueInt", {}).attrs({{"value_int", int64_t{7}}}));
  v.push_back(OpCase("Constant", "ValueInts", {}).attrs({{"value_ints", Ints{3, -2}}}));
  v.push_back(OpCase("ConstantOfShape", "FloatValue", {i64({2, 3})}).attrs({{"value", f32({2.5f}, {1})}}).tol(0));
  v.push_back(OpCase("ConstantOfShape", "Int64Value", {i64({3})}).attrs({{"value", i64({-3})}}));
  v.push_back(OpCase("ConstantOfShape", "DefaultZeros", {i64({2, 2})}).tol(0));
  v.push_back(OpCase("Expand", "Broadcasts", {randn({3, 1}), i64({2, 3, 4})}).tol(0).grad({0}));
  v.push_back(OpCase("Expand", "ShapeOfOnes", {randn({2, 3}), i64({1, 1})}).tol(0));
  v.push_back(OpCase("Split", "SizesInput", {randn({2, 5, 3}), i64({2, 3})})
                  .attrs({{"axis", int64_t{1}}}).outputs(2).opset(13).tol(0).grad({0}));
  v.push_back(OpCase("Split", "EqualParts", {randn({6, 2})}).outputs(3).opset(13).tol(0).grad({0}));
  v.push_back(OpCase("Split", "SplitAttributeOpset11", {randn({2, 6})})
                  .attrs({{"axis", int64_t{-1}}, {"split", Ints{1, 2, 3}}}).outputs(3).opset(11).tol(0));
  v.push_back(OpCase("Range", "Int64", {i64s(2), i64s(11), i64s(3)}));
  v.push_back(OpCase("Range", "FloatNegativeDelta", {f32s(1.f), f32s(-1.f), f32s(-0.25f)}).tol(1e-6));
  v.push_back(OpCase("Tile", "Repeats", {randn({2, 3}), i64({2, 3})}).tol(0).grad({0}));
  v.push_back(OpCase("Pad", "ConstantValueInput", {randn({2, 3}), i64({1, 0, 2, 3}), f32s(-1.5f)}).tol(0).grad({0}));
  v.push_back(OpCase("Pad", "Reflect", {randn({1, 2, 4, 4}), i64({0, 0, 1, 2, 0, 0, 2, 1})})
                  .attrs({{"mode", std::string("reflect")}}).tol(0).grad({0}));
  v.push_back(OpCase("Pad", "Edge", {randn({1, 2, 3, 3}), i64({0, 0, 2, 1, 0, 0, 1, 2})})
                  .attrs({{"mode", std::string("edge")}}).tol(0).grad({0}));
  v.push_back(OpCase("Pad", "AttributesOpset10", {randn({2, 3})})
                  .attrs({{"pads", Ints{1, 1, 0, 2}}, {"value", 0.25f}}).opset(10).tol(0));
  v.push_back(OpCase("Pad", "AxesInputOpset18", {randn({2, 3, 4}), i64({1, 2, 0, 1}), omitted(), i64({-1, 1})})
                  .opset(18).tol(0).grad({0}));
  v.push_back(OpCase("Pad", "WrapOpset19", {randn({2, 4}), i64({0, 2, 0, 1})})
                  .attrs({{"mode", std::string("wrap")}}).opset(19).tol(0).grad({0}));
  v.push_back(OpCase("ArgMax", "Axis1NoKeepdims", {randn({3, 5, 2})}).attrs({{"axis", int64_t{1}}, {"keepdims", int64_t{0}}}));
  v.push_back(OpCase("ArgMax", "TiesFirstIndex", {ints({4, 6}, 0, 3)}).attrs({{"axis", int64_t{-1}}}));
  v.push_back(OpCase("ArgMin", "TiesSelectLastIndex", {ints({4, 6}, 0, 3)})
                  .attrs({{"axis", int64_t{1}}, {"select_last_index", int64_t{1}}}));
  v.push_back(OpCase("ArgMin", "Axis0", {randn({3, 4})}));

  // The collectives: ONNX Runtime runs them only in its NCCL builds. The reference is a simulated
  // group of two ranks: this process is rank 0, the other rank holds `peer`.
  const at::Tensor peer = randn({2, 3});
  const std::string note = "hand: simulated 2-rank collective in RunContext (rank 1 holds a fixed tensor)";
  auto simulated = [peer](RunContext& ctx) {
    ctx.collective = [peer](const Node& n, const at::Tensor& t) {
      PARE_ASSERT(n.attr_int("group_size", 0) == 2, "the harness simulates groups of 2");
      if (n.op_type == "AllReduce") return t + peer.to(t.scalar_type());
      return at::cat({t, peer.to(t.scalar_type())}, n.attr_int("axis", 0));
    };
  };
  v.push_back(OpCase("AllReduce", "TwoRanksSum", {randn({2, 3})})
                  .attrs({{"group_size", int64_t{2}}}).domain("com.microsoft").grad({0})
                  .hand([peer](const Tensors& in) { return Tensors{in[0] + peer.to(in[0].scalar_type())}; },
                        simulated, note));
  v.push_back(OpCase("AllGather", "TwoRanksAxis1", {randn({2, 3})})
                  .attrs({{"group_size", int64_t{2}}, {"axis", int64_t{1}}}).domain("com.microsoft").grad({0})
                  .hand([peer](const Tensors& in) {
                          // rank order along axis 1: [x | peer], each [2, 3]
                          at::Tensor y = at::empty({2, 6}, in[0].options());
                          y.narrow(1, 0, 3).copy_(in[0]);
                          y.narrow(1, 3, 3).copy_(peer.to(in[0].scalar_type()));
                          return Tensors{y};
                        },
                        simulated, note));
}

/// FakeQuantize's ONNX Runtime twin: QuantizeLinear -> DequantizeLinear on the same inputs (the
/// zero point given in the type QuantizeLinear should produce, so qmin/qmax is its range).
Graph qdq_twin(const OpCase& c) {
  Graph g;
  g.opset = 13;
  std::vector<std::string> in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    g.inputs.push_back({name, c.inputs[i].scalar_type(), Shape(c.inputs[i].sizes().begin(), c.inputs[i].sizes().end())});
    in.push_back(name);
  }
  Attrs attrs;
  if (c.attrs_.count("axis")) attrs["axis"] = c.attrs_.at("axis");
  g.add_node("QuantizeLinear", in, {"q"}, attrs);
  std::vector<std::string> dq_in = in;
  dq_in[0] = "q";
  g.add_node("DequantizeLinear", dq_in, {"y0"}, attrs);
  return g;
}

void add_quant_cases(std::vector<OpCase>& v) {
  // Scales that are powers of two and inputs on multiples of a quarter step give exact halves:
  // round half to even is tested, and float32 x / scale has no rounding of its own.
  const at::Tensor halves = at::arange(-40, 40, at::kFloat).reshape({2, 5, 8}) * 0.125f;
  v.push_back(OpCase("QuantizeLinear", "Uint8HalvesToEven", {halves, f32s(0.25f), at::scalar_tensor(128, at::kByte)}));
  v.push_back(OpCase("QuantizeLinear", "Int8Saturates", {randn({3, 4}, 100), f32s(0.5f), at::scalar_tensor(-3, at::kChar)}));
  v.push_back(OpCase("QuantizeLinear", "NoZeroPointUint8", {randn({3, 4}, 40), f32s(0.3f)}));
  v.push_back(OpCase("QuantizeLinear", "PerAxisInt8", {randn({2, 3, 4}, 4), uni({3}, 0.02, 0.1),
                                                       ints({3}, -5, 5, at::kChar)})
                  .attrs({{"axis", int64_t{1}}}));
  v.push_back(OpCase("QuantizeLinear", "BlockedOpset21", {randn({4, 6}, 4), uni({4, 3}, 0.02, 0.1),
                                                          ints({4, 3}, -5, 5, at::kChar)})
                  .attrs({{"axis", int64_t{1}}, {"block_size", int64_t{2}}}).opset(21));
  v.push_back(OpCase("DequantizeLinear", "Uint8PerTensor", {ints({3, 4}, 0, 256, at::kByte), f32s(0.05f),
                                                            at::scalar_tensor(100, at::kByte)}));
  v.push_back(OpCase("DequantizeLinear", "Int8PerAxis0", {ints({3, 4}, -128, 128, at::kChar), uni({3}, 0.01, 0.1),
                                                          ints({3}, -3, 3, at::kChar)})
                  .attrs({{"axis", int64_t{0}}}));
  v.push_back(OpCase("DequantizeLinear", "Int32NoZeroPoint", {ints({5}, -100000, 100000, at::kInt), f32s(0.001f)}));
  v.push_back(OpCase("DynamicQuantizeLinear", "Mixed", {randn({3, 4}, 3)}).outputs(3));
  v.push_back(OpCase("DynamicQuantizeLinear", "AllPositive", {uni({2, 5}, 0.5, 4)}).outputs(3));
  // 7-bit B: ONNX Runtime's AVX2 u8 x s8 kernel (vpmaddubsw) saturates a pair of products in
  // int16 when two large weights meet two large activations (ort_peer_lib.sh says more), so
  // against it B stays in [-64, 64); the full range is checked against the exact int64 product.
  v.push_back(OpCase("MatMulInteger", "Uint8Int8ZeroPoints", {ints({2, 3, 8}, 0, 256, at::kByte), ints({8, 5}, -64, 64, at::kChar),
                                                              at::scalar_tensor(128, at::kByte), ints({5}, -4, 4, at::kChar)}));
  v.push_back(OpCase("MatMulInteger", "Uint8Int8FullRangeExact", {ints({3, 16}, 0, 256, at::kByte), ints({16, 4}, -128, 128, at::kChar),
                                                                  at::scalar_tensor(3, at::kByte), ints({4}, -4, 4, at::kChar)})
                  .tol(0)
                  .hand([](const Tensors& in) {
                          const at::Tensor a = in[0].to(at::kLong) - in[2].to(at::kLong);
                          const at::Tensor b = in[1].to(at::kLong) - in[3].to(at::kLong);
                          return Tensors{at::matmul(a, b).to(at::kInt)};
                        },
                        nullptr, "hand: exact int64 product for full-range int8 B (ONNX Runtime's AVX2 u8 x s8 kernel saturates int16 pair sums)"));
  v.push_back(OpCase("MatMulInteger", "Uint8Uint8NoZeroPoints", {ints({4, 8}, 0, 256, at::kByte), ints({8, 3}, 0, 256, at::kByte)}));
  {
    // K = 32, N = 5, blocks of 16: B [5, 2, 8] codes, one scale per block, zero points packed two
    // per byte ([N * ceil(2 / 2)]), and a bias.
    OpCase c("MatMulNBits", "ZeroPointsBias", {randn({3, 32}), ints({5, 2, 8}, 0, 256, at::kByte), uni({10}, 0.01, 0.1),
                                               ints({5}, 0, 256, at::kByte), omitted(), randn({5})});
    v.push_back(c.attrs({{"K", int64_t{32}}, {"N", int64_t{5}}, {"bits", int64_t{4}}, {"block_size", int64_t{16}}})
                    .domain("com.microsoft").constant({1, 2, 3, 5}).tol(1e-5, 1e-4));
  }
  {
    // K = 40 is not a multiple of the block: the last block is padded.
    OpCase c("MatMulNBits", "KNotMultipleOfBlock", {randn({2, 40}), ints({4, 3, 8}, 0, 256, at::kByte), uni({12}, 0.01, 0.1)});
    v.push_back(c.attrs({{"K", int64_t{40}}, {"N", int64_t{4}}, {"bits", int64_t{4}}, {"block_size", int64_t{16}}})
                    .domain("com.microsoft").constant({1, 2}).tol(1e-5, 1e-4));
  }
  const std::string twin = "ort: QuantizeLinear -> DequantizeLinear (FakeQuantize is pare's own op)";
  v.push_back(OpCase("FakeQuantize", "Uint8PerTensor", {halves, f32s(0.25f), at::scalar_tensor(128, at::kByte)})
                  .attrs({{"qmin", int64_t{0}}, {"qmax", int64_t{255}}}).domain("pare").tol(0).ort_graph(qdq_twin, twin));
  v.push_back(OpCase("FakeQuantize", "Int8PerAxisSaturates", {randn({3, 4}, 4), uni({3}, 0.01, 0.05),
                                                             ints({3}, -5, 5, at::kChar)})
                  .attrs({{"qmin", int64_t{-128}}, {"qmax", int64_t{127}}, {"axis", int64_t{0}}})
                  .domain("pare").tol(0).ort_graph(qdq_twin, twin));
  v.push_back(OpCase("FakeQuantize", "NoZeroPointDefaults", {randn({2, 6}, 20), f32s(0.1f)})
                  .domain("pare").tol(0).ort_graph(qdq_twin, twin));
}

// The ops of core/ops_index.cpp.
void add_index_cases(std::vector<OpCase>& v) {
  auto r2 = [](at::Tensor t, int64_t a, int64_t b) { return t.reshape({a, b}); };
  v.push_back(OpCase("CumSum", "Axis1", {randn({3, 4}), i64s(1)}).grad({0}));
  v.push_back(OpCase("CumSum", "ExclusiveReverse", {randn({2, 5}), i64s(-1)})
                  .attrs({{"exclusive", int64_t{1}}, {"reverse", int64_t{1}}}).grad({0}));
  v.push_back(OpCase("CumSum", "Int32", {ints({4, 3}, -9, 9, at::kInt), i64s(0)}));
  v.push_back(OpCase("TopK", "Largest", {randn({3, 6}), i64({2})}).outputs(2).tol(0).grad({0}).grad_outputs(1));
  v.push_back(OpCase("TopK", "SmallestAxis0", {randn({5, 3}), i64({3})})
                  .attrs({{"axis", int64_t{0}}, {"largest", int64_t{0}}}).outputs(2).tol(0));
  v.push_back(OpCase("ScatterElements", "Axis1NegativeIndices",
                     {randn({3, 4}), r2(i64({0, 2, 1, 3, 0, -2}), 3, 2), randn({3, 2})})
                  .attrs({{"axis", int64_t{1}}}).tol(0).grad({0, 2}));
  v.push_back(OpCase("ScatterElements", "AddDuplicates", {randn({3, 3}), r2(i64({1, 1, 0, 2, 2, 2}), 2, 3), randn({2, 3})})
                  .attrs({{"reduction", std::string("add")}}).opset(16).tol(1e-6).grad({0, 2}));
  v.push_back(OpCase("Scatter", "Opset9", {randn({3, 3}), r2(i64({1, 0, 2, 0, 2, 1}), 2, 3), randn({2, 3})})
                  .opset(9).tol(0));
  v.push_back(OpCase("ScatterND", "Rows", {randn({4, 3}), r2(i64({2, 0}), 2, 1), randn({2, 3})}).tol(0).grad({0, 2}));
  v.push_back(OpCase("ScatterND", "MulPoints", {randn({3, 4}), r2(i64({0, 1, 2, 3, 0, 1}), 3, 2), randn({3})})
                  .attrs({{"reduction", std::string("mul")}}).opset(16).tol(1e-6));
  v.push_back(OpCase("GatherND", "Pairs", {randn({3, 4}), r2(i64({0, 1, 2, -1}), 2, 2)}).tol(0).grad({0}));
  v.push_back(OpCase("GatherND", "BatchDims1", {randn({2, 3, 4}), r2(i64({1, 2}), 2, 1)})
                  .attrs({{"batch_dims", int64_t{1}}}).tol(0).grad({0}));
  v.push_back(OpCase("OneHot", "Axis1NegativeIndex", {r2(i64({0, 2, -1, 1}), 2, 2), i64({3}), f32({-1.f, 2.f}, {2})})
                  .attrs({{"axis", int64_t{1}}}).tol(0));
  v.push_back(OpCase("NonZero", "Float", {f32({0.f, 1.f, 0.f, -2.f, 3.f, 0.f}, {2, 3})}));
  v.push_back(OpCase("Compress", "Axis1ShortCondition", {randn({2, 4}), i64({1, 0, 1}).ne(0)})
                  .attrs({{"axis", int64_t{1}}}).tol(0).grad({0}));
  v.push_back(OpCase("Compress", "Flattened", {randn({2, 3}), i64({0, 1, 1, 0, 1}).ne(0)}).tol(0));
  v.push_back(OpCase("EyeLike", "K1Int64", {randn({3, 4})}).attrs({{"k", int64_t{1}}, {"dtype", int64_t{7}}}));
  v.push_back(OpCase("EyeLike", "BelowDiagonal", {randn({4, 3})}).attrs({{"k", int64_t{-2}}}).tol(0));
  v.push_back(OpCase("ReverseSequence", "TimeMajor", {randn({4, 3, 2}), i64({4, 2, 1})}).tol(0).grad({0}));
  v.push_back(OpCase("ReverseSequence", "BatchMajor", {randn({3, 4}), i64({1, 4, 3})})
                  .attrs({{"batch_axis", int64_t{0}}, {"time_axis", int64_t{1}}}).tol(0));
  // MaxUnpool of MaxPool 2x2 stride 2 indices into [1, 1, 4, 4]: flattened positions, one per window.
  v.push_back(OpCase("MaxUnpool", "FromMaxPool", {randn({1, 1, 2, 2}), r2(i64({1, 6, 8, 15}), 2, 2).reshape({1, 1, 2, 2})})
                  .attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}).tol(0).grad({0}));
  v.push_back(OpCase("NonMaxSuppression", "TwoClassesThresholds",
                     {f32({0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f, 0, 10, 1, 11, 1, 1, 0, 0}, {1, 5, 4}),
                      f32({0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.1f, 0.8f, 0.3f, 0.7f, 0.2f}, {1, 2, 5}), i64({2}),
                      f32({0.5f}, {1}), f32({0.15f}, {1})}));
  v.push_back(OpCase("NonMaxSuppression", "CenterPointBox",
                     {f32({0.5f, 0.5f, 1, 1, 0.5f, 0.6f, 1, 1, 0.5f, 10.5f, 1, 1}, {1, 3, 4}),
                      f32({0.9f, 0.75f, 0.6f}, {1, 1, 3}), i64({3}), f32({0.5f}, {1})})
                  .attrs({{"center_point_box", int64_t{1}}}));
  v.push_back(OpCase("Unique", "SortedFlat", {ints({2, 5}, 0, 4)}).outputs(4).tol(0));
  v.push_back(OpCase("Unique", "UnsortedAxis0", {at::cat({ints({2, 3}, 0, 2), ints({2, 3}, 0, 2)}, 0)})
                  .attrs({{"axis", int64_t{0}}, {"sorted", int64_t{0}}}).outputs(4).tol(0));
  for (const char* w : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    v.push_back(OpCase(w, "Periodic", {i64s(10)}).tol(1e-6));
    v.push_back(OpCase(w, "SymmetricDouble", {i64s(7)}).attrs({{"periodic", int64_t{0}}, {"output_datatype", int64_t{11}}})
                    .tol(1e-7));  // ONNX Runtime computes double windows in float
  }
  v.push_back(OpCase("DepthToSpace", "DCR", {randn({1, 8, 2, 3})}).attrs({{"blocksize", int64_t{2}}}).tol(0).grad({0}));
  v.push_back(OpCase("DepthToSpace", "CRD", {randn({2, 8, 2, 2})})
                  .attrs({{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}}).tol(0));
  v.push_back(OpCase("SpaceToDepth", "Block2", {randn({1, 2, 4, 6})}).attrs({{"blocksize", int64_t{2}}}).tol(0).grad({0}));
}

// Resize and Upsample (core/ops_resize.cpp), and the nn ops added with them.
void add_resize_cases(std::vector<OpCase>& v) {
  auto str = [](const char* s) { return std::string(s); };
  v.push_back(OpCase("Resize", "NearestScales2x", {randn({1, 2, 3, 4}), omitted(), f32({1, 1, 2, 2}, {4})}).tol(0).grad({0}));
  v.push_back(OpCase("Resize", "LinearHalfPixelSizesDown", {randn({1, 2, 4, 6}), omitted(), omitted(), i64({1, 2, 3, 4})})
                  .attrs({{"mode", str("linear")}}).grad({0}));
  v.push_back(OpCase("Resize", "LinearPytorchHalfPixel", {randn({2, 1, 3, 4}), omitted(), omitted(), i64({2, 1, 5, 7})})
                  .attrs({{"mode", str("linear")}, {"coordinate_transformation_mode", str("pytorch_half_pixel")}}).grad({0}));
  v.push_back(OpCase("Resize", "LinearAlignCornersUp", {randn({1, 1, 3, 4}), omitted(), f32({1, 1, 2, 1.5f}, {4})})
                  .attrs({{"mode", str("linear")}, {"coordinate_transformation_mode", str("align_corners")}}).grad({0}));
  v.push_back(OpCase("Resize", "CubicAsymmetric", {randn({1, 2, 4, 4}), omitted(), f32({1, 1, 1.5f, 0.75f}, {4})})
                  .attrs({{"mode", str("cubic")}, {"coordinate_transformation_mode", str("asymmetric")}}).grad({0}));
  v.push_back(OpCase("Resize", "CubicExcludeOutside", {randn({1, 1, 4, 5}), omitted(), omitted(), i64({1, 1, 7, 3})})
                  .attrs({{"mode", str("cubic")}, {"cubic_coeff_a", -0.5f}, {"exclude_outside", int64_t{1}}}).grad({0}));
  v.push_back(OpCase("Resize", "NearestFloorAsymmetricSizes", {randn({1, 2, 3, 5}), omitted(), omitted(), i64({1, 2, 7, 3})})
                  .attrs({{"nearest_mode", str("floor")}, {"coordinate_transformation_mode", str("asymmetric")}}).tol(0));
  v.push_back(OpCase("Resize", "NearestCeilHalfPixel", {randn({1, 1, 4, 4}), omitted(), omitted(), i64({1, 1, 6, 3})})
                  .attrs({{"nearest_mode", str("ceil")}}).tol(0));
  v.push_back(OpCase("Resize", "TfCropAndResizeExtrapolate",
                     {randn({1, 1, 4, 5}), f32({0, 0, 0.2f, -0.1f, 1, 1, 0.9f, 1.2f}, {8}), omitted(), i64({1, 1, 3, 4})})
                  .attrs({{"mode", str("linear")}, {"coordinate_transformation_mode", str("tf_crop_and_resize")},
                          {"extrapolation_value", 2.5f}}).grad({0}));
  v.push_back(OpCase("Resize", "NearestUint8", {ints({1, 1, 2, 3}, 0, 256, at::kByte), omitted(), f32({1, 1, 2, 2}, {4})}));
  v.push_back(OpCase("Resize", "Opset10Scales", {randn({1, 2, 2, 3}), f32({1, 1, 2, 3}, {4})}).opset(10).tol(0));
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* pad : {"zeros", "border", "reflection"})
      v.push_back(OpCase("GridSample", std::string(mode) + "_" + pad, {randn({1, 2, 4, 5}), uni({1, 3, 2, 2}, -1.2, 1.2)})
                      .attrs({{"mode", str(mode)}, {"padding_mode", str(pad)}, {"align_corners", int64_t{std::string(pad) == "border"}}})
                      .opset(16).tol(1e-5));
  v.push_back(OpCase("Upsample", "NearestOpset9", {randn({1, 2, 2, 3}), f32({1, 1, 3, 2}, {4})}).opset(9).tol(0));

  v.push_back(OpCase("InstanceNormalization", "Rank4", {randn({2, 3, 4, 5}), uni({3}, 0.5, 1.5), randn({3})})
                  .grad({0, 1, 2}));
  v.push_back(OpCase("MeanVarianceNormalization", "DefaultAxes", {randn({2, 3, 4, 5}, 2)}).grad({0}));
  v.push_back(OpCase("LRN", "Size3", {randn({2, 5, 3, 3})})
                  .attrs({{"size", int64_t{3}}, {"alpha", 0.02f}, {"beta", 0.6f}, {"bias", 1.5f}}).grad({0}));
  v.push_back(OpCase("LRN", "Size5Default", {randn({1, 6, 2, 2})}).attrs({{"size", int64_t{5}}}));
  v.push_back(OpCase("Einsum", "BatchMatMul", {randn({2, 3, 4}), randn({2, 4, 5})})
                  .attrs({{"equation", str("bij,bjk->bik")}}).grad({0, 1}));
  v.push_back(OpCase("Einsum", "EllipsisDiagonal", {randn({2, 3, 3})}).attrs({{"equation", str("...ii ->...i")}}).tol(0));
  v.push_back(OpCase("Einsum", "ImplicitTranspose", {randn({3, 4})}).attrs({{"equation", str("ji")}}).tol(0));
  v.push_back(OpCase("Det", "Batch", {randn({2, 3, 3})}).grad({0}));
  v.push_back(OpCase("ReduceLogSum", "Axis1", {uni({2, 3, 4}, 0.5, 1.5)}).attrs({{"axes", Ints{1}}}).grad({0}));
  v.push_back(OpCase("ReduceLogSum", "AllAxesNoKeepdims", {uni({2, 3}, 0.5, 1.5)})
                  .attrs({{"keepdims", int64_t{0}}}).grad({0}));
}

// LSTM, GRU and RNN (core/ops_rnn.cpp): X [seq 3, batch 2, in 4], hidden 3. (ONNX Runtime runs
// only layout 0; the batch-major layout is checked by the ONNX node tests.)
void add_rnn_cases(std::vector<OpCase>& v) {
  using Strings = std::vector<std::string>;
  auto x = [] { return randn({3, 2, 4}); };
  auto lens = at::tensor(at::ArrayRef<int32_t>({3, 1}), at::kInt);
  v.push_back(OpCase("LSTM", "BiasInitialStates",
                     {x(), randn({1, 12, 4}, 0.5), randn({1, 12, 3}, 0.5), randn({1, 24}, 0.5), omitted(),
                      randn({1, 2, 3}), randn({1, 2, 3})})
                  .attrs({{"hidden_size", int64_t{3}}}).outputs(3).grad({0, 1, 2, 3, 5, 6}));
  v.push_back(OpCase("LSTM", "BidirectionalPeepholesSeqLens",
                     {x(), randn({2, 12, 4}, 0.5), randn({2, 12, 3}, 0.5), randn({2, 24}, 0.5), lens, omitted(),
                      omitted(), randn({2, 9}, 0.5)})
                  .attrs({{"direction", std::string("bidirectional")}, {"hidden_size", int64_t{3}}})
                  .outputs(3).grad({0, 1, 2, 7}));
  v.push_back(OpCase("LSTM", "ClipReverse", {x(), randn({1, 12, 4}), randn({1, 12, 3})})
                  .attrs({{"clip", 0.7f}, {"direction", std::string("reverse")}, {"hidden_size", int64_t{3}}}).outputs(2));
  v.push_back(OpCase("GRU", "LinearBeforeResetBias",
                     {x(), randn({1, 9, 4}, 0.5), randn({1, 9, 3}, 0.5), randn({1, 18}, 0.5), omitted(), randn({1, 2, 3})})
                  .attrs({{"linear_before_reset", int64_t{1}}, {"hidden_size", int64_t{3}}}).outputs(2).grad({0, 1, 2, 3, 5}));
  v.push_back(OpCase("GRU", "ReverseBias", {x(), randn({1, 9, 4}, 0.5), randn({1, 9, 3}, 0.5), randn({1, 18}, 0.5)})
                  .attrs({{"direction", std::string("reverse")}, {"hidden_size", int64_t{3}}}).outputs(2).grad({0, 1, 2, 3}));
  v.push_back(OpCase("RNN", "TanhBiasSeqLens", {x(), randn({1, 3, 4}, 0.5), randn({1, 3, 3}, 0.5), randn({1, 6}, 0.5), lens})
                  .attrs({{"hidden_size", int64_t{3}}}).outputs(2).grad({0, 1, 2, 3}));
  v.push_back(OpCase("RNN", "BidirectionalLeakyRelu", {x(), randn({2, 3, 4}), randn({2, 3, 3})})
                  .attrs({{"direction", std::string("bidirectional")}, {"hidden_size", int64_t{3}},
                          {"activations", Strings{"LeakyRelu", "LeakyRelu"}},
                          {"activation_alpha", std::vector<float>{0.1f, 0.2f}}})
                  .outputs(2));
}

// The elementwise ops added with them.
void add_more_elementwise_cases(std::vector<OpCase>& v) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor special = f32({1.f, -inf, nan, inf, 0.f, -2.f}, {2, 3});
  v.push_back(OpCase("CastLike", "FloatToInt64", {randn({3, 4}, 5), ints({1}, 0, 2, at::kLong)}));
  v.push_back(OpCase("CastLike", "Int32ToDouble", {ints({2, 3}, -9, 9, at::kInt), randn({2}).to(at::kDouble)}));
  v.push_back(OpCase("IsNaN", "Specials", {special}));
  v.push_back(OpCase("IsInf", "Both", {special}));
  v.push_back(OpCase("IsInf", "PositiveOnly", {special}).attrs({{"detect_negative", int64_t{0}}}));
  v.push_back(OpCase("Hardmax", "Axis1", {randn({2, 3, 4})}).attrs({{"axis", int64_t{1}}}).tol(0));
  v.push_back(OpCase("Hardmax", "DefaultLastAxisTies", {f32({1, 3, 3, 0, 2, 2}, {2, 3})}).tol(0));
  v.push_back(OpCase("Softsign", "Float", {randn({2, 3, 4}, 4)}).tol(1e-6).grad({0}));
  v.push_back(OpCase("BitShift", "LeftUint8", {ints({2, 4}, 0, 256, at::kByte), ints({4}, 0, 8, at::kByte)})
                  .attrs({{"direction", std::string("LEFT")}}));
  v.push_back(OpCase("BitShift", "RightUint8", {ints({3}, 0, 256, at::kByte), ints({3}, 0, 8, at::kByte)})
                  .attrs({{"direction", std::string("RIGHT")}}));
  v.push_back(OpCase("MaxPool", "Uint8", {ints({1, 2, 5, 5}, 0, 256, at::kByte)})
                  .attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
  v.push_back(OpCase("PRelu", "PerChannelSlope", {randn({2, 3, 4, 5}), uni({3, 1, 1}, 0.1, 0.5)}).grad({0, 1}));
}

// RMSNormalization, RotaryEmbedding and Attention (core/ops_transformer.cpp), opset 23.
void add_transformer_cases(std::vector<OpCase>& v) {
  v.push_back(OpCase("RMSNormalization", "LastAxis", {randn({2, 3, 8}), uni({8}, 0.5, 1.5)}).opset(23).grad({0, 1}));
  v.push_back(OpCase("RMSNormalization", "Axis1Epsilon", {randn({2, 3, 4}), uni({3, 4}, 0.5, 1.5)})
                  .attrs({{"axis", int64_t{1}}, {"epsilon", 1e-3f}}).opset(23).grad({0, 1}));
  // Caches of 8 positions; position_ids pick rows.
  v.push_back(OpCase("RotaryEmbedding", "HalvesPositionIds",
                     {randn({1, 2, 3, 4}), randn({8, 2}), randn({8, 2}), ints({1, 3}, 0, 8, at::kLong)})
                  .opset(23).grad({0, 1, 2}));
  v.push_back(OpCase("RotaryEmbedding", "Interleaved3DPartial",
                     {randn({2, 3, 16}), randn({6, 2}), randn({6, 2}), ints({2, 3}, 0, 6, at::kLong)})
                  .attrs({{"interleaved", int64_t{1}}, {"num_heads", int64_t{2}}, {"rotary_embedding_dim", int64_t{4}}})
                  .opset(23).grad({0}));
  // 4 query heads over 2 KV heads, 2 new tokens on a cache of 3, causal.
  v.push_back(OpCase("Attention", "GqaCausalCache",
                     {randn({1, 4, 2, 4}), randn({1, 2, 2, 4}), randn({1, 2, 2, 4}), omitted(), randn({1, 2, 3, 4}),
                      randn({1, 2, 3, 4})})
                  .attrs({{"is_causal", int64_t{1}}}).outputs(3).opset(23).grad({0, 1, 2, 4, 5}));
  v.push_back(OpCase("Attention", "3DAdditiveMaskScaled", {randn({2, 3, 8}), randn({2, 5, 8}), randn({2, 5, 4}), randn({3, 5})})
                  .attrs({{"q_num_heads", int64_t{2}}, {"kv_num_heads", int64_t{2}}, {"scale", 0.3f}}).opset(23).grad({0, 1, 2, 3}));
  v.push_back(OpCase("Attention", "SoftcapScores", {randn({1, 2, 3, 4}, 2), randn({1, 2, 3, 4}, 2), randn({1, 2, 3, 4})})
                  .attrs({{"softcap", 2.0f}, {"qk_matmul_output_mode", int64_t{2}}}).outputs(4).opset(23).grad({0, 1, 2})
                  .tol(1e-5, 1e-4));
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::kElementwise: return "elementwise";
    case Family::kNn: return "nn";
    case Family::kTensor: return "tensor";
    case Family::kQuant: return "quant";
  }
  return "?";
}

std::vector<OpCase> all_cases() {
  // One seed for the table: the same inputs on every call and every run.
  {
    std::lock_guard<std::mutex> lock(gen().mutex());
    gen().set_current_seed(20261201);
  }
  std::vector<OpCase> all;
  auto section = [&all](Family f, void (*add)(std::vector<OpCase>&)) {
    std::vector<OpCase> v;
    add(v);
    for (auto& c : v) {
      c.family = f;
      all.push_back(std::move(c));
    }
  };
  section(Family::kElementwise, add_elementwise_cases);
  section(Family::kNn, add_nn_cases);
  section(Family::kTensor, add_tensor_cases);
  section(Family::kQuant, add_quant_cases);
  // Sections added later come last, so that the cases above keep their inputs.
  section(Family::kTensor, add_index_cases);
  section(Family::kNn, add_resize_cases);
  section(Family::kElementwise, add_more_elementwise_cases);
  section(Family::kNn, add_rnn_cases);
  section(Family::kNn, add_transformer_cases);
  return all;
}

Node node_of(const OpCase& c) {
  Node n;
  n.op_type = c.op;
  n.name = c.name();
  n.domain = c.domain_;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    n.inputs.push_back(c.inputs[i].defined() ? "x" + std::to_string(i) : "");
  for (int i = 0; i < c.outputs_; ++i) n.outputs.push_back("y" + std::to_string(i));
  n.attrs = c.attrs_;
  return n;
}

}  // namespace pare::core::op_harness
