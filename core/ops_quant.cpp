// Core ops, quantization family: QuantizeLinear and DequantizeLinear with ONNX semantics (opset 13
// per-axis, opset 19 `saturate`, opset 21 `block_size`/`output_dtype`), so that a QDQ graph runs
// in pare exactly as ONNX defines it: y = saturate(round_half_to_even(x / scale) + zero_point),
// x' = (q - zero_point) * scale. The integer math is done in float32 like ONNX Runtime does
// (x / scale in float32, exact for the int8/uint8/int32 ranges involved).
// Also com.microsoft MatMulNBits, the block-wise 4-bit weight-only MatMul that ONNX Runtime runs;
// DynamicQuantizeLinear and MatMulInteger, the ONNX ops of dynamic quantization (activation scale
// computed at run time, integer MatMul); and FakeQuantize (domain "pare"), the quantization-aware
// training op: QuantizeLinear -> DequantizeLinear in one node, the same numbers to the bit, with
// straight-through gradients and optionally learnable (LSQ) scales.
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::flops_per_output;
using ops::has_input;
using ops::spec_int;
using ops::unpack_nibbles;
using Tensors = std::vector<at::Tensor>;

/// Range of the integer types QuantizeLinear may produce.
std::pair<double, double> int_range(const Node& n, at::ScalarType t) {
  switch (t) {
    case at::kByte: return {0, 255};
    case at::kChar: return {-128, 127};
    case at::kShort: return {-32768, 32767};
    case at::kInt: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default: break;
  }
  throw InputError(n.describe() + ": quantized type must be uint8, int8, int16 or int32, got " +
                   dtype_name(t));
}

/// Reshapes `p` (a scale or zero point) to broadcast against `x`: a scalar or one-element tensor
/// is per-tensor; a 1-D tensor of size x.shape[axis] is per-axis; a tensor of x's rank is blocked
/// along `axis` with `block_size` (opset 21) and is repeated to x's size.
at::Tensor broadcast_param(const Node& n, const at::Tensor& p, const at::Tensor& x, const char* what) {
  if (p.numel() == 1) return p.reshape({});
  const int64_t axis = ops::normalize_axis(n.attr_int("axis", 1), x.dim(), n);
  const int64_t block = n.attr_int("block_size", 0);
  if (block > 0) {
    PARE_CHECK(p.dim() == x.dim(), n.describe(), ": blocked ", what, " must have the rank of x (",
               x.dim(), "), got ", p.sizes());
    PARE_CHECK(p.size(axis) == (x.size(axis) + block - 1) / block, n.describe(), ": blocked ", what,
               " needs ceil(", x.size(axis), " / ", block, ") entries along axis ", axis, ", got ",
               p.size(axis));
    return p.repeat_interleave(block, axis).narrow(axis, 0, x.size(axis));
  }
  PARE_CHECK(p.dim() == 1 && p.size(0) == x.size(axis), n.describe(), ": per-axis ", what,
             " must be 1-D with x.shape[", axis, "] = ", x.size(axis), " entries, got ", p.sizes());
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[static_cast<size_t>(axis)] = x.size(axis);
  return p.reshape(shape);
}

Tensors quantize_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x = in.at(0);
  const at::Tensor& scale = in.at(1);
  PARE_CHECK(x.is_floating_point() && scale.is_floating_point(), n.describe(),
             ": QuantizeLinear needs floating x and y_scale, got ", dtype_name(x.scalar_type()),
             " and ", dtype_name(scale.scalar_type()));
  // The output type: the zero point's, else output_dtype (opset 21), else uint8.
  at::ScalarType type = at::kByte;
  if (has_input(in, 2)) {
    type = in[2].scalar_type();
  } else if (n.attr_int("output_dtype", 0) != 0) {
    auto t = scalar_type_from_onnx(static_cast<int>(n.attr_int("output_dtype", 0)));
    PARE_CHECK(t.has_value(), n.describe(), ": unsupported output_dtype ", n.attr_int("output_dtype", 0));
    type = *t;
  }
  auto [lo, hi] = int_range(n, type);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor s = broadcast_param(n, scale.to(at::kFloat), xf, "y_scale");
  // at::round rounds half to even, as ONNX requires.
  at::Tensor q = at::round(xf / s);
  if (has_input(in, 2)) q = q + broadcast_param(n, in[2].to(at::kFloat), xf, "y_zero_point");
  // int32 bounds are not exact in float32: clamp in double for them.
  if (type == at::kInt) q = q.to(at::kDouble);
  return {at::clamp(q, lo, hi).to(type)};
}

Tensors dequantize_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x = in.at(0);
  const at::Tensor& scale = in.at(1);
  PARE_CHECK(!x.is_floating_point() && x.scalar_type() != at::kBool, n.describe(),
             ": DequantizeLinear needs an integer x, got ", dtype_name(x.scalar_type()));
  PARE_CHECK(scale.is_floating_point(), n.describe(), ": x_scale must be floating, got ",
             dtype_name(scale.scalar_type()));
  if (has_input(in, 2))
    PARE_CHECK(in[2].scalar_type() == x.scalar_type(), n.describe(),
               ": x_zero_point must have the type of x (", dtype_name(x.scalar_type()), "), got ",
               dtype_name(in[2].scalar_type()));
  // int32 values beyond 2^24 are not exact in float32; ORT converts them to float all the same.
  at::Tensor xf = x.to(at::kFloat);
  if (has_input(in, 2)) xf = xf - broadcast_param(n, in[2].to(at::kFloat), xf, "x_zero_point");
  return {(xf * broadcast_param(n, scale.to(at::kFloat), xf, "x_scale")).to(scale.scalar_type())};
}

// MatMulNBits (com.microsoft): Y = A @ W^T (+ bias) with W [N, K] stored as B [N, blocks, blob]
// of `bits`-bit codes, w = (q - zero_point) * scale per block of `block_size` along K; the zero
// point defaults to 2^(bits-1) and, when given, is packed like B ([N * ceil(blocks / 2)] uint8).
Tensors matmul_nbits_forward(const Node& n, const Tensors& in, const RunContext&) {
  const int64_t K = n.attr_int("K", 0), N = n.attr_int("N", 0), bits = n.attr_int("bits", 4);
  const int64_t block = n.attr_int("block_size", 0);
  PARE_CHECK(bits == 4, n.describe(), ": MatMulNBits supports bits=4, got ", bits);
  PARE_CHECK(K > 0 && N > 0 && block >= 16 && (block & (block - 1)) == 0, n.describe(),
             ": MatMulNBits needs K, N > 0 and a power-of-two block_size >= 16, got K=", K, " N=", N,
             " block_size=", block);
  const int64_t blocks = (K + block - 1) / block;
  const at::Tensor& a = in.at(0);
  const at::Tensor& b = in.at(1);
  PARE_CHECK(b.scalar_type() == at::kByte && b.numel() == N * blocks * block / 2, n.describe(),
             ": B must be uint8 [N, ceil(K / block_size), block_size / 2] = [", N, ", ", blocks, ", ",
             block / 2, "], got ", dtype_name(b.scalar_type()), " ", b.sizes());
  PARE_CHECK(a.dim() >= 1 && a.size(-1) == K, n.describe(), ": A's last dim must be K = ", K, ", got ",
             a.sizes());
  PARE_CHECK(in.at(2).numel() == N * blocks, n.describe(), ": scales must hold N * blocks = ", N * blocks,
             " values, got ", in[2].numel());
  at::Tensor q = unpack_nibbles(b.reshape({N, blocks, block / 2})).reshape({N, blocks, block});
  at::Tensor zp = at::full({N, blocks, 1}, 8.0f);
  if (has_input(in, 3)) {
    PARE_CHECK(in[3].scalar_type() == at::kByte, n.describe(), ": only packed uint8 zero points are supported");
    zp = unpack_nibbles(in[3].reshape({N, -1})).narrow(1, 0, blocks).reshape({N, blocks, 1});
  }
  at::Tensor scale = in[2].to(at::kFloat).reshape({N, blocks, 1});
  at::Tensor w = ((q - zp) * scale).reshape({N, blocks * block}).narrow(1, 0, K);
  at::Tensor y = at::matmul(a.to(at::kFloat), w.t());
  if (has_input(in, 5)) y = y + in[5].to(at::kFloat);
  return {y.to(a.scalar_type())};
}

// FakeQuantize (x, scale, zero_point): y = (clamp(round(x / scale) + zp, qmin, qmax) - zp) * scale,
// computed with the very expressions of QuantizeLinear and DequantizeLinear above, so a QAT graph
// and the QDQ graph it converts to give the same outputs to the bit (at::fake_quantize_* multiply
// by 1 / scale instead, which differs from ONNX's division in the last bit now and then).
// Gradients: straight-through for x inside [qmin, qmax] (0 outside); with learnable = 1, LSQ's
// gradient for the scale (Esser et al. 2020: round(x/s) - x/s inside, qmin - zp or qmax - zp
// outside, times 1 / sqrt(values per scale * qmax)). The gradient terms are added as
// (e - e.detach()), exactly zero, so they never change the forward value.
Tensors fake_quantize_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x = in.at(0);
  const at::Tensor& scale = in.at(1);
  const int64_t qmin = n.attr_int("qmin", 0), qmax = n.attr_int("qmax", 255);
  PARE_CHECK(qmin < qmax, n.describe(), ": FakeQuantize needs qmin < qmax, got ", qmin, " and ", qmax);
  PARE_CHECK(x.is_floating_point() && scale.is_floating_point(), n.describe(),
             ": FakeQuantize needs floating x and scale, got ", dtype_name(x.scalar_type()), " and ",
             dtype_name(scale.scalar_type()));
  at::Tensor s = broadcast_param(n, scale.to(at::kFloat), x, "scale");
  at::Tensor zp = has_input(in, 2) ? broadcast_param(n, in[2].to(at::kFloat), x, "zero_point")
                                   : at::zeros({}, at::kFloat);
  at::Tensor xf = x.to(at::kFloat), sd = s.detach();
  at::Tensor qraw, q, y;
  {
    at::NoGradGuard no_grad;
    qraw = at::round(xf.detach() / sd) + zp;
    // Bounds beyond 2^24 (int32 biases) are not exact in float32: clamp in double for them.
    const bool wide = qmax > (1 << 24) || qmin < -(1 << 24);
    q = wide ? at::clamp(qraw.to(at::kDouble), static_cast<double>(qmin), static_cast<double>(qmax)).to(at::kFloat)
             : at::clamp(qraw, static_cast<double>(qmin), static_cast<double>(qmax));
    y = ((q - zp) * sd).to(x.scalar_type());
  }
  const bool learn = n.attr_int("learnable", 0) != 0 && scale.requires_grad();
  if (!at::GradMode::is_enabled() || (!x.requires_grad() && !learn)) return {y};
  at::Tensor inside = at::logical_and(qraw >= static_cast<double>(qmin), qraw <= static_cast<double>(qmax))
                          .to(at::kFloat);
  at::Tensor e = xf * inside;
  if (learn) {
    at::Tensor c = (q - zp - xf.detach() / sd * inside).detach();
    const double per_scale = static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(1, scale.numel()));
    const double g = 1.0 / std::sqrt(per_scale * static_cast<double>(std::max(qmax, -qmin)));
    e = e + s * c * g;
  }
  return {y + (e - e.detach()).to(x.scalar_type())};
}

// DynamicQuantizeLinear: uint8 y, y_scale, y_zero_point from the range of x (which is widened to
// contain 0), as ONNX defines it and ONNX Runtime computes it: scale = (max - min) / 255 in
// float32, zero point = round_half_to_even(saturate(0 - min / scale)), y = saturate(round(x /
// scale) + zero point).
Tensors dynamic_quantize_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x = in.at(0);
  PARE_CHECK(x.is_floating_point() && x.numel() > 0, n.describe(),
             ": DynamicQuantizeLinear needs a non-empty floating x, got ", dtype_name(x.scalar_type()), " ",
             x.sizes());
  at::Tensor xf = x.detach().to(at::kFloat);
  const float lo = std::min(0.0f, xf.min().item<float>()), hi = std::max(0.0f, xf.max().item<float>());
  const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float zp = std::nearbyint(std::max(0.0f, std::min(255.0f, 0.0f - lo / scale)));
  at::Tensor q = at::clamp(at::round(xf / scale) + zp, 0, 255).to(at::kByte);
  return {q, at::scalar_tensor(scale, at::kFloat), at::scalar_tensor(static_cast<int64_t>(zp), at::kByte)};
}

// MatMulInteger: int32 (A - a_zero_point) @ (B - b_zero_point), numpy-style batching like MatMul;
// a_zero_point per tensor, b_zero_point per tensor or per column ([N]). Exact: the products are
// summed in double, which holds every int32 result.
Tensors matmul_integer_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor &a = in.at(0), &b = in.at(1);
  for (const at::Tensor* t : {&a, &b})
    PARE_CHECK(t->scalar_type() == at::kByte || t->scalar_type() == at::kChar, n.describe(),
               ": MatMulInteger needs uint8 or int8 A and B, got ", dtype_name(t->scalar_type()));
  PARE_CHECK(a.dim() >= 1 && b.dim() >= 1, n.describe(), ": MatMulInteger needs A and B of rank >= 1");
  at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble);
  if (has_input(in, 2)) {
    PARE_CHECK(in[2].numel() == 1 && in[2].scalar_type() == a.scalar_type(), n.describe(),
               ": a_zero_point must be one value of A's type, got ", dtype_name(in[2].scalar_type()), " ",
               in[2].sizes());
    ad = ad - in[2].to(at::kDouble).reshape({});
  }
  if (has_input(in, 3)) {
    const at::Tensor& z = in[3];
    PARE_CHECK(z.scalar_type() == b.scalar_type() && (z.numel() == 1 || (z.dim() == 1 && z.size(0) == b.size(-1))),
               n.describe(), ": b_zero_point must be one value or one per column (", b.size(-1),
               ") of B's type, got ", dtype_name(z.scalar_type()), " ", z.sizes());
    bd = bd - (z.numel() == 1 ? z.to(at::kDouble).reshape({}) : z.to(at::kDouble));
  }
  PARE_CHECK(ad.size(-1) == bd.size(b.dim() >= 2 ? -2 : 0), n.describe(),
             ": MatMulInteger requires the reduction length of A and B to be equal, got A ", a.sizes(),
             " and B ", b.sizes());
  return {at::matmul(ad, bd).to(at::kInt)};
}

}  // namespace

void register_quant_ops(OpRegistry& reg) {
  {
    OpDef d;
    d.name = "MatMulNBits";
    d.inputs_min = 3;
    d.inputs_max = 6;  // A, B, scales, zero_points, g_idx (unsupported), bias
    d.attrs = {spec_int("K"), spec_int("N"), spec_int("bits"), spec_int("block_size"),
               spec_int("accuracy_level")};
    d.forward = [](const Node& n, const Tensors& in, const RunContext& ctx) -> Tensors {
      PARE_CHECK(!has_input(in, 4), n.describe(), ": MatMulNBits with g_idx is not supported");
      return matmul_nbits_forward(n, in, ctx);
    };
    d.flops = [](const Node& n, const std::vector<std::vector<int64_t>>&,
                 const std::vector<std::vector<int64_t>>& out) -> int64_t {
      return out.empty() ? 0 : 2 * ops::numel(out[0]) * n.attr_int("K", 0);
    };
    d.doc = "com.microsoft: A @ W^T with W [N, K] stored as 4-bit codes in blocks of block_size "
            "along K, one scale (and zero point, default 8) per block";
    d.traits.opaque_channels = true;
    reg.add(std::move(d));
  }
  {
    OpDef d;
    d.name = "FakeQuantize";
    d.inputs_min = 2;
    d.inputs_max = 3;  // x, scale, zero_point
    d.attrs = {spec_int("axis"), spec_int("qmin"), spec_int("qmax"), spec_int("learnable")};
    d.forward = fake_quantize_forward;
    d.flops = flops_per_output(0);  // quantization bookkeeping, not model arithmetic (see add_qdq)
    // A constant x (a weight) is trained through it; so is the scale when learnable = 1.
    d.weights = {WeightInput::fixed(0, WeightRole::kOperand), WeightInput::fixed(1, WeightRole::kScale)};
    d.doc = "pare: QuantizeLinear -> DequantizeLinear in one node for quantization-aware training: "
            "(clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale, per tensor or "
            "per `axis`; straight-through gradient for x, LSQ gradient for the scale when learnable=1";
    d.traits.opaque_channels = true;
    reg.add(std::move(d));
  }
  {
    OpDef d;
    d.name = "DynamicQuantizeLinear";
    d.outputs_min = d.outputs_max = 3;
    d.forward = dynamic_quantize_forward;
    d.flops = flops_per_output(0);  // quantization bookkeeping, not model arithmetic (see add_qdq)
    d.doc = "uint8 y, y_scale, y_zero_point with the scale and zero point computed from x's range "
            "(widened to contain 0) at run time";
    d.traits.opaque_channels = true;
    reg.add(std::move(d));
  }
  {
    OpDef d;
    d.name = "MatMulInteger";
    d.inputs_min = 2;
    d.inputs_max = 4;  // A, B, a_zero_point, b_zero_point
    d.forward = matmul_integer_forward;
    // Its multiply-adds, 2 per MAC as MatMul counts them (integer operations, same work).
    d.flops = [](const Node&, const std::vector<std::vector<int64_t>>& in,
                 const std::vector<std::vector<int64_t>>& out) -> int64_t {
      return out.empty() || in.empty() || in[0].empty() ? 0 : 2 * ops::numel(out[0]) * in[0].back();
    };
    d.doc = "int32 (A - a_zero_point) @ (B - b_zero_point) for uint8/int8 A and B";
    d.traits.opaque_channels = true;
    reg.add(std::move(d));
  }
  // QuantizeLinear and DequantizeLinear: (x, scale[, zero_point]). They count no FLOPs, like
  // DynamicQuantizeLinear and FakeQuantize: they say how numbers are stored, and an int8 runtime
  // folds them into the integer kernels (weights are dequantized once, if at all), so a QDQ model
  // does the FLOPs of its float twin, not twice as many.
  auto add_qdq = [&reg](const char* name, std::vector<AttrSpec> attrs, ForwardFn fwd, const char* doc) {
    OpDef d;
    d.name = name;
    d.inputs_min = 2;
    d.inputs_max = 3;
    d.attrs = std::move(attrs);
    d.forward = std::move(fwd);
    d.flops = flops_per_output(0);
    d.doc = doc;
    d.traits.opaque_channels = true;
    reg.add(std::move(d));
  };
  add_qdq("QuantizeLinear",
          {spec_int("axis"), spec_int("saturate"), spec_int("block_size"), spec_int("output_dtype")},
          quantize_forward,
          "saturate(round_half_to_even(x / y_scale) + y_zero_point): per-tensor, per-axis (`axis`) "
          "or blocked (`block_size`); uint8 unless the zero point says otherwise");
  add_qdq("DequantizeLinear", {spec_int("axis"), spec_int("block_size")}, dequantize_forward,
          "(x - x_zero_point) * x_scale: per-tensor, per-axis (`axis`) or blocked (`block_size`)");
}

}  // namespace pare::core
