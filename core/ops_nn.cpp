// Core ops, nn family: Conv/ConvTranspose, Gemm/MatMul/Einsum/Det, the normalizations (Batch,
// Layer, Instance, MeanVariance, LRN), pooling, Flatten, Dropout and the Reduce* ops. ONNX pads
// are [x1_begin, x2_begin, ..., x1_end, x2_end, ...]; where libtorch cannot express them
// (asymmetric, or wider than half the kernel) the input is padded explicitly first.
#include <ATen/core/grad_mode.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::flops_per_input;
using ops::flops_per_output;
using ops::has_input;
using ops::wants_output;
using ops::numel;
using ops::spec_float;
using ops::spec_int;
using ops::spec_ints;
using ops::spec_string;
using Tensors = std::vector<at::Tensor>;
using Sizes = std::vector<std::vector<int64_t>>;

std::vector<int64_t> spatial_sizes(const at::Tensor& x) {
  return std::vector<int64_t>(x.sizes().begin() + 2, x.sizes().end());
}

/// Resizes a forward's result to one entry per node output (missing ones undefined).
Tensors fit_outputs(const Node& n, Tensors out) {
  out.resize(std::max<size_t>(1, n.outputs.size()));
  return out;
}


// ---- Conv / ConvTranspose -----------------------------------------------------------------

Tensors conv_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x = in.at(0);
  const at::Tensor& w = in.at(1);
  PARE_CHECK(x.dim() >= 3 && x.dim() <= 5 && w.dim() == x.dim(), n.describe(),
             ": Conv needs X [N, C, spatial...] (1 to 3 spatial dims) and W of the same rank; got X ",
             x.sizes(), " and W ", w.sizes());
  const int64_t group = n.attr_int("group", 1);
  PARE_CHECK(group >= 1 && x.size(1) == w.size(1) * group, n.describe(),
             ": Conv input channels (", x.size(1), ") must equal W.shape[1] (", w.size(1),
             ") * group (", group, ")");
  const std::vector<int64_t> kernel(w.sizes().begin() + 2, w.sizes().end());
  ops::Window win = ops::resolve_window(n, spatial_sizes(x), kernel);
  c10::optional<at::Tensor> bias;
  if (has_input(in, 2)) bias = in[2];
  at::Tensor src = x;
  std::vector<int64_t> padding = win.pads_begin;
  if (!win.symmetric()) {
    src = ops::pad_spatial(x, win.pads_begin, win.pads_end, 0);
    padding.assign(kernel.size(), 0);
  }
  const std::vector<int64_t> output_padding(kernel.size(), 0);
  return {at::convolution(src, w, bias, win.strides, padding, win.dilations, false, output_padding,
                          group)};
}

// 2 FLOPs per multiply-add: every output element reads (C/group) * prod(kernel) weights.
// Bias additions are not counted.
int64_t conv_flops(const Node&, const Sizes& in, const Sizes& out) {
  if (in.size() < 2 || out.empty() || in[1].size() < 2) return 0;
  const std::vector<int64_t> per_out(in[1].begin() + 1, in[1].end());
  return 2 * numel(out[0]) * numel(per_out);
}

OpDef conv_op() {
  OpDef d = ops::op_def("Conv", 2, 3,
                        "N-d convolution (1 to 3 spatial dims) with groups, dilations, strides and pads");
  d.attrs = {spec_string("auto_pad"), spec_ints("dilations"), spec_int("group"),
             spec_ints("kernel_shape"), spec_ints("pads"), spec_ints("strides")};
  d.forward = conv_forward;
  d.flops = conv_flops;
  // W [M, C/group, k...], B [M].
  d.weights = {WeightInput::fixed(1, WeightRole::kWeight, 0, 1), WeightInput::fixed(2, WeightRole::kBias, 0)};
  return d;
}

Tensors conv_transpose_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x = in.at(0);
  const at::Tensor& w = in.at(1);
  PARE_CHECK(x.dim() >= 3 && x.dim() <= 5 && w.dim() == x.dim(), n.describe(),
             ": ConvTranspose needs X [N, C, spatial...] and W of the same rank; got X ", x.sizes(),
             " and W ", w.sizes());
  const int64_t group = n.attr_int("group", 1);
  const size_t ns = static_cast<size_t>(x.dim() - 2);
  const std::vector<int64_t> kernel(w.sizes().begin() + 2, w.sizes().end());
  const std::vector<int64_t> sp = spatial_sizes(x);
  auto strides = n.attr_ints("strides", std::vector<int64_t>(ns, 1));
  auto dilations = n.attr_ints("dilations", std::vector<int64_t>(ns, 1));
  auto out_pad = n.attr_ints("output_padding", std::vector<int64_t>(ns, 0));
  PARE_CHECK(strides.size() == ns && dilations.size() == ns && out_pad.size() == ns, n.describe(),
             ": strides, dilations and output_padding need one value per spatial dim (", ns, ")");
  // Full (unpadded) output, then crop the pads: this handles asymmetric pads and output_shape.
  std::vector<int64_t> full(ns), begin(ns, 0), end(ns, 0);
  for (size_t i = 0; i < ns; ++i)
    full[i] = (sp[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 + out_pad[i];
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  auto output_shape = n.attr_ints("output_shape");
  if (!output_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    if (output_shape.size() > ns)  // output_shape may include N and C
      output_shape.erase(output_shape.begin(), output_shape.end() - static_cast<long>(ns));
    for (size_t i = 0; i < ns; ++i) {
      const int64_t target = output_shape.empty() ? sp[i] * strides[i] : output_shape[i];
      const int64_t total = full[i] - target;
      PARE_CHECK(total >= 0, n.describe(), ": output_shape larger than the full transposed output");
      // ONNX: SAME_UPPER puts the smaller half first; SAME_LOWER and NOTSET the larger.
      begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end[i] = total - begin[i];
    }
  } else if (auto_pad == "NOTSET") {
    auto pads = n.attr_ints("pads", std::vector<int64_t>(2 * ns, 0));
    PARE_CHECK(pads.size() == 2 * ns, n.describe(), ": pads needs ", 2 * ns, " values");
    for (size_t i = 0; i < ns; ++i) {
      begin[i] = pads[i];
      end[i] = pads[ns + i];
    }
  } else {
    PARE_CHECK(auto_pad == "VALID", n.describe(), ": unknown auto_pad '", auto_pad, "'");
  }
  c10::optional<at::Tensor> bias;
  if (has_input(in, 2)) bias = in[2];
  for (size_t i = 0; i < ns; ++i)
    PARE_CHECK(out_pad[i] < strides[i] || out_pad[i] < dilations[i], n.describe(),
               ": output_padding must be smaller than the stride or the dilation, got ", out_pad[i]);
  at::Tensor y = at::convolution(x, w, bias, strides, std::vector<int64_t>(ns, 0), dilations, true,
                                 out_pad, group);
  for (size_t i = 0; i < ns; ++i) {
    const int64_t dim = static_cast<int64_t>(i) + 2;
    if (begin[i] != 0 || end[i] != 0) {
      y = y.slice(dim, begin[i], y.size(dim) - end[i]);
    }
  }
  return {y};
}

// Every input element is scattered through (M/group) * prod(kernel) weights.
int64_t conv_transpose_flops(const Node&, const Sizes& in, const Sizes&) {
  if (in.size() < 2 || in[1].size() < 2) return 0;
  const std::vector<int64_t> per_in(in[1].begin() + 1, in[1].end());
  return 2 * numel(in[0]) * numel(per_in);
}

OpDef conv_transpose_op() {
  OpDef d = ops::op_def("ConvTranspose", 2, 3,
                        "transposed convolution (W is [C, M/group, k...]) with output_padding/output_shape");
  d.attrs = {spec_string("auto_pad"), spec_ints("dilations"), spec_int("group"),
             spec_ints("kernel_shape"), spec_ints("output_padding"), spec_ints("output_shape"),
             spec_ints("pads"), spec_ints("strides")};
  d.forward = conv_transpose_forward;
  d.flops = conv_transpose_flops;
  // W [C, M/group, k...], B [M].
  d.weights = {WeightInput::fixed(1, WeightRole::kWeight, 1, 0), WeightInput::fixed(2, WeightRole::kBias, 0)};
  return d;
}

// ---- Gemm / MatMul -------------------------------------------------------------------------

Tensors gemm_forward(const Node& n, const Tensors& in, const RunContext&) {
  at::Tensor a = in.at(0), b = in.at(1);
  PARE_CHECK(a.dim() == 2 && b.dim() == 2, n.describe(), ": Gemm needs 2-D A and B, got ",
             a.sizes(), " and ", b.sizes());
  if (n.attr_int("transA", 0) != 0) a = a.t();
  if (n.attr_int("transB", 0) != 0) b = b.t();
  PARE_CHECK(a.size(1) == b.size(0), n.describe(),
             ": Gemm requires the reduction length of A and B to be equal, got A' ", a.sizes(),
             " and B' ", b.sizes());
  const double alpha = n.attr_float("alpha", 1.0f);
  const double beta = n.attr_float("beta", 1.0f);
  if (has_input(in, 2) && beta != 0.0) return {at::addmm(in[2], a, b, beta, alpha)};
  at::Tensor y = at::mm(a, b);
  return {alpha == 1.0 ? y : y * alpha};
}

int64_t gemm_flops(const Node& n, const Sizes& in, const Sizes& out) {
  if (in.empty() || out.empty() || in[0].size() != 2) return 0;
  const int64_t k = n.attr_int("transA", 0) != 0 ? in[0][0] : in[0][1];
  return 2 * numel(out[0]) * k;
}

int64_t matmul_flops(const Node&, const Sizes& in, const Sizes& out) {
  if (in.empty() || out.empty() || in[0].empty()) return 0;
  return 2 * numel(out[0]) * in[0].back();
}

OpDef gemm_op() {
  OpDef d = ops::op_def("Gemm", 2, 3,
                        "alpha * A' @ B' + beta * C, A' = transA ? A^T : A (C optional, broadcast)");
  d.attrs = {spec_float("alpha"), spec_float("beta"), spec_int("transA"), spec_int("transB")};
  d.forward = gemm_forward;
  d.flops = gemm_flops;
  // B [K, N], or [N, K] with transB; C broadcast to [M, N]: its last axis runs along N.
  d.weights = {
      {1, WeightRole::kWeight,
       [](const Node& n, int64_t) { return n.attr_int("transB", 0) != 0 ? WeightAxes{0, 1} : WeightAxes{1, 0}; }},
      {2, WeightRole::kBias, [](const Node&, int64_t rank) { return WeightAxes{rank >= 1 ? rank - 1 : -1, -1}; }}};
  return d;
}

OpDef matmul_op() {
  OpDef d = ops::op_def("MatMul", 2, 2,
                        "numpy matmul: batched, with 1-D operands promoted and broadcast batch dims");
  d.forward = [](const Node&, const Tensors& in, const RunContext&) -> Tensors {
    return {at::matmul(in.at(0), in.at(1))};
  };
  d.flops = matmul_flops;
  // Either operand may be the weight: x @ W with W [K, N], or W @ x with W [M, K]. pare follows
  // the channels of 2-D weights only.
  d.weights = {
      {0, WeightRole::kWeight, [](const Node&, int64_t rank) { return rank == 2 ? WeightAxes{0, 1} : WeightAxes{}; }},
      {1, WeightRole::kWeight, [](const Node&, int64_t rank) { return rank == 2 ? WeightAxes{1, 0} : WeightAxes{}; }}};
  return d;
}

// ---- Normalisation -------------------------------------------------------------------------

Tensors batch_norm_forward(const Node& n, const Tensors& in, const RunContext& ctx) {
  const at::Tensor& x = in.at(0);
  const at::Tensor &scale = in.at(1), &bias = in.at(2), &mean = in.at(3), &var = in.at(4);
  PARE_CHECK(x.dim() >= 2, n.describe(), ": BatchNormalization needs X [N, C, ...], got ",
             x.sizes());
  const double eps = n.attr_float("epsilon", 1e-5f);
  // ONNX: running = running * momentum + batch * (1 - momentum); libtorch weighs the batch by
  // its momentum, so it gets 1 - momentum.
  const double torch_momentum = 1.0 - static_cast<double>(n.attr_float("momentum", 0.9f));
  const bool graph_training = n.attr_int("training_mode", 0) != 0;
  if (!ctx.training && !graph_training)
    return fit_outputs(n, {at::batch_norm(x, scale, bias, mean, var, false, 0.0, eps, true)});
  // Training: batch statistics. Under RunContext.training the running statistics are the
  // module's buffers and are updated in place (as in PyTorch, with the unbiased batch variance);
  // a graph in training_mode run for inference leaves its inputs untouched.
  at::Tensor running_mean = ctx.training ? mean : mean.clone();
  at::Tensor running_var = ctx.training ? var : var.clone();
  at::Tensor y =
      at::batch_norm(x, scale, bias, running_mean, running_var, true, torch_momentum, eps, true);
  if (!ctx.training) {
    // The graph's own running_var output is ONNX's: it takes the population (biased) batch
    // variance, as ONNX Runtime does, where libtorch takes the unbiased one.
    std::vector<int64_t> dims = {0};
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    at::NoGradGuard no_grad;
    running_var = var * (1.0 - torch_momentum) + x.var(dims, /*unbiased=*/false) * torch_momentum;
  }
  return fit_outputs(n, {y, running_mean, running_var});
}

OpDef batch_normalization_op() {
  OpDef d = ops::op_def("BatchNormalization", 5, 5,
                        "per-channel (X - mean) / sqrt(var + epsilon) * scale + B; training uses batch "
                        "statistics and updates the running ones (ONNX momentum: weight of the old value)");
  d.outputs_max = 3;
  d.attrs = {spec_float("epsilon"), spec_float("momentum"), spec_int("training_mode")};
  d.forward = batch_norm_forward;
  d.flops = flops_per_output(2);  // scale and shift once folded
  d.weights = {WeightInput::fixed(1, WeightRole::kScale, 0), WeightInput::fixed(2, WeightRole::kShift, 0),
               WeightInput::fixed(3, WeightRole::kMean, 0), WeightInput::fixed(4, WeightRole::kVariance, 0)};
  return d;
}

Tensors layer_norm_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x0 = in.at(0);
  const int64_t rank = x0.dim();
  const int64_t axis = ops::normalize_axis(n.attr_int("axis", -1), rank, n);
  const double eps = n.attr_float("epsilon", 1e-5f);
  // stash_type 1 (float): statistics of low-precision inputs are computed in float32.
  const bool upcast = n.attr_int("stash_type", 1) == 1 &&
                      (x0.scalar_type() == at::kHalf || x0.scalar_type() == at::kBFloat16);
  auto up = [&](const at::Tensor& t) { return upcast && t.defined() ? t.to(at::kFloat) : t; };
  const at::Tensor x = up(x0);
  const at::Tensor scale = up(in.at(1));
  const at::Tensor bias = has_input(in, 2) ? up(in[2]) : at::Tensor();
  const std::vector<int64_t> norm_shape(x.sizes().begin() + axis, x.sizes().end());
  std::vector<int64_t> stat_shape(x.sizes().begin(), x.sizes().begin() + axis);
  stat_shape.resize(static_cast<size_t>(rank), 1);

  // native_layer_norm's backward drops the gradients of its mean and rstd outputs: a graph that
  // reads them under autograd takes the spelled-out path.
  const bool stats_need_grad =
      (wants_output(n, 1) || wants_output(n, 2)) && at::GradMode::is_enabled() && x.requires_grad();
  at::Tensor y, mean, inv_std;
  if (!stats_need_grad && scale.sizes().vec() == norm_shape &&
      (!bias.defined() || bias.sizes().vec() == norm_shape)) {
    c10::optional<at::Tensor> b;
    if (bias.defined()) b = bias;
    std::tie(y, mean, inv_std) = at::native_layer_norm(x, norm_shape, scale, b, eps);
    mean = mean.reshape(stat_shape);
    inv_std = inv_std.reshape(stat_shape);
  } else {
    // Scale/B only broadcastable to the normalized shape, or statistics to differentiate: spell it out.
    std::vector<int64_t> dims;
    for (int64_t d = axis; d < rank; ++d) dims.push_back(d);
    mean = x.mean(dims, true);
    at::Tensor centred = x - mean;
    inv_std = at::rsqrt((centred * centred).mean(dims, true) + eps);
    y = centred * inv_std * scale;
    if (bias.defined()) y = y + bias;
  }
  if (upcast) y = y.to(x0.scalar_type());
  return fit_outputs(n, {y, mean, inv_std});
}

// The size of Einsum's iteration space: every letter's size, times the largest block of dims an
// ellipsis stands for in any input.
int64_t einsum_points(const std::string& equation, const Sizes& in) {
  std::string eq;
  for (char c : equation.substr(0, equation.find("->"))) if (c != ' ') eq += c;
  std::map<char, int64_t> letter;
  int64_t ellipsis = 1;
  std::stringstream terms(eq);
  std::string term;
  for (size_t t = 0; t < in.size() && std::getline(terms, term, ','); ++t) {
    const auto& dims = in[t];
    const size_t dots = term.find("...");
    std::string before, after;  // the letters of the leading and of the trailing dims
    for (size_t i = 0; i < term.size(); ++i)
      if (std::isalpha(static_cast<unsigned char>(term[i]))) (dots != std::string::npos && i > dots ? after : before) += term[i];
    if (before.size() + after.size() > dims.size()) continue;  // the forward refuses it
    for (size_t j = 0; j < before.size(); ++j) letter[before[j]] = std::max(letter[before[j]], dims[j]);
    const size_t tail = dims.size() - after.size();
    for (size_t j = 0; j < after.size(); ++j) letter[after[j]] = std::max(letter[after[j]], dims[tail + j]);
    int64_t block = 1;
    for (size_t j = before.size(); j < tail; ++j) block *= dims[j];
    ellipsis = std::max(ellipsis, block);
  }
  int64_t points = ellipsis;
  for (const auto& [c, size] : letter) points *= size;
  return points;
}

// Einsum: libtorch's einsum, which takes ONNX's equations (implicit output and ellipsis included).
OpDef einsum_op() {
  OpDef d = ops::op_def("Einsum", 1, -1, "Einstein summation of the inputs by `equation` (\"bij,bjk->bik\")");
  d.attrs = {{"equation", AttrKind::kString, true}};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    std::string eq;
    for (char c : n.attr_string("equation", "")) if (c != ' ') eq += c;
    return {at::einsum(eq, in)};
  };
  d.flops = [](const Node& n, const Sizes& in, const Sizes&) -> int64_t {
    return 2 * einsum_points(n.attr_string("equation", ""), in);  // a multiply-add per point
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef det_op() {
  OpDef d = ops::op_def("Det", 1, 1, "determinant of the square matrices in the last two dims");
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    PARE_CHECK(x.dim() >= 2 && x.size(-1) == x.size(-2) && x.is_floating_point(), n.describe(),
               ": Det needs floating-point [..., M, M], got ", x.scalar_type(), " ", x.sizes());
    return {at::linalg_det(x)};
  };
  d.flops = [](const Node&, const Sizes& in, const Sizes&) -> int64_t {
    if (in.empty() || in[0].size() < 2) return 0;
    const int64_t m = in[0].back();
    return numel(in[0]) / m * m * 2 / 3;  // LU: 2/3 m^3 per matrix
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef layer_normalization_op() {
  OpDef d = ops::op_def("LayerNormalization", 2, 3,
                        "normalizes over dims [axis, rank) then scales and shifts (opset 17); optional Mean "
                        "and InvStdDev outputs");
  d.outputs_max = 3;
  d.attrs = {spec_int("axis"), spec_float("epsilon"), spec_int("stash_type")};
  d.forward = layer_norm_forward;
  d.flops = flops_per_input(5);  // mean, centre, variance, normalise, affine
  // Scale and B cover the normalized dims: no channel axis.
  d.weights = {WeightInput::fixed(1, WeightRole::kScale), WeightInput::fixed(2, WeightRole::kShift)};
  return d;
}

// InstanceNormalization: per sample and channel over the spatial dims, then scale and B per channel.
OpDef instance_normalization_op() {
  OpDef d = ops::op_def("InstanceNormalization", 3, 3,
                        "normalizes each [n, c] over the spatial dims (biased variance + epsilon), then "
                        "scale[c] * x + B[c]");
  d.attrs = {spec_float("epsilon")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor &x = in.at(0), &scale = in.at(1), &bias = in.at(2);
    PARE_CHECK(x.dim() >= 3 && scale.dim() == 1 && bias.dim() == 1 && scale.size(0) == x.size(1) &&
                   bias.size(0) == x.size(1),
               n.describe(), ": needs x [N, C, d...] with scale and B [C], got ", x.sizes(), ", ", scale.sizes(),
               ", ", bias.sizes());
    std::vector<int64_t> dims, shape(x.dim(), 1);
    for (int64_t i = 2; i < x.dim(); ++i) dims.push_back(i);
    shape[1] = x.size(1);
    at::Tensor mean = x.mean(dims, true);
    at::Tensor var = (x - mean).pow(2).mean(dims, true);
    const double eps = n.attr_float("epsilon", 1e-5f);
    return {(x - mean) / at::sqrt(var + eps) * scale.reshape(shape) + bias.reshape(shape)};
  };
  d.flops = flops_per_input(5);
  d.weights = {WeightInput::fixed(1, WeightRole::kScale, 0), WeightInput::fixed(2, WeightRole::kShift, 0)};
  d.traits.opaque_channels = true;
  return d;
}

// MeanVarianceNormalization, as ONNX's function body computes it: (x - E[x]) / (sqrt(E[x^2] -
// E[x]^2) + 1e-9) over `axes` (default [0, 2, 3]).
OpDef mean_variance_normalization_op() {
  OpDef d = ops::op_def("MeanVarianceNormalization", 1, 1,
                        "(x - mean) / (std + 1e-9) over `axes` (default [0, 2, 3])");
  d.attrs = {spec_ints("axes")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    std::vector<int64_t> axes = n.attr_ints("axes", {0, 2, 3});
    for (auto& a : axes) a = ops::normalize_axis(a, x.dim(), n, "axes");
    at::Tensor mean = x.mean(axes, true);
    at::Tensor var = (x * x).mean(axes, true) - mean * mean;
    return {(x - mean) / (at::sqrt(var) + 1e-9)};
  };
  d.flops = flops_per_input(6);
  d.traits.opaque_channels = true;
  return d;
}

// LRN: x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels) ** beta.
OpDef lrn_op() {
  OpDef d = ops::op_def("LRN", 1, 1,
                        "local response normalization across `size` channels (alpha 1e-4, beta 0.75, bias 1)");
  d.attrs = {spec_float("alpha"), spec_float("beta"), spec_float("bias"), {"size", AttrKind::kInt, true}};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const int64_t size = n.attr_int("size", 0);
    PARE_CHECK(x.dim() >= 3 && size >= 1, n.describe(), ": LRN needs [N, C, d...] and size >= 1, got ", x.sizes(),
               " and ", size);
    const double alpha = n.attr_float("alpha", 1e-4f), beta = n.attr_float("beta", 0.75f),
                 bias = n.attr_float("bias", 1.0f);
    // Channels last, padded by floor((size-1)/2) before and ceil((size-1)/2) after, summed in windows.
    at::Tensor sq = (x * x).transpose(1, -1);
    sq = at::constant_pad_nd(sq, {(size - 1) / 2, size / 2});
    at::Tensor sum = sq.unfold(-1, size, 1).sum(-1).transpose(1, -1);
    return {x / at::pow(bias + alpha / size * sum, beta)};
  };
  d.flops = [](const Node& n, const Sizes& in, const Sizes&) -> int64_t {
    return in.empty() ? 0 : (n.attr_int("size", 1) + 4) * numel(in[0]);
  };
  d.traits.opaque_channels = true;
  return d;
}

// ---- Pooling -------------------------------------------------------------------------------

bool torch_can_pad(const ops::Window& w) {
  if (!w.symmetric()) return false;
  for (size_t i = 0; i < w.kernel.size(); ++i)
    if (w.pads_begin[i] > w.kernel[i] / 2) return false;
  return true;
}

at::Scalar lowest_value(const at::Tensor& x) {
  switch (x.scalar_type()) {
    case at::kByte: return 0;
    case at::kChar: return std::numeric_limits<int8_t>::lowest();
    case at::kShort: return std::numeric_limits<int16_t>::lowest();
    case at::kInt: return std::numeric_limits<int32_t>::lowest();
    case at::kLong: return std::numeric_limits<int64_t>::lowest();
    default: return -std::numeric_limits<double>::infinity();
  }
}

std::vector<int64_t> pool_kernel(const Node& n, const at::Tensor& x) {
  PARE_CHECK(x.dim() >= 3 && x.dim() <= 5, n.describe(),
             ": pooling needs X [N, C, spatial...] with 1 to 3 spatial dims, got ", x.sizes());
  PARE_CHECK(n.has_attr("kernel_shape"), n.describe(), ": kernel_shape is required");
  auto k = n.attr_ints("kernel_shape");
  PARE_CHECK(static_cast<int64_t>(k.size()) == x.dim() - 2, n.describe(), ": kernel_shape has ",
             k.size(), " values but X has ", x.dim() - 2, " spatial dims");
  return k;
}

Tensors max_pool_forward(const Node& n, const Tensors& in, const RunContext& ctx) {
  const at::Tensor& x = in.at(0);
  if (!x.is_floating_point() && x.scalar_type() != at::kBool) {
    // libtorch pools floating point only: integers go through a float type that holds them exactly.
    Tensors cast = in;
    cast[0] = x.to(x.element_size() <= 2 ? at::kFloat : at::kDouble);
    Tensors out = max_pool_forward(n, cast, ctx);
    out[0] = out[0].to(x.scalar_type());
    return out;
  }
  const auto kernel = pool_kernel(n, x);
  const ops::Window w = ops::resolve_window(n, spatial_sizes(x), kernel);
  const bool ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  const int64_t ns = x.dim() - 2;
  at::Tensor src = x;
  std::vector<int64_t> padding = w.pads_begin;
  const bool native_pad = torch_can_pad(w);
  if (!native_pad) {
    src = ops::pad_spatial(x, w.pads_begin, w.pads_end, lowest_value(x));
    padding.assign(kernel.size(), 0);
  }
  if (!wants_output(n, 1)) {
    at::Tensor y;
    if (ns == 1) y = at::max_pool1d(src, kernel, w.strides, padding, w.dilations, ceil_mode);
    else if (ns == 2) y = at::max_pool2d(src, kernel, w.strides, padding, w.dilations, ceil_mode);
    else y = at::max_pool3d(src, kernel, w.strides, padding, w.dilations, ceil_mode);
    return fit_outputs(n, {y});
  }
  PARE_CHECK(native_pad && n.attr_int("storage_order", 0) == 0, n.describe(),
             ": MaxPool Indices output needs symmetric pads of at most half the kernel and "
             "storage_order 0");
  at::Tensor y, idx;
  if (ns == 1)
    std::tie(y, idx) = at::max_pool1d_with_indices(src, kernel, w.strides, padding, w.dilations, ceil_mode);
  else if (ns == 2)
    std::tie(y, idx) = at::max_pool2d_with_indices(src, kernel, w.strides, padding, w.dilations, ceil_mode);
  else
    std::tie(y, idx) = at::max_pool3d_with_indices(src, kernel, w.strides, padding, w.dilations, ceil_mode);
  // libtorch indexes within one (n, c) plane; ONNX flattens the whole tensor.
  std::vector<int64_t> offset_shape = {x.size(0), x.size(1)};
  offset_shape.resize(static_cast<size_t>(x.dim()), 1);
  const int64_t plane = numel(spatial_sizes(x));
  at::Tensor offset = at::arange(x.size(0) * x.size(1), idx.options()).reshape(offset_shape) * plane;
  return fit_outputs(n, {y, idx + offset});
}

at::Tensor avg_pool_nd(const at::Tensor& x, const std::vector<int64_t>& k,
                       const std::vector<int64_t>& s, const std::vector<int64_t>& p, bool ceil_mode,
                       bool count_include_pad) {
  switch (x.dim()) {
    case 3: return at::avg_pool1d(x, k, s, p, ceil_mode, count_include_pad);
    case 4: return at::avg_pool2d(x, k, s, p, ceil_mode, count_include_pad);
    default: return at::avg_pool3d(x, k, s, p, ceil_mode, count_include_pad);
  }
}

Tensors avg_pool_forward(const Node& n, const Tensors& in, const RunContext&) {
  const at::Tensor& x = in.at(0);
  const auto kernel = pool_kernel(n, x);
  const ops::Window w = ops::resolve_window(n, spatial_sizes(x), kernel);
  for (int64_t d : w.dilations)
    PARE_CHECK(d == 1, n.describe(), ": AveragePool with dilations other than 1 is not supported");
  const bool ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  const bool include_pad = n.attr_int("count_include_pad", 0) != 0;
  if (torch_can_pad(w)) return {avg_pool_nd(x, kernel, w.strides, w.pads_begin, ceil_mode, include_pad)};
  // Pads libtorch cannot take: pad with zeros, average over everything, and when the pads must
  // not count divide by the average of a mask of real elements instead.
  const std::vector<int64_t> zero(kernel.size(), 0);
  at::Tensor y = avg_pool_nd(ops::pad_spatial(x, w.pads_begin, w.pads_end, 0), kernel, w.strides,
                             zero, ceil_mode, true);
  if (include_pad) return {y};
  std::vector<int64_t> mask_shape = {1, 1};
  for (int64_t s : spatial_sizes(x)) mask_shape.push_back(s);
  at::Tensor mask = ops::pad_spatial(at::ones(mask_shape, x.options().requires_grad(false)),
                                     w.pads_begin, w.pads_end, 0);
  return {y / avg_pool_nd(mask, kernel, w.strides, zero, ceil_mode, true)};
}

int64_t pool_flops(const Node& n, const Sizes&, const Sizes& out) {
  if (out.empty()) return 0;
  return numel(out[0]) * numel(n.attr_ints("kernel_shape"));
}

OpDef max_pool_op() {
  OpDef d = ops::op_def("MaxPool", 1, 1,
                        "max over sliding windows (pads count as -inf); optional flat Indices output");
  d.traits.spatial_pool = true;
  d.outputs_max = 2;
  d.attrs = {spec_string("auto_pad"), spec_int("ceil_mode"), spec_ints("dilations"),
             {"kernel_shape", AttrKind::kInts, true}, spec_ints("pads"),
             spec_int("storage_order"), spec_ints("strides")};
  d.forward = max_pool_forward;
  d.flops = pool_flops;
  return d;
}

OpDef average_pool_op() {
  OpDef d = ops::op_def("AveragePool", 1, 1,
                        "mean over sliding windows; pads count only with count_include_pad=1");
  d.traits.spatial_pool = true;
  // dilations is opset 19; declared so such models load, and refused unless all ones.
  d.attrs = {spec_string("auto_pad"), spec_int("ceil_mode"), spec_int("count_include_pad"),
             spec_ints("dilations"), {"kernel_shape", AttrKind::kInts, true}, spec_ints("pads"),
             spec_ints("strides")};
  d.forward = avg_pool_forward;
  d.flops = pool_flops;
  return d;
}

// GlobalAveragePool / GlobalMaxPool: one reduction over every spatial dim, kept as size 1.
OpDef global_pool_op(const char* name, at::Tensor (*reduce)(const at::Tensor&, at::IntArrayRef),
                     const char* doc) {
  OpDef d = ops::op_def(name, 1, 1, doc);
  d.traits.spatial_pool = true;
  d.forward = [reduce](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    PARE_CHECK(x.dim() >= 3, n.describe(), ": ", n.op_type, " needs X [N, C, spatial...], got ",
               x.sizes());
    std::vector<int64_t> dims;
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    return {reduce(x, dims)};
  };
  d.flops = flops_per_input(1);
  return d;
}

// ---- Flatten, Dropout -----------------------------------------------------------------------

OpDef flatten_op() {
  OpDef d = ops::op_def("Flatten", 1, 1,
                        "reshapes to 2-D [prod(dims[:axis]), prod(dims[axis:])] (axis default 1)");
  d.attrs = {spec_int("axis")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    int64_t axis = n.attr_int("axis", 1);
    PARE_CHECK(axis >= -x.dim() && axis <= x.dim(), n.describe(), ": Flatten axis must be in [",
               -x.dim(), ", ", x.dim(), "], got ", axis);
    if (axis < 0) axis += x.dim();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < x.dim(); ++d) (d < axis ? outer : inner) *= x.size(d);
    return {x.reshape({outer, inner})};
  };
  d.flops = flops_per_output(0);
  return d;
}

OpDef dropout_op() {
  OpDef d = ops::op_def("Dropout", 1, 3,
                        "zeroes elements with probability ratio and scales the rest by 1/(1-ratio) when "
                        "training; identity otherwise");
  d.traits.elementwise = OpTraits::Elementwise::kUnary;
  d.outputs_max = 2;
  d.attrs = {spec_int("seed"), spec_float("ratio")};  // ratio: attribute before opset 12
  d.forward = [](const Node& n, const Tensors& in, const RunContext& ctx) -> Tensors {
    const at::Tensor& x = in.at(0);
    double ratio = n.attr_float("ratio", 0.5f);
    if (has_input(in, 1)) ratio = in[1].item<double>();
    PARE_CHECK(ratio >= 0.0 && ratio < 1.0, n.describe(), ": Dropout ratio must be in [0, 1), got ",
               ratio);
    // The graph's training_mode input, when given, decides; otherwise the run context does.
    const bool training = has_input(in, 2) ? in[2].ne(0).item<bool>() : ctx.training;
    if (!training || ratio == 0.0) {
      at::Tensor mask;
      if (wants_output(n, 1)) mask = at::ones(x.sizes(), x.options().dtype(at::kBool));
      return fit_outputs(n, {x, mask});
    }
    // Randomness comes from the global generator, which --seed sets; `seed` is ignored.
    auto [y, mask] = at::native_dropout(x, ratio, true);
    return fit_outputs(n, {y, mask});
  };
  d.flops = flops_per_output(0);
  return d;
}

// ---- Reduce* -------------------------------------------------------------------------------

using ReduceFn = std::function<at::Tensor(const at::Tensor&, const std::vector<int64_t>&, bool)>;

OpDef reduce_op(const std::string& name, ReduceFn fn, std::string doc) {
  // Axes as an input (the second): ReduceSum since opset 13, all Reduce* since opset 18.
  OpDef d = ops::op_def(name, 1, 2, std::move(doc));
  d.traits.reduction = OpTraits::Reduction::kAxes;
  d.attrs = {spec_ints("axes"), spec_int("keepdims"), spec_int("noop_with_empty_axes")};
  d.forward = [fn](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const bool keep = n.attr_int("keepdims", 1) != 0;
    std::vector<int64_t> axes = has_input(in, 1) ? to_int_vector(in[1]) : n.attr_ints("axes");
    if (axes.empty()) {
      if (n.attr_int("noop_with_empty_axes", 0) != 0) return {x};
      for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
    } else {
      for (auto& a : axes) a = ops::normalize_axis(a, x.dim(), n, "axes");
      std::sort(axes.begin(), axes.end());
      axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    }
    return {fn(x, axes, keep)};
  };
  d.flops = flops_per_input(1);
  return d;
}

at::Tensor reduce_mean(const at::Tensor& x, const std::vector<int64_t>& dims, bool keep) {
  if (x.is_floating_point()) return at::mean(x, dims, keep);
  return at::mean(x.to(at::kDouble), dims, keep).to(x.scalar_type());
}

at::Tensor reduce_sum(const at::Tensor& x, const std::vector<int64_t>& dims, bool keep) {
  return at::sum(x, dims, keep, x.scalar_type());  // ONNX keeps the element type
}

at::Tensor reduce_prod(const at::Tensor& x, const std::vector<int64_t>& dims, bool keep) {
  at::Tensor y = x;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) y = at::prod(y, *it, keep, x.scalar_type());
  return y;
}

void register_reduce_ops(OpRegistry& reg) {
  reg.add(reduce_op("ReduceMean", reduce_mean, "mean over `axes` (all when empty)"));
  reg.add(reduce_op("ReduceSum", reduce_sum, "sum over `axes` (all when empty)"));
  reg.add(reduce_op("ReduceMax",
                    [](const at::Tensor& x, const std::vector<int64_t>& d, bool k) { return at::amax(x, d, k); },
                    "maximum over `axes` (all when empty)"));
  reg.add(reduce_op("ReduceMin",
                    [](const at::Tensor& x, const std::vector<int64_t>& d, bool k) { return at::amin(x, d, k); },
                    "minimum over `axes` (all when empty)"));
  reg.add(reduce_op("ReduceProd", reduce_prod, "product over `axes` (all when empty)"));
  reg.add(reduce_op("ReduceSumSquare",
                    [](const at::Tensor& x, const std::vector<int64_t>& d, bool k) {
                      return reduce_sum(x * x, d, k);
                    },
                    "sum of squares over `axes` (all when empty)"));
  reg.add(reduce_op("ReduceL1",
                    [](const at::Tensor& x, const std::vector<int64_t>& d, bool k) {
                      return reduce_sum(at::abs(x), d, k);
                    },
                    "sum of absolute values over `axes` (all when empty)"));
  reg.add(reduce_op("ReduceL2",
                    [](const at::Tensor& x, const std::vector<int64_t>& d, bool k) {
                      return at::sqrt(reduce_sum(x * x, d, k));
                    },
                    "Euclidean norm over `axes` (all when empty)"));
  reg.add(reduce_op("ReduceLogSum",
                    [](const at::Tensor& x, const std::vector<int64_t>& d, bool k) {
                      return at::log(reduce_sum(x, d, k));
                    },
                    "log(sum(x)) over `axes` (all when empty)"));
  reg.add(reduce_op("ReduceLogSumExp",
                    [](const at::Tensor& x, const std::vector<int64_t>& d, bool k) {
                      return at::logsumexp(x, d, k);
                    },
                    "log(sum(exp(x))) over `axes` (all when empty)"));
}

}  // namespace

void register_nn_ops(OpRegistry& reg) {
  reg.add(conv_op());
  reg.add(conv_transpose_op());
  reg.add(gemm_op());
  reg.add(matmul_op());
  reg.add(batch_normalization_op());
  reg.add(layer_normalization_op());
  reg.add(instance_normalization_op());
  reg.add(mean_variance_normalization_op());
  reg.add(lrn_op());
  reg.add(einsum_op());
  reg.add(det_op());
  reg.add(max_pool_op());
  reg.add(average_pool_op());
  reg.add(global_pool_op("GlobalAveragePool",
                         [](const at::Tensor& x, at::IntArrayRef dims) { return x.mean(dims, true); },
                         "mean over all spatial dims, keeping them as size 1"));
  reg.add(global_pool_op("GlobalMaxPool",
                         [](const at::Tensor& x, at::IntArrayRef dims) { return at::amax(x, dims, true); },
                         "max over all spatial dims, keeping them as size 1"));
  reg.add(flatten_op());
  reg.add(dropout_op());
  register_reduce_ops(reg);
}

}  // namespace pare::core
