// Core ops, elementwise family: arithmetic and comparison with numpy broadcasting, activations,
// Cast/Identity/Where, and the row-wise Softmax/LogSoftmax (opset 13 semantics: one `axis`).
#include <limits>

#include "core/dtype.h"
#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::flops_per_output;
using ops::has_input;
using ops::spec_float;
using ops::spec_int;
using Tensors = std::vector<at::Tensor>;

using Unary = std::function<at::Tensor(const Node&, const at::Tensor&)>;
using Binary = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

void add_unary(OpRegistry& reg, const std::string& name, Unary fn, std::string doc,
               std::vector<AttrSpec> attrs = {}, int64_t flops = 1) {
  OpDef d = ops::op_def(name, 1, 1, std::move(doc));
  d.traits.elementwise = OpTraits::Elementwise::kUnary;
  d.attrs = std::move(attrs);
  d.forward = [fn](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    return {fn(n, in.at(0))};
  };
  d.flops = flops_per_output(flops);
  reg.add(std::move(d));
}

void add_binary(OpRegistry& reg, const std::string& name, Binary fn, std::string doc,
                std::vector<int> weight_inputs = {}, int64_t flops = 1) {
  OpDef d = ops::op_def(name, 2, 2, std::move(doc));
  d.traits.elementwise = OpTraits::Elementwise::kBroadcast;
  d.forward = [fn](const Node&, const Tensors& in, const RunContext&) -> Tensors {
    return {fn(in.at(0), in.at(1))};
  };
  d.flops = flops_per_output(flops);
  for (int i : weight_inputs) d.weights.push_back(WeightInput::fixed(i, WeightRole::kOperand));
  reg.add(std::move(d));
}

// Variadic Max/Min/Sum/Mean: a fold with numpy broadcasting.
void add_variadic(OpRegistry& reg, const std::string& name, Binary fold, bool mean, std::string doc) {
  OpDef d = ops::op_def(name, 1, -1, std::move(doc));
  d.traits.elementwise = OpTraits::Elementwise::kBroadcast;
  d.forward = [fold, mean](const Node&, const Tensors& in, const RunContext&) -> Tensors {
    at::Tensor acc = in.at(0);
    for (size_t i = 1; i < in.size(); ++i) acc = fold(acc, in[i]);
    if (mean && in.size() > 1) acc = acc / static_cast<double>(in.size());
    return {acc};
  };
  d.flops = [](const Node&, const std::vector<std::vector<int64_t>>& in,
               const std::vector<std::vector<int64_t>>& out) -> int64_t {
    return out.empty() || in.size() < 2 ? 0 : static_cast<int64_t>(in.size() - 1) * ops::numel(out[0]);
  };
  reg.add(std::move(d));
}

// ONNX ops keep the element type of their first input where PyTorch would promote.
at::Tensor keep_type(const at::Tensor& y, const at::Tensor& like) {
  return y.scalar_type() == like.scalar_type() ? y : y.to(like.scalar_type());
}

at::Tensor as_bool(const at::Tensor& t) { return t.scalar_type() == at::kBool ? t : t.ne(0); }

void add_softmax(OpRegistry& reg, const std::string& name, bool log) {
  OpDef d = ops::op_def(name, 1, 1,
                        log ? "log of softmax along `axis` (opset 13: default -1)"
                            : "exp(x) / sum(exp(x)) along `axis` (opset 13: default -1)");
  d.attrs = {spec_int("axis")};
  d.forward = [log](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    if (x.dim() == 0) return {log ? at::zeros_like(x) : at::ones_like(x)};
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", -1), x.dim(), n);
    return {log ? at::log_softmax(x, axis) : at::softmax(x, axis)};
  };
  // exp, sum and divide (or subtract for the log form) per element.
  d.flops = flops_per_output(3);
  reg.add(std::move(d));
}

OpDef mod_op() {
  OpDef d = ops::op_def("Mod", 2, 2,
                        "a mod b: sign of the divisor, or C fmod (sign of the dividend) when fmod=1");
  d.traits.elementwise = OpTraits::Elementwise::kBroadcast;
  d.attrs = {spec_int("fmod")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    if (n.attr_int("fmod", 0) != 0) return {at::fmod(in.at(0), in.at(1))};
    return {at::remainder(in.at(0), in.at(1))};
  };
  d.flops = flops_per_output(1);
  return d;
}

// Cast: `to` is an ONNX TensorProto.DataType number.
OpDef cast_op() {
  OpDef d = ops::op_def("Cast", 1, 1, "converts to the element type `to` (ONNX data type number)");
  d.traits.elementwise = OpTraits::Elementwise::kUnary;
  d.attrs = {{"to", AttrKind::kInt, true}, spec_int("saturate")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const int64_t to = n.attr_int("to", -1);
    auto type = scalar_type_from_onnx(static_cast<int>(to));
    PARE_CHECK(type.has_value(), n.describe(), ": Cast 'to' must be an ONNX data type pare "
               "handles (float, double, float16, bfloat16, int8/16/32/64, uint8, bool), got ", to);
    const at::Tensor& x = in.at(0);
    return {x.scalar_type() == *type ? x : x.to(*type)};
  };
  d.flops = flops_per_output(0);
  return d;
}

// CastLike: Cast to the element type of input 1.
OpDef cast_like_op() {
  OpDef d = ops::op_def("CastLike", 2, 2, "converts input 0 to the element type of input 1");
  d.attrs = {spec_int("saturate")};
  d.forward = [](const Node&, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const at::ScalarType type = in.at(1).scalar_type();
    return {x.scalar_type() == type ? x : x.to(type)};
  };
  d.flops = flops_per_output(0);
  d.traits.opaque_channels = true;
  return d;
}

// IsNaN and IsInf: bool masks (no traits: a bool output ends what channel pruning follows).
OpDef is_nan_op() {
  OpDef d = ops::op_def("IsNaN", 1, 1, "true where x is NaN");
  d.forward = [](const Node&, const Tensors& in, const RunContext&) -> Tensors { return {at::isnan(in.at(0))}; };
  d.flops = flops_per_output(1);
  d.traits.opaque_channels = true;
  return d;
}

OpDef is_inf_op() {
  OpDef d = ops::op_def("IsInf", 1, 1,
                        "true where x is +inf (detect_positive, default 1) or -inf (detect_negative, default 1)");
  d.attrs = {spec_int("detect_negative"), spec_int("detect_positive")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const bool neg = n.attr_int("detect_negative", 1) != 0, pos = n.attr_int("detect_positive", 1) != 0;
    if (neg && pos) return {at::isinf(x)};
    if (pos) return {at::isposinf(x)};
    if (neg) return {at::isneginf(x)};
    return {at::zeros(x.sizes(), x.options().dtype(at::kBool))};
  };
  d.flops = flops_per_output(1);
  d.traits.opaque_channels = true;
  return d;
}

// Hardmax: 1 at the first maximum along `axis` (opset 13: default -1), 0 elsewhere.
OpDef hardmax_op() {
  OpDef d = ops::op_def("Hardmax", 1, 1, "1 at the first maximum along `axis` (opset 13: default -1), 0 elsewhere");
  d.attrs = {spec_int("axis")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    if (x.dim() == 0) return {at::ones_like(x)};
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", -1), x.dim(), n);
    at::Tensor arg = at::argmax(x, axis, /*keepdim=*/true);  // the first maximum on ties
    return {at::zeros_like(x).scatter(axis, arg, 1)};
  };
  d.flops = flops_per_output(1);
  d.traits.opaque_channels = true;
  return d;
}

// BitShift: a << b or a >> b on unsigned integers (direction LEFT or RIGHT).
OpDef bit_shift_op() {
  OpDef d = ops::op_def("BitShift", 2, 2, "x << y (direction LEFT) or x >> y (RIGHT), unsigned integers, numpy broadcasting");
  d.attrs = {{"direction", AttrKind::kString, true}};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const std::string dir = n.attr_string("direction", "");
    PARE_CHECK(dir == "LEFT" || dir == "RIGHT", n.describe(), ": direction must be LEFT or RIGHT, got '", dir, "'");
    PARE_CHECK(in.at(0).scalar_type() == at::kByte && in.at(1).scalar_type() == at::kByte, n.describe(),
               ": BitShift needs unsigned integers (pare has uint8), got ", in[0].scalar_type(), " and ",
               in[1].scalar_type());
    // Shifts of 8 or more give 0, as for a C++ uint8_t promoted to int and truncated back.
    at::Tensor y = dir == "LEFT" ? at::bitwise_left_shift(in[0].to(at::kInt), in[1].to(at::kInt))
                                 : at::bitwise_right_shift(in[0].to(at::kInt), in[1].to(at::kInt));
    return {at::bitwise_and(y, 255).to(at::kByte)};
  };
  d.flops = flops_per_output(1);
  d.traits.opaque_channels = true;
  return d;
}

// Clip: min and max are optional inputs since opset 11; attributes in older models.
OpDef clip_op() {
  OpDef d = ops::op_def("Clip", 1, 3, "clamps x to [min, max] (optional inputs; attributes before opset 11)");
  d.traits.elementwise = OpTraits::Elementwise::kUnary;
  d.attrs = {spec_float("max"), spec_float("min")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    c10::optional<at::Scalar> lo, hi;
    if (has_input(in, 1)) lo = in[1].item();
    else if (n.has_attr("min")) lo = static_cast<double>(n.attr_float("min", 0.0f));
    if (has_input(in, 2)) hi = in[2].item();
    else if (n.has_attr("max")) hi = static_cast<double>(n.attr_float("max", 0.0f));
    if (!lo && !hi) return {x};
    return {at::clamp(x, lo, hi)};
  };
  d.flops = flops_per_output(1);
  return d;
}

// Where: condition ? x : y with three-way broadcasting.
OpDef where_op() {
  OpDef d = ops::op_def("Where", 3, 3, "condition ? x : y elementwise (numpy broadcasting)");
  d.traits.elementwise = OpTraits::Elementwise::kBroadcast;
  d.forward = [](const Node&, const Tensors& in, const RunContext&) -> Tensors {
    return {at::where(as_bool(in.at(0)), in.at(1), in.at(2))};
  };
  d.flops = flops_per_output(1);
  return d;
}

// Binary arithmetic, numpy broadcasting. The weight inputs cover constants such as a learned scale
// or bias that exporters write as Add/Mul with an initializer.
void register_arithmetic_ops(OpRegistry& reg) {
  add_binary(reg, "Add", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); },
             "a + b (numpy broadcasting)", {0, 1});
  add_binary(reg, "Sub", [](const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); },
             "a - b (numpy broadcasting)", {0, 1});
  add_binary(reg, "Mul", [](const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); },
             "a * b (numpy broadcasting)", {0, 1});
  add_binary(reg, "Div",
             [](const at::Tensor& a, const at::Tensor& b) {
               // ONNX integer division truncates toward zero (C semantics), unlike Python's floor.
               if (!a.is_floating_point() && !b.is_floating_point() && !a.is_complex())
                 return at::div(a, b, "trunc");
               return at::div(a, b);
             },
             "a / b (numpy broadcasting; integer division truncates toward zero)", {0, 1});
  add_binary(reg, "Pow",
             [](const at::Tensor& a, const at::Tensor& b) { return keep_type(at::pow(a, b), a); },
             "a ** b (numpy broadcasting; result has the type of a)");
  reg.add(mod_op());
  // PRelu's slope is a learned weight, broadcast to x (per channel: [C, 1, 1]).
  add_binary(reg, "PRelu",
             [](const at::Tensor& x, const at::Tensor& slope) { return at::where(x.lt(0), x * slope, x); },
             "x if x >= 0 else slope * x (slope broadcast to x)", {1});
}

// Comparisons and logic: bool outputs.
void register_comparison_ops(OpRegistry& reg) {
  add_binary(reg, "Equal", [](const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); },
             "a == b elementwise (bool)");
  add_binary(reg, "Less", [](const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); },
             "a < b elementwise (bool)");
  add_binary(reg, "LessOrEqual",
             [](const at::Tensor& a, const at::Tensor& b) { return at::le(a, b); },
             "a <= b elementwise (bool)");
  add_binary(reg, "Greater", [](const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); },
             "a > b elementwise (bool)");
  add_binary(reg, "GreaterOrEqual",
             [](const at::Tensor& a, const at::Tensor& b) { return at::ge(a, b); },
             "a >= b elementwise (bool)");
  add_binary(reg, "And",
             [](const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); },
             "logical a and b (bool)");
  add_binary(reg, "Or",
             [](const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); },
             "logical a or b (bool)");
  add_binary(reg, "Xor",
             [](const at::Tensor& a, const at::Tensor& b) { return at::logical_xor(a, b); },
             "logical a xor b (bool)");
}

void register_variadic_ops(OpRegistry& reg) {
  add_variadic(reg, "Sum", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); },
               false, "elementwise sum of all inputs (numpy broadcasting)");
  add_variadic(reg, "Mean", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); },
               true, "elementwise mean of all inputs (numpy broadcasting)");
  add_variadic(reg, "Max",
               [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }, false,
               "elementwise maximum of all inputs (numpy broadcasting)");
  add_variadic(reg, "Min",
               [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); }, false,
               "elementwise minimum of all inputs (numpy broadcasting)");
}

// Unary math and activations.
void register_unary_ops(OpRegistry& reg) {
  add_unary(reg, "Identity", [](const Node&, const at::Tensor& x) { return x; }, "y = x", {}, 0);
  add_unary(reg, "Neg", [](const Node&, const at::Tensor& x) { return at::neg(x); }, "-x");
  add_unary(reg, "Abs", [](const Node&, const at::Tensor& x) { return at::abs(x); }, "|x|");
  add_unary(reg, "Sqrt", [](const Node&, const at::Tensor& x) { return at::sqrt(x); }, "sqrt(x)");
  add_unary(reg, "Exp", [](const Node&, const at::Tensor& x) { return at::exp(x); }, "e ** x");
  add_unary(reg, "Log", [](const Node&, const at::Tensor& x) { return at::log(x); }, "ln(x)");
  add_unary(reg, "Reciprocal", [](const Node&, const at::Tensor& x) { return at::reciprocal(x); },
            "1 / x");
  add_unary(reg, "Floor", [](const Node&, const at::Tensor& x) { return at::floor(x); },
            "floor(x)");
  add_unary(reg, "Ceil", [](const Node&, const at::Tensor& x) { return at::ceil(x); }, "ceil(x)");
  add_unary(reg, "Round", [](const Node&, const at::Tensor& x) { return at::round(x); },
            "round half to even");
  add_unary(reg, "Sign", [](const Node&, const at::Tensor& x) { return at::sign(x); },
            "-1, 0 or 1 by the sign of x");
  add_unary(reg, "Sin", [](const Node&, const at::Tensor& x) { return at::sin(x); }, "sin(x)");
  add_unary(reg, "Cos", [](const Node&, const at::Tensor& x) { return at::cos(x); }, "cos(x)");
  add_unary(reg, "Erf", [](const Node&, const at::Tensor& x) { return at::erf(x); },
            "Gauss error function (GELU is exported as Erf arithmetic before opset 20)");
  add_unary(reg, "Tanh", [](const Node&, const at::Tensor& x) { return at::tanh(x); }, "tanh(x)");
  add_unary(reg, "Sigmoid", [](const Node&, const at::Tensor& x) { return at::sigmoid(x); },
            "1 / (1 + e ** -x)");
  add_unary(reg, "Relu", [](const Node&, const at::Tensor& x) { return at::relu(x); },
            "max(x, 0)");
  add_unary(reg, "Not", [](const Node&, const at::Tensor& x) { return at::logical_not(x); },
            "logical not (bool)");
  add_unary(
      reg, "LeakyRelu",
      [](const Node& n, const at::Tensor& x) {
        return at::leaky_relu(x, static_cast<double>(n.attr_float("alpha", 0.01f)));
      },
      "x if x >= 0 else alpha * x (alpha default 0.01)", {spec_float("alpha")});
  add_unary(
      reg, "Elu",
      [](const Node& n, const at::Tensor& x) {
        return at::elu(x, static_cast<double>(n.attr_float("alpha", 1.0f)));
      },
      "x if x >= 0 else alpha * (e ** x - 1)", {spec_float("alpha")});
  add_unary(
      reg, "HardSigmoid",
      [](const Node& n, const at::Tensor& x) {
        const double alpha = n.attr_float("alpha", 0.2f), beta = n.attr_float("beta", 0.5f);
        return at::clamp(x * alpha + beta, 0.0, 1.0);
      },
      "max(0, min(1, alpha * x + beta)) (alpha 0.2, beta 0.5)",
      {spec_float("alpha"), spec_float("beta")});
  add_unary(reg, "HardSwish", [](const Node&, const at::Tensor& x) { return at::hardswish(x); },
            "x * max(0, min(1, x / 6 + 0.5))");
  add_unary(reg, "Softplus", [](const Node&, const at::Tensor& x) { return at::softplus(x); },
            "ln(1 + e ** x)");
  add_unary(reg, "Softsign", [](const Node&, const at::Tensor& x) { return x / (at::abs(x) + 1); },
            "x / (1 + |x|)", {}, 3);
  reg.add(cast_op());
  reg.add(cast_like_op());
  reg.add(clip_op());
  reg.add(is_nan_op());
  reg.add(is_inf_op());
  reg.add(hardmax_op());
  reg.add(bit_shift_op());
}

// Trigonometric and hyperbolic functions, and the activations of ONNX that need their parameters.
void register_math_ops(OpRegistry& reg) {
  add_unary(reg, "Tan", [](const Node&, const at::Tensor& x) { return at::tan(x); }, "tan(x)");
  add_unary(reg, "Asin", [](const Node&, const at::Tensor& x) { return at::asin(x); }, "asin(x)");
  add_unary(reg, "Acos", [](const Node&, const at::Tensor& x) { return at::acos(x); }, "acos(x)");
  add_unary(reg, "Atan", [](const Node&, const at::Tensor& x) { return at::atan(x); }, "atan(x)");
  add_unary(reg, "Sinh", [](const Node&, const at::Tensor& x) { return at::sinh(x); }, "sinh(x)");
  add_unary(reg, "Cosh", [](const Node&, const at::Tensor& x) { return at::cosh(x); }, "cosh(x)");
  add_unary(reg, "Asinh", [](const Node&, const at::Tensor& x) { return at::asinh(x); }, "asinh(x)");
  add_unary(reg, "Acosh", [](const Node&, const at::Tensor& x) { return at::acosh(x); }, "acosh(x)");
  add_unary(reg, "Atanh", [](const Node&, const at::Tensor& x) { return at::atanh(x); }, "atanh(x)");
  add_unary(
      reg, "Selu",
      [](const Node& n, const at::Tensor& x) {
        const double alpha = n.attr_float("alpha", 1.67326319217681884765625f);
        const double gamma = n.attr_float("gamma", 1.05070102214813232421875f);
        return gamma * at::where(x.gt(0), x, alpha * (at::exp(x) - 1));
      },
      "gamma * (x if x > 0 else alpha * (e ** x - 1)) (alpha 1.6733, gamma 1.0507)",
      {spec_float("alpha"), spec_float("gamma")});
  add_unary(
      reg, "Celu",
      [](const Node& n, const at::Tensor& x) { return at::celu(x, static_cast<double>(n.attr_float("alpha", 1.0f))); },
      "max(0, x) + min(0, alpha * (e ** (x / alpha) - 1)) (alpha 1)", {spec_float("alpha")});
  add_unary(
      reg, "ThresholdedRelu",
      [](const Node& n, const at::Tensor& x) {
        return at::where(x.gt(static_cast<double>(n.attr_float("alpha", 1.0f))), x, at::zeros_like(x));
      },
      "x if x > alpha else 0 (alpha 1)", {spec_float("alpha")});
  add_unary(
      reg, "Shrink",
      [](const Node& n, const at::Tensor& x) {
        const double lambd = n.attr_float("lambd", 0.5f), bias = n.attr_float("bias", 0.0f);
        at::Tensor y = at::where(x.lt(-lambd), x + bias, at::where(x.gt(lambd), x - bias, at::zeros_like(x)));
        return y.to(x.scalar_type());  // integer inputs stay integers
      },
      "x + bias if x < -lambd, x - bias if x > lambd, else 0 (lambd 0.5, bias 0)",
      {spec_float("bias"), spec_float("lambd")});
}

}  // namespace

void register_elementwise_ops(OpRegistry& reg) {
  register_math_ops(reg);
  register_arithmetic_ops(reg);
  register_comparison_ops(reg);
  register_variadic_ops(reg);
  register_unary_ops(reg);
  reg.add(where_op());
  add_softmax(reg, "Softmax", false);
  add_softmax(reg, "LogSoftmax", true);
}

}  // namespace pare::core
