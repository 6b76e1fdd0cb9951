// Core ops, quantization family: QuantizeLinear and DequantizeLinear with ONNX semantics (opset 13
// per-axis, opset 19 `saturate`, opset 21 `block_size`/`output_dtype`), so that a QDQ graph runs
// in pare exactly as ONNX defines it: y = saturate(round_half_to_even(x / scale) + zero_point),
// x' = (q - zero_point) * scale. The integer math is done in float32 like ONNX Runtime does
// (x / scale in float32, exact for the int8/uint8/int32 ranges involved).
// Also com.microsoft MatMulNBits, the block-wise 4-bit weight-only MatMul that ONNX Runtime runs.
#include <limits>

#include "core/dtype.h"
#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::flops_per_output;
using ops::has_input;
using ops::spec_int;
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

// Unpacks 4-bit values stored two per byte, low nibble first: [..., n] uint8 -> [..., 2n] float.
at::Tensor unpack_nibbles(const at::Tensor& packed) {
  at::Tensor b = packed.to(at::kInt);
  at::Tensor low = at::bitwise_and(b, 15), high = at::bitwise_right_shift(b, 4);
  std::vector<int64_t> shape = packed.sizes().vec();
  shape.back() *= 2;
  return at::stack({low, high}, -1).reshape(shape).to(at::kFloat);
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
    reg.add(std::move(d));
  }
  // QuantizeLinear and DequantizeLinear: (x, scale[, zero_point]).
  auto add_qdq = [&reg](const char* name, std::vector<AttrSpec> attrs, ForwardFn fwd, const char* doc) {
    OpDef d;
    d.name = name;
    d.inputs_min = 2;
    d.inputs_max = 3;
    d.attrs = std::move(attrs);
    d.forward = std::move(fwd);
    d.flops = flops_per_output(2);
    d.doc = doc;
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
