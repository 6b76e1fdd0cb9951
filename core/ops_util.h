// Private helpers shared by core/ops_*.cpp (and core/summary.cpp): attribute specs, axis
// normalisation, small int64 tensors, FLOP counters, 4-bit unpacking and ONNX padding resolution.
// Not part of the public API.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/graph.h"
#include "core/op_registry.h"

namespace pare::core {

// Op families added after op_registry.h declared the first five (they are private to core/ops_*.cpp
// and op_registry.cpp, which calls them; declaring them here spares every user of op_registry.h a
// rebuild).
void register_index_ops(OpRegistry& reg);   // core/ops_index.cpp
void register_resize_ops(OpRegistry& reg);  // core/ops_resize.cpp
void register_rnn_ops(OpRegistry& reg);     // core/ops_rnn.cpp
void register_transformer_ops(OpRegistry& reg);  // core/ops_transformer.cpp

}  // namespace pare::core

namespace pare::core::ops {

inline AttrSpec spec_int(std::string n) { return {std::move(n), AttrKind::kInt, false}; }
inline AttrSpec spec_float(std::string n) { return {std::move(n), AttrKind::kFloat, false}; }
inline AttrSpec spec_string(std::string n) { return {std::move(n), AttrKind::kString, false}; }
inline AttrSpec spec_tensor(std::string n) { return {std::move(n), AttrKind::kTensor, false}; }
inline AttrSpec spec_ints(std::string n) { return {std::move(n), AttrKind::kInts, false}; }
inline AttrSpec spec_floats(std::string n) { return {std::move(n), AttrKind::kFloats, false}; }
inline AttrSpec spec_strings(std::string n) { return {std::move(n), AttrKind::kStrings, false}; }

/// An op named `name` taking `inputs_min` to `inputs_max` inputs (-1: any number), with its one-line
/// doc; the caller adds attributes, forward, FLOPs and traits.
inline OpDef op_def(std::string name, int inputs_min, int inputs_max, std::string doc) {
  OpDef d;
  d.name = std::move(name);
  d.inputs_min = inputs_min;
  d.inputs_max = inputs_max;
  d.doc = std::move(doc);
  return d;
}

/// True when input `i` was given (an omitted optional input is undefined or missing).
inline bool has_input(const std::vector<at::Tensor>& in, size_t i) {
  return i < in.size() && in[i].defined();
}

/// True when the node asks for output `i` (it exists and is not "").
inline bool wants_output(const Node& n, size_t i) { return i < n.outputs.size() && !n.outputs[i].empty(); }

/// Product of a shape's dims (1 for a scalar).
inline int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

/// Maps an ONNX axis in [-rank, rank-1] to [0, rank-1]; throws InputError naming the node.
inline int64_t normalize_axis(int64_t axis, int64_t rank, const Node& node, const char* what = "axis") {
  PARE_CHECK(axis >= -rank && axis < rank, node.describe(), ": ", what, " must be in [", -rank, ", ", rank - 1, "], got ", axis);
  return axis < 0 ? axis + rank : axis;
}

/// A 1-D int64 CPU tensor holding `v` (the form ONNX shape values take).
inline at::Tensor int64_tensor(const std::vector<int64_t>& v) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kLong);
  auto* p = t.data_ptr<int64_t>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
  return t;
}

/// A 0-d int64 CPU tensor.
inline at::Tensor int64_scalar(int64_t v) { return at::scalar_tensor(v, at::kLong); }

/// FlopsFn counting `k` FLOPs per element of output 0.
inline FlopsFn flops_per_output(int64_t k = 1) {
  return [k](const Node&, const std::vector<std::vector<int64_t>>&,
             const std::vector<std::vector<int64_t>>& out) -> int64_t {
    return out.empty() ? 0 : k * numel(out[0]);
  };
}

/// FlopsFn counting `k` FLOPs per element of input 0 (reductions).
inline FlopsFn flops_per_input(int64_t k = 1) {
  return [k](const Node&, const std::vector<std::vector<int64_t>>& in,
             const std::vector<std::vector<int64_t>>&) -> int64_t {
    return in.empty() ? 0 : k * numel(in[0]);
  };
}

/// For each (time step, batch entry) of sequences of `steps` steps with lengths `lens` [batch]
/// (int64): the step to read so that each sequence's first lens[b] steps come reversed and the rest
/// stay ([steps, batch], on lens' device; ReverseSequence and the reverse direction of LSTM/GRU/RNN).
inline at::Tensor reversed_steps(int64_t steps, const at::Tensor& lens) {
  at::Tensor t = at::arange(steps, lens.options()).unsqueeze(1);
  at::Tensor l = lens.unsqueeze(0);
  return at::where(t.lt(l), l - 1 - t, t);
}

/// An op that moves or makes data, with no arithmetic: 0 FLOPs (the tensor and index families).
inline OpDef data_op(std::string name, int inputs_min, int inputs_max, std::string doc) {
  OpDef d = op_def(std::move(name), inputs_min, inputs_max, std::move(doc));
  d.flops = flops_per_output(0);
  return d;
}

/// Unpacks 4-bit values stored two per byte, low nibble first: [..., n] uint8 -> [..., 2n] float
/// (MatMulNBits' weights and zero points).
inline at::Tensor unpack_nibbles(const at::Tensor& packed) {
  at::Tensor b = packed.to(at::kInt);
  at::Tensor low = at::bitwise_and(b, 15), high = at::bitwise_right_shift(b, 4);
  std::vector<int64_t> shape = packed.sizes().vec();
  shape.back() *= 2;
  return at::stack({low, high}, -1).reshape(shape).to(at::kFloat);
}

/// Spatial geometry of a Conv or pooling node after auto_pad is resolved.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads_begin, pads_end;

  bool symmetric() const { return pads_begin == pads_end; }
  bool any_pad() const {
    for (size_t i = 0; i < pads_begin.size(); ++i)
      if (pads_begin[i] != 0 || pads_end[i] != 0) return true;
    return false;
  }
};

/// Reads strides/dilations/pads/auto_pad of `node` for spatial sizes `in` and a kernel `kernel`
/// (ONNX pads are [x1_begin, x2_begin, ..., x1_end, x2_end, ...]).
inline Window resolve_window(const Node& node, const std::vector<int64_t>& in,
                             const std::vector<int64_t>& kernel) {
  const size_t n = in.size();
  Window w;
  w.kernel = kernel;
  PARE_CHECK(kernel.size() == n, node.describe(), ": kernel has ", kernel.size(),
             " spatial dims but the input has ", n);
  w.strides = node.attr_ints("strides", std::vector<int64_t>(n, 1));
  w.dilations = node.attr_ints("dilations", std::vector<int64_t>(n, 1));
  PARE_CHECK(w.strides.size() == n && w.dilations.size() == n, node.describe(),
             ": strides and dilations need one value per spatial dim (", n, ")");
  w.pads_begin.assign(n, 0);
  w.pads_end.assign(n, 0);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    auto pads = node.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
    PARE_CHECK(pads.size() == 2 * n, node.describe(), ": pads needs ", 2 * n, " values, got ",
               pads.size());
    for (size_t i = 0; i < n; ++i) {
      w.pads_begin[i] = pads[i];
      w.pads_end[i] = pads[n + i];
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      const int64_t out = (in[i] + w.strides[i] - 1) / w.strides[i];
      const int64_t eff_k = (kernel[i] - 1) * w.dilations[i] + 1;
      const int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[i] + eff_k - in[i]);
      const int64_t small = total / 2;
      w.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.pads_end[i] = total - w.pads_begin[i];
    }
  } else {
    PARE_CHECK(auto_pad == "VALID", node.describe(),
               ": auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '", auto_pad, "'");
  }
  return w;
}

/// Pads the trailing spatial dims of `x` explicitly (begin/end per spatial dim) with `value`.
inline at::Tensor pad_spatial(const at::Tensor& x, const std::vector<int64_t>& begin,
                              const std::vector<int64_t>& end, const at::Scalar& value) {
  std::vector<int64_t> p;  // constant_pad_nd wants the last dim first
  for (size_t i = begin.size(); i-- > 0;) {
    p.push_back(begin[i]);
    p.push_back(end[i]);
  }
  return at::constant_pad_nd(x, p, value);
}

}  // namespace pare::core::ops
