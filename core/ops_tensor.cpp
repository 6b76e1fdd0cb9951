// Core ops, tensor family: shape computation and data movement (Shape, Gather, Reshape, Slice,
// Concat, Squeeze/Unsqueeze, Constant, Expand, Split, ...). Shape-like inputs are read with
// to_int_vector wherever they live; shape outputs are CPU int64 tensors as ONNX requires.
#include <algorithm>
#include <limits>

#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::flops_per_output;
using ops::has_input;
using ops::int64_tensor;
using ops::spec_float;
using ops::spec_floats;
using ops::spec_int;
using ops::spec_ints;
using ops::spec_string;
using ops::spec_strings;
using ops::spec_tensor;
using Tensors = std::vector<at::Tensor>;

/// Axes from input `i` (opset 13+) or else from the `axes` attribute (older opsets).
std::vector<int64_t> axes_from(const Node& n, const Tensors& in, size_t i) {
  if (has_input(in, i)) return to_int_vector(in[i]);
  return n.attr_ints("axes");
}


at::Tensor slice_axis(const at::Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  const int64_t dim = x.size(axis);
  if (step > 0) {
    // ONNX clamps to [0, dim] after adding dim to negative values (INT64_MAX ends included).
    start = start < 0 ? start + dim : start;
    end = end < 0 ? end + dim : end;
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return x.slice(axis, start, std::max(start, end), step);
  }
  // Negative steps: start clamps to [0, dim-1], end to [-1, dim-1]; libtorch slices only forward,
  // so gather the indices.
  start = start < 0 ? start + dim : start;
  end = end < 0 ? end + dim : end;
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  if (dim == 0 || start <= end) return x.slice(axis, 0, 0);
  at::Tensor idx = at::arange(start, end, step, at::TensorOptions().dtype(at::kLong).device(x.device()));
  return x.index_select(axis, idx);
}

at::Tensor constant_value(const Node& n) {
  if (n.has_attr("value")) return n.attr_tensor("value");
  if (n.has_attr("value_float"))
    return at::scalar_tensor(static_cast<double>(n.attr_float("value_float", 0.0f)), at::kFloat);
  if (n.has_attr("value_floats")) {
    auto v = n.attr_floats("value_floats");
    return at::tensor(at::ArrayRef<float>(v), at::kFloat).reshape({static_cast<int64_t>(v.size())});
  }
  if (n.has_attr("value_int")) return ops::int64_scalar(n.attr_int("value_int", 0));
  if (n.has_attr("value_ints")) return int64_tensor(n.attr_ints("value_ints"));
  PARE_CHECK(false, n.describe(), ": Constant needs one of value, value_float, value_floats, "
             "value_int, value_ints (string values are not supported)");
  return {};
}

OpDef shape_op() {
  OpDef d = ops::data_op("Shape", 1, 1, "the input's shape as int64 [start:end] (opset 15 start/end)");
  d.attrs = {spec_int("end"), spec_int("start")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const auto sizes = in.at(0).sizes().vec();
    const int64_t rank = static_cast<int64_t>(sizes.size());
    auto clampi = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
    const int64_t start = clampi(n.attr_int("start", 0));
    const int64_t end = clampi(n.attr_int("end", rank));
    return {int64_tensor(std::vector<int64_t>(sizes.begin() + start,
                                              sizes.begin() + std::max(start, end)))};
  };
  return d;
}

OpDef size_op() {
  OpDef d = ops::data_op("Size", 1, 1, "the input's element count as an int64 scalar");
  d.forward = [](const Node&, const Tensors& in, const RunContext&) -> Tensors {
    return {ops::int64_scalar(in.at(0).numel())};
  };
  return d;
}

OpDef gather_op() {
  OpDef d = ops::data_op("Gather", 2, 2,
                 "takes slices of data along `axis` at `indices` (negative indices count from "
                 "the end); out = data[:axis] + indices.shape + data[axis+1:]");
  d.attrs = {spec_int("axis")};
  d.weights = {WeightInput::fixed(0, WeightRole::kTable)};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& data = in.at(0);
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", 0), data.dim(), n);
    at::Tensor idx = in.at(1).to(data.device(), at::kLong);
    idx = at::where(idx < 0, idx + data.size(axis), idx);
    std::vector<int64_t> out_shape(data.sizes().begin(), data.sizes().begin() + axis);
    for (int64_t s : idx.sizes()) out_shape.push_back(s);
    out_shape.insert(out_shape.end(), data.sizes().begin() + axis + 1, data.sizes().end());
    return {data.index_select(axis, idx.reshape({-1})).reshape(out_shape)};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef gather_elements_op() {
  OpDef d = ops::data_op("GatherElements", 2, 2,
                 "out[i][j] = data[index[i][j]][j] along `axis` (negative indices allowed)");
  d.attrs = {spec_int("axis")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& data = in.at(0);
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", 0), data.dim(), n);
    at::Tensor idx = in.at(1).to(data.device(), at::kLong);
    idx = at::where(idx < 0, idx + data.size(axis), idx);
    return {at::gather(data, axis, idx)};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef reshape_op() {
  OpDef d = ops::data_op("Reshape", 2, 2,
                 "reshapes to `shape`: 0 copies the input dim (unless allowzero=1), -1 infers");
  d.attrs = {spec_int("allowzero")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    std::vector<int64_t> shape = to_int_vector(in.at(1));
    const bool allowzero = n.attr_int("allowzero", 0) != 0;
    int infer = 0;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !allowzero) {
        PARE_CHECK(static_cast<int64_t>(i) < x.dim(), n.describe(), ": Reshape shape[", i,
                   "] = 0 copies an input dim, but the input ", x.sizes(), " has rank ", x.dim());
        shape[i] = x.size(static_cast<int64_t>(i));
      }
      if (shape[i] == -1) ++infer;
      PARE_CHECK(shape[i] >= -1, n.describe(), ": Reshape dims must be >= -1, got ", shape[i]);
    }
    PARE_CHECK(infer <= 1, n.describe(), ": Reshape shape may hold at most one -1");
    return {x.reshape(shape)};
  };
  return d;
}

OpDef transpose_op() {
  OpDef d = ops::data_op("Transpose", 1, 1, "permutes the dims by `perm` (default: reversed)");
  d.attrs = {spec_ints("perm")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    std::vector<int64_t> perm = n.attr_ints("perm");
    if (perm.empty())
      for (int64_t d = x.dim() - 1; d >= 0; --d) perm.push_back(d);
    PARE_CHECK(static_cast<int64_t>(perm.size()) == x.dim(), n.describe(), ": Transpose perm has ",
               perm.size(), " entries but the input has rank ", x.dim());
    return {x.permute(perm)};
  };
  return d;
}

OpDef slice_op() {
  OpDef d = ops::data_op("Slice", 3, 5,
                 "data[starts:ends:steps] along `axes` (inputs; negative steps walk backwards)");
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    at::Tensor x = in.at(0);
    const auto starts = to_int_vector(in.at(1));
    const auto ends = to_int_vector(in.at(2));
    std::vector<int64_t> axes, steps;
    if (has_input(in, 3)) axes = to_int_vector(in[3]);
    else
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (has_input(in, 4)) steps = to_int_vector(in[4]);
    else steps.assign(starts.size(), 1);
    PARE_CHECK(ends.size() == starts.size() && axes.size() == starts.size() &&
                   steps.size() == starts.size(),
               n.describe(), ": Slice starts, ends, axes and steps must have the same length");
    for (size_t i = 0; i < starts.size(); ++i) {
      PARE_CHECK(steps[i] != 0, n.describe(), ": Slice steps must not be 0");
      const int64_t axis = ops::normalize_axis(axes[i], x.dim(), n, "axes");
      x = slice_axis(x, axis, starts[i], ends[i], steps[i]);
    }
    return {x};
  };
  d.traits.opaque_channels = true;
  return d;
}

// AllReduce or AllGather, the collectives of a tensor-parallel shard (com.microsoft, as ONNX
// Runtime's distributed contrib ops): run through the RunContext's collective, which dist/ sets.
OpDef collective_op(const std::string& name) {
  OpDef d = ops::data_op(name, 1, 1,
                 name == "AllReduce"
                     ? "com.microsoft: the sum of the input over the ranks of a tensor-parallel group"
                     : "com.microsoft: the ranks' inputs joined along `axis` in rank order");
  d.attrs = {spec_int("group_size"), spec_int("axis")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext& ctx) -> Tensors {
    PARE_CHECK(ctx.collective, n.describe(), " belongs to a tensor-parallel shard: it runs only with the "
               "other ranks of its group, started by pare launch or torchrun (dist::ShardedModel)");
    return {ctx.collective(n, in.at(0))};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef concat_op() {
  OpDef d = ops::data_op("Concat", 1, -1, "joins the inputs along `axis`");
  d.attrs = {{"axis", AttrKind::kInt, true}};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    PARE_CHECK(!in.empty(), n.describe(), ": Concat needs at least one input");
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", 0), in[0].dim(), n);
    return {at::cat(in, axis)};
  };
  return d;
}

OpDef unsqueeze_op() {
  OpDef d = ops::data_op("Unsqueeze", 1, 2,
                 "inserts size-1 dims at `axes` of the output (input since opset 13)");
  d.attrs = {spec_ints("axes")};  // opset < 13
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    at::Tensor x = in.at(0);
    std::vector<int64_t> axes = axes_from(n, in, 1);
    const int64_t out_rank = x.dim() + static_cast<int64_t>(axes.size());
    for (auto& a : axes) a = ops::normalize_axis(a, out_rank, n, "axes");
    std::sort(axes.begin(), axes.end());
    PARE_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), n.describe(),
               ": Unsqueeze axes must not repeat");
    for (int64_t a : axes) x = x.unsqueeze(a);
    return {x};
  };
  return d;
}

OpDef squeeze_op() {
  OpDef d = ops::data_op("Squeeze", 1, 2,
                 "removes the size-1 dims at `axes` (input since opset 13), or all of them");
  d.attrs = {spec_ints("axes")};  // opset < 13
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    at::Tensor x = in.at(0);
    std::vector<int64_t> axes = axes_from(n, in, 1);
    if (axes.empty()) {
      for (int64_t d = 0; d < x.dim(); ++d)
        if (x.size(d) == 1) axes.push_back(d);
    }
    for (auto& a : axes) {
      a = ops::normalize_axis(a, x.dim(), n, "axes");
      PARE_CHECK(x.size(a) == 1, n.describe(), ": Squeeze axis ", a, " has size ", x.size(a),
                 ", not 1");
    }
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    for (auto it = axes.rbegin(); it != axes.rend(); ++it) x = x.squeeze(*it);
    return {x};
  };
  return d;
}

OpDef constant_op() {
  OpDef d = ops::data_op("Constant", 0, 0, "a constant tensor from one of its value* attributes");
  d.attrs = {spec_tensor("value"),       spec_float("value_float"), spec_floats("value_floats"),
             spec_int("value_int"),      spec_ints("value_ints"),   spec_string("value_string"),
             spec_strings("value_strings")};
  d.forward = [](const Node& n, const Tensors&, const RunContext&) -> Tensors {
    // A fresh tensor object over the attribute's storage: autograd metadata set on the output
    // never reaches the attribute.
    return {constant_value(n).detach()};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef constant_of_shape_op() {
  OpDef d = ops::data_op("ConstantOfShape", 1, 1,
                 "a tensor of the given shape filled with `value` (default float 0)");
  d.attrs = {spec_tensor("value")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const std::vector<int64_t> shape = to_int_vector(in.at(0));
    at::Tensor value = n.has_attr("value") ? n.attr_tensor("value") : at::zeros({1}, at::kFloat);
    PARE_CHECK(value.numel() == 1, n.describe(), ": ConstantOfShape value must hold one element, "
               "got ", value.numel());
    return {at::full(shape, value.reshape({}).item(), value.options().device(at::kCPU))};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef expand_op() {
  OpDef d = ops::data_op("Expand", 2, 2,
                 "broadcasts the input against `shape` (numpy rules, both ways)");
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const std::vector<int64_t> shape = to_int_vector(in.at(1));
    std::vector<int64_t> out;
    try {
      out = at::infer_size(x.sizes(), shape);
    } catch (const c10::Error&) {
      PARE_CHECK(false, n.describe(), ": Expand cannot broadcast ", x.sizes(), " to ",
                 at::IntArrayRef(shape));
    }
    return {x.expand(out)};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef split_op() {
  OpDef d = ops::data_op("Split", 1, 2,
                 "splits along `axis` by the `split` sizes (input since opset 13) or into equal "
                 "parts, one per output");
  d.outputs_max = -1;
  d.attrs = {spec_int("axis"), spec_int("num_outputs"), spec_ints("split")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", 0), x.dim(), n);
    const int64_t dim = x.size(axis);
    std::vector<int64_t> sizes = has_input(in, 1) ? to_int_vector(in[1]) : n.attr_ints("split");
    if (sizes.empty()) {
      const int64_t parts =
          n.attr_int("num_outputs", static_cast<int64_t>(std::max<size_t>(1, n.outputs.size())));
      // Equal parts; opset 18 lets the last one be smaller.
      const int64_t chunk = (dim + parts - 1) / parts;
      for (int64_t left = dim, i = 0; i < parts; ++i, left -= chunk)
        sizes.push_back(std::max<int64_t>(0, std::min(chunk, left)));
    }
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    PARE_CHECK(total == dim, n.describe(), ": Split sizes add up to ", total, " but axis ", axis,
               " has size ", dim);
    return at::split_with_sizes(x, sizes, axis);
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef range_op() {
  OpDef d = ops::data_op("Range", 3, 3, "start, start + delta, ... up to (excluding) limit");
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& start = in.at(0);
    const double s = start.item<double>(), l = in.at(1).item<double>(), dl = in.at(2).item<double>();
    PARE_CHECK(dl != 0.0, n.describe(), ": Range delta must not be 0");
    const int64_t count = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((l - s) / dl)));
    if (!start.is_floating_point()) {
      const int64_t si = start.item<int64_t>(), di = in[2].item<int64_t>();
      return {(at::arange(count, at::kLong) * di + si).to(start.scalar_type())};
    }
    return {(at::arange(count, at::kDouble) * dl + s).to(start.scalar_type())};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef tile_op() {
  OpDef d = ops::data_op("Tile", 2, 2, "repeats the input `repeats[i]` times along each dim i");
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const std::vector<int64_t> repeats = to_int_vector(in.at(1));
    PARE_CHECK(static_cast<int64_t>(repeats.size()) == x.dim(), n.describe(), ": Tile repeats has ",
               repeats.size(), " entries but the input has rank ", x.dim());
    if (x.dim() == 0) return {x};
    return {x.repeat(repeats)};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef pad_op() {
  OpDef d = ops::data_op("Pad", 1, 4,
                 "pads by `pads` [x1_begin, ..., x1_end, ...] (input since opset 11) in mode "
                 "constant, reflect or edge");
  d.attrs = {spec_string("mode"), spec_ints("pads"), spec_float("value")};  // pads/value: opset < 11
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    std::vector<int64_t> pads = has_input(in, 1) ? to_int_vector(in[1]) : n.attr_ints("pads");
    std::vector<int64_t> axes;
    if (has_input(in, 3)) {
      for (int64_t a : to_int_vector(in[3])) axes.push_back(ops::normalize_axis(a, x.dim(), n, "axes"));
    } else {
      for (int64_t a = 0; a < x.dim(); ++a) axes.push_back(a);
    }
    const size_t na = axes.size();
    PARE_CHECK(pads.size() == 2 * na, n.describe(), ": Pad needs ", 2 * na, " pads, got ",
               pads.size());
    std::vector<int64_t> begin(static_cast<size_t>(x.dim()), 0), end(begin);
    for (size_t i = 0; i < na; ++i) {
      begin[static_cast<size_t>(axes[i])] = pads[i];
      end[static_cast<size_t>(axes[i])] = pads[na + i];
    }
    // at::pad takes the last dim first and only as many dims as are padded.
    size_t first = 0;
    while (first < begin.size() && begin[first] == 0 && end[first] == 0) ++first;
    std::vector<int64_t> torch_pads;
    for (size_t i = begin.size(); i-- > first;) {
      torch_pads.push_back(begin[i]);
      torch_pads.push_back(end[i]);
    }
    if (torch_pads.empty()) return {x};
    const std::string mode = n.attr_string("mode", "constant");
    if (mode == "constant") {
      at::Scalar value = 0;
      if (has_input(in, 2)) value = in[2].item();
      else if (n.has_attr("value")) value = static_cast<double>(n.attr_float("value", 0.0f));
      return {at::constant_pad_nd(x, torch_pads, value)};
    }
    PARE_CHECK(mode == "reflect" || mode == "edge" || mode == "wrap", n.describe(),
               ": Pad mode must be constant, reflect, edge or wrap, got '", mode, "'");
    // A gather along each padded dim: at::pad's reflect, replicate and circular modes take only
    // trailing dims of a 2-D to 5-D input (circular: not the first two), ONNX's modes any dim.
    at::Tensor y = x;
    for (int64_t d = 0; d < x.dim(); ++d) {
      const int64_t b = begin[static_cast<size_t>(d)], e = end[static_cast<size_t>(d)], size = x.size(d);
      if (b == 0 && e == 0) continue;
      PARE_CHECK(size > 0, n.describe(), ": Pad mode ", mode, " cannot pad the empty dim ", d);
      // Output position j reads input position j - b, mapped back into [0, size).
      at::Tensor i = at::arange(-b, size + e, at::kLong);
      if (mode == "edge") {
        i = at::clamp(i, 0, size - 1);
      } else if (mode == "wrap") {
        i = at::remainder(i, size);
      } else if (size == 1) {
        i = at::zeros_like(i);
      } else {  // reflect: period 2 * (size - 1), the edge elements not repeated
        i = at::remainder(i, 2 * (size - 1));
        i = at::where(i >= size, 2 * (size - 1) - i, i);
      }
      y = y.index_select(d, i.to(x.device()));
    }
    return {y};
  };
  d.traits.opaque_channels = true;
  return d;
}

// ArgMax or ArgMin.
OpDef arg_extreme_op(const std::string& name) {
  const bool is_max = name == "ArgMax";
  OpDef d = ops::data_op(name, 1, 1,
                 is_max ? "int64 index of the maximum along `axis`"
                        : "int64 index of the minimum along `axis`");
  d.attrs = {spec_int("axis"), spec_int("keepdims"), spec_int("select_last_index")};
  d.traits.reduction = OpTraits::Reduction::kAxis;
  d.forward = [is_max](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", 0), x.dim(), n);
    const bool keep = n.attr_int("keepdims", 1) != 0;
    auto arg = [&](const at::Tensor& t) {
      return is_max ? at::argmax(t, axis, keep) : at::argmin(t, axis, keep);
    };
    if (n.attr_int("select_last_index", 0) == 0) return {arg(x)};
    return {(x.size(axis) - 1) - arg(x.flip({axis}))};
  };
  return d;
}

}  // namespace

// Trilu: the upper (default) or lower triangle of the last two dims, k diagonals above (k > 0) or
// below the main one, the rest zero (causal attention masks).
OpDef trilu_op() {
  OpDef d = ops::op_def("Trilu", 1, 2, "upper (upper=1, default) or lower triangle of the last two dims from diagonal k (input 1, default 0)");
  d.attrs = {spec_int("upper")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    PARE_CHECK(x.dim() >= 2, n.describe(), ": Trilu needs at least 2 dims, got ", x.sizes());
    int64_t k = 0;
    if (has_input(in, 1)) {
      PARE_CHECK(in[1].numel() == 1 && !at::isFloatingType(in[1].scalar_type()), n.describe(),
                 ": k must be one integer, got ", in[1].scalar_type(), " ", in[1].sizes());
      k = in[1].item<int64_t>();
    }
    return {n.attr_int("upper", 1) != 0 ? at::triu(x, k) : at::tril(x, k)};
  };
  d.flops = flops_per_output(0);
  d.traits.opaque_channels = true;
  return d;
}

void register_tensor_ops(OpRegistry& reg) {
  reg.add(trilu_op());
  reg.add(shape_op());
  reg.add(size_op());
  reg.add(gather_op());
  reg.add(gather_elements_op());
  reg.add(reshape_op());
  reg.add(transpose_op());
  reg.add(slice_op());
  reg.add(collective_op("AllReduce"));
  reg.add(collective_op("AllGather"));
  reg.add(concat_op());
  reg.add(unsqueeze_op());
  reg.add(squeeze_op());
  reg.add(constant_op());
  reg.add(constant_of_shape_op());
  reg.add(expand_op());
  reg.add(split_op());
  reg.add(range_op());
  reg.add(tile_op());
  reg.add(pad_op());
  reg.add(arg_extreme_op("ArgMax"));
  reg.add(arg_extreme_op("ArgMin"));
}

}  // namespace pare::core
