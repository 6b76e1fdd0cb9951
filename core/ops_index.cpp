// Core ops, indexing family: ops that pick, place or count elements by index (CumSum, TopK,
// ScatterElements/Scatter, ScatterND, GatherND, OneHot, NonZero, Compress, ReverseSequence,
// MaxUnpool, NonMaxSuppression, Unique), the block rearrangements DepthToSpace and SpaceToDepth,
// and the generators EyeLike and the Hann, Hamming and Blackman windows. Index inputs may be
// negative (counted from the end) where ONNX allows it; out-of-range indices are refused naming
// the node, never read or written out of bounds.
#include <algorithm>
#include <tuple>

#include "core/dtype.h"
#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::flops_per_output;
using ops::has_input;
using ops::spec_int;
using ops::spec_string;
using Tensors = std::vector<at::Tensor>;


void check_integer(const Node& n, const at::Tensor& t, const char* what) {
  PARE_CHECK(!at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kBool, n.describe(), ": ", what,
             " must be integers, got ", t.scalar_type());
}

// Indices into a dim of size `dim` as int64 in [0, dim): negative ones count from the end.
at::Tensor wrap_indices(const Node& n, const at::Tensor& idx, int64_t dim, const char* what) {
  check_integer(n, idx, what);
  at::Tensor i = idx.to(at::kLong);
  i = at::where(i.lt(0), i + dim, i);
  PARE_CHECK(i.numel() == 0 || (i.min().item<int64_t>() >= 0 && i.max().item<int64_t>() < dim), n.describe(),
             ": ", what, " must lie in [", -dim, ", ", dim - 1, "]");
  return i;
}

int64_t scalar_int(const Node& n, const at::Tensor& t, const char* what) {
  PARE_CHECK(t.numel() == 1, n.describe(), ": ", what, " must hold one value, got shape ", t.sizes());
  check_integer(n, t, what);
  return t.reshape({}).item<int64_t>();
}

OpDef cumsum_op() {
  OpDef d = ops::op_def("CumSum", 2, 2,
                        "running sum along the axis of input 1; exclusive=1 leaves out the element itself, "
                        "reverse=1 sums from the end");
  d.attrs = {spec_int("exclusive"), spec_int("reverse")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    PARE_CHECK(x.dim() >= 1, n.describe(), ": CumSum needs at least one dim");
    const int64_t axis = ops::normalize_axis(scalar_int(n, in.at(1), "axis"), x.dim(), n);
    const bool reverse = n.attr_int("reverse", 0) != 0;
    at::Tensor t = reverse ? x.flip({axis}) : x;
    at::Tensor y = at::cumsum(t, axis, x.scalar_type());
    if (n.attr_int("exclusive", 0) != 0 && x.size(axis) > 0) {
      at::Tensor zero = at::zeros_like(t.narrow(axis, 0, 1));
      y = at::cat({zero, y.narrow(axis, 0, x.size(axis) - 1)}, axis);
    }
    return {reverse ? y.flip({axis}) : y};
  };
  d.flops = flops_per_output(1);
  d.traits.opaque_channels = true;
  return d;
}

OpDef top_k_op() {
  OpDef d = ops::op_def("TopK", 2, 2,
                        "the k (input 1) largest (largest=1) or smallest values along `axis` (default -1) and "
                        "their int64 indices, sorted; ties keep the lower index first");
  d.outputs_min = d.outputs_max = 2;
  d.attrs = {spec_int("axis"), spec_int("largest"), spec_int("sorted")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    PARE_CHECK(x.dim() >= 1, n.describe(), ": TopK needs at least one dim");
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", -1), x.dim(), n);
    const int64_t k = scalar_int(n, in.at(1), "k");
    PARE_CHECK(k >= 0 && k <= x.size(axis), n.describe(), ": k must be in [0, ", x.size(axis), "], got ", k);
    // A stable sort keeps equal values in index order, as ONNX asks (at::topk does not promise it).
    auto [values, indices] = at::sort(x, /*stable=*/true, axis, n.attr_int("largest", 1) != 0);
    return {values.narrow(axis, 0, k), indices.narrow(axis, 0, k)};
  };
  d.flops = ops::flops_per_input(1);
  d.traits.opaque_channels = true;
  return d;
}

// The reduction of ScatterElements/ScatterND as libtorch names it ("" for none).
std::string scatter_reduction(const Node& n) {
  const std::string r = n.attr_string("reduction", "none");
  if (r == "none") return "";
  if (r == "add") return "sum";
  if (r == "mul") return "prod";
  if (r == "max") return "amax";
  if (r == "min") return "amin";
  PARE_CHECK(false, n.describe(), ": reduction must be none, add, mul, max or min, got '", r, "'");
  return "";
}

OpDef scatter_elements_op(const std::string& name) {
  const bool old = name == "Scatter";
  OpDef d = ops::op_def(name, 3, 3,
                        old ? "ScatterElements without reduction (deprecated since opset 11)"
                            : "data with updates written at `indices` along `axis`; reduction none (default), "
                              "add, mul, max or min");
  d.attrs = {spec_int("axis")};
  if (!old) d.attrs.push_back(spec_string("reduction"));
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor &data = in.at(0), &updates = in.at(2);
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", 0), data.dim(), n);
    PARE_CHECK(in.at(1).dim() == data.dim() && updates.sizes() == in.at(1).sizes(), n.describe(),
               ": indices and updates must have one shape and the rank of data, got data ", data.sizes(),
               ", indices ", in.at(1).sizes(), ", updates ", updates.sizes());
    for (int64_t i = 0; i < data.dim(); ++i)
      PARE_CHECK(i == axis || in.at(1).size(i) <= data.size(i), n.describe(), ": indices ", in.at(1).sizes(),
                 " exceed data ", data.sizes(), " in dim ", i);
    at::Tensor idx = wrap_indices(n, in.at(1), data.size(axis), "indices");
    const std::string r = scatter_reduction(n);
    at::Tensor u = updates.to(data.scalar_type());
    if (r.empty()) return {at::scatter(data, axis, idx, u)};
    if (r == "sum") return {at::scatter_add(data, axis, idx, u)};
    return {at::scatter_reduce(data, axis, idx, u, r, /*include_self=*/true)};  // prod, amax, amin
  };
  d.flops = flops_per_output(0);
  d.traits.opaque_channels = true;
  return d;
}

// Row-major linear index of the first `k` dims of `shape` for index tuples [..., k].
at::Tensor linear_index(const Node& n, const at::Tensor& tuples, at::IntArrayRef shape, int64_t first) {
  const int64_t k = tuples.size(-1);
  at::Tensor lin = at::zeros(tuples.sizes().slice(0, tuples.dim() - 1), tuples.options().dtype(at::kLong));
  for (int64_t j = 0; j < k; ++j) {
    const int64_t dim = shape[first + j];
    lin = lin * dim + wrap_indices(n, tuples.select(-1, j), dim, "indices");
  }
  return lin;
}

OpDef scatter_nd_op() {
  OpDef d = ops::op_def("ScatterND", 3, 3,
                        "data with updates written at the index tuples of `indices` [..., k]; reduction none "
                        "(default), add, mul, max or min");
  d.attrs = {spec_string("reduction")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor &data = in.at(0), &indices = in.at(1), &updates = in.at(2);
    PARE_CHECK(indices.dim() >= 1 && indices.size(-1) <= data.dim(), n.describe(),
               ": indices must be [..., k] with k at most the rank of data, got ", indices.sizes(), " for data ",
               data.sizes());
    check_integer(n, indices, "indices");
    const int64_t k = indices.size(-1);
    std::vector<int64_t> want = indices.sizes().slice(0, indices.dim() - 1).vec();
    for (int64_t i = k; i < data.dim(); ++i) want.push_back(data.size(i));
    PARE_CHECK(updates.sizes().vec() == want, n.describe(), ": updates must be ", at::IntArrayRef(want), ", got ",
               updates.sizes());
    std::vector<int64_t> flat = {-1};
    for (int64_t i = k; i < data.dim(); ++i) flat.push_back(data.size(i));
    at::Tensor lin = linear_index(n, indices, data.sizes(), 0).reshape({-1});
    at::Tensor rows = data.reshape(flat), u = updates.to(data.scalar_type()).reshape(flat);
    const std::string r = scatter_reduction(n);
    at::Tensor y;
    if (r.empty()) y = rows.index_put({lin}, u);
    else if (r == "sum") y = rows.index_add(0, lin, u);
    else y = rows.index_reduce(0, lin, u, r, /*include_self=*/true);  // prod, amax, amin
    return {y.reshape(data.sizes())};
  };
  d.flops = flops_per_output(0);
  d.traits.opaque_channels = true;
  return d;
}

OpDef gather_nd_op() {
  OpDef d = ops::op_def("GatherND", 2, 2,
                        "the slices of data at the index tuples of `indices` [..., k], after `batch_dims` "
                        "leading dims shared by both");
  d.attrs = {spec_int("batch_dims")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor &data = in.at(0), &indices = in.at(1);
    const int64_t b = n.attr_int("batch_dims", 0);
    PARE_CHECK(indices.dim() >= 1 && b >= 0 && b < indices.dim() && b < data.dim() &&
                   b + indices.size(-1) <= data.dim(),
               n.describe(), ": indices ", indices.sizes(), " with batch_dims ", b, " do not fit data ",
               data.sizes());
    check_integer(n, indices, "indices");
    for (int64_t i = 0; i < b; ++i)
      PARE_CHECK(indices.size(i) == data.size(i), n.describe(), ": batch dim ", i, " differs: data ",
                 data.sizes(), ", indices ", indices.sizes());
    const int64_t k = indices.size(-1);
    int64_t batch = 1, rows = 1;
    for (int64_t i = 0; i < b; ++i) batch *= data.size(i);
    for (int64_t i = b; i < b + k; ++i) rows *= data.size(i);
    std::vector<int64_t> flat = {batch, rows}, out = indices.sizes().slice(0, indices.dim() - 1).vec();
    for (int64_t i = b + k; i < data.dim(); ++i) {
      flat.push_back(data.size(i));
      out.push_back(data.size(i));
    }
    at::Tensor lin = linear_index(n, indices, data.sizes(), b).reshape({batch, -1});
    at::Tensor batch_idx = at::arange(batch, lin.options()).unsqueeze(1).expand_as(lin);
    return {data.reshape(flat).index({batch_idx, lin}).reshape(out)};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef one_hot_op() {
  OpDef d = ops::op_def("OneHot", 3, 3,
                        "values[1] where an index (negative: from the end) equals the position along a new "
                        "`axis` (default -1) of size depth, values[0] elsewhere");
  d.attrs = {spec_int("axis")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor &indices = in.at(0), &values = in.at(2);
    PARE_CHECK(in.at(1).numel() == 1, n.describe(), ": depth must hold one value, got shape ", in.at(1).sizes());
    const int64_t depth = static_cast<int64_t>(in.at(1).reshape({}).item<double>());
    PARE_CHECK(depth >= 1, n.describe(), ": depth must be at least 1, got ", depth);
    PARE_CHECK(values.numel() == 2, n.describe(), ": values must be [off, on], got shape ", values.sizes());
    const int64_t axis = ops::normalize_axis(n.attr_int("axis", -1), indices.dim() + 1, n);
    at::Tensor idx = indices.is_floating_point() ? indices.trunc().to(at::kLong) : indices.to(at::kLong);
    idx = at::where(idx.lt(0), idx + depth, idx).unsqueeze(axis);
    std::vector<int64_t> shape(idx.dim(), 1);
    shape[axis] = depth;
    at::Tensor hit = idx.eq(at::arange(depth, idx.options()).reshape(shape));
    at::Tensor v = values.reshape({2});
    return {at::where(hit, v[1], v[0])};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef non_zero_op() {
  OpDef d = ops::data_op("NonZero", 1, 1, "int64 [rank, count] indices of the non-zero elements, in row-major order");
  d.forward = [](const Node&, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    if (x.dim() == 0) return {at::zeros({0, x.item<bool>() ? 1 : 0}, x.options().dtype(at::kLong))};
    return {at::nonzero(x).t().contiguous()};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef compress_op() {
  OpDef d = ops::data_op("Compress", 2, 2,
                 "the slices along `axis` (flattened input when absent) where the 1-D condition is true");
  d.attrs = {spec_int("axis")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const bool has_axis = n.has_attr("axis");
    at::Tensor x = has_axis ? in.at(0) : in.at(0).reshape({-1});
    const int64_t axis = has_axis ? ops::normalize_axis(n.attr_int("axis", 0), x.dim(), n) : 0;
    const at::Tensor& cond = in.at(1);
    PARE_CHECK(cond.dim() == 1 && cond.size(0) <= x.size(axis), n.describe(),
               ": condition must be 1-D and no longer than the axis (", x.size(axis), "), got ", cond.sizes());
    return {x.index_select(axis, at::nonzero(cond.ne(0)).reshape({-1}))};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef eye_like_op() {
  OpDef d = ops::data_op("EyeLike", 1, 1,
                 "a 2-D tensor of the input's shape with ones on diagonal k (0: main), of type `dtype` "
                 "(default: the input's)");
  d.attrs = {spec_int("dtype"), spec_int("k")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    PARE_CHECK(x.dim() == 2, n.describe(), ": EyeLike needs a 2-D input, got ", x.sizes());
    at::ScalarType type = x.scalar_type();
    if (n.has_attr("dtype")) {
      auto t = scalar_type_from_onnx(static_cast<int>(n.attr_int("dtype", 1)));
      PARE_CHECK(t.has_value(), n.describe(), ": dtype ", n.attr_int("dtype", 1), " is no ONNX type pare handles");
      type = *t;
    }
    const int64_t k = n.attr_int("k", 0);
    at::Tensor rows = at::arange(x.size(0), x.options().dtype(at::kLong)).unsqueeze(1);
    at::Tensor cols = at::arange(x.size(1), x.options().dtype(at::kLong)).unsqueeze(0);
    return {(cols - rows).eq(k).to(type)};
  };
  d.traits.opaque_channels = true;
  return d;
}

OpDef reverse_sequence_op() {
  OpDef d = ops::data_op("ReverseSequence", 2, 2,
                 "reverses the first sequence_lens[b] elements along time_axis (default 0) of each batch b "
                 "(batch_axis, default 1)");
  d.attrs = {spec_int("batch_axis"), spec_int("time_axis")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    PARE_CHECK(x.dim() >= 2, n.describe(), ": ReverseSequence needs at least 2 dims, got ", x.sizes());
    const int64_t ba = ops::normalize_axis(n.attr_int("batch_axis", 1), x.dim(), n, "batch_axis");
    const int64_t ta = ops::normalize_axis(n.attr_int("time_axis", 0), x.dim(), n, "time_axis");
    PARE_CHECK(ba != ta, n.describe(), ": batch_axis and time_axis must differ");
    const at::Tensor& lens_in = in.at(1);
    check_integer(n, lens_in, "sequence_lens");
    PARE_CHECK(lens_in.dim() == 1 && lens_in.size(0) == x.size(ba), n.describe(), ": sequence_lens must be [",
               x.size(ba), "], got ", lens_in.sizes());
    at::Tensor lens = lens_in.to(at::kLong);
    const int64_t steps = x.size(ta);
    PARE_CHECK(lens.numel() == 0 || (lens.min().item<int64_t>() >= 0 && lens.max().item<int64_t>() <= steps),
               n.describe(), ": sequence_lens must lie in [0, ", steps, "]");
    at::Tensor src = ops::reversed_steps(steps, lens);  // [time, batch]
    std::vector<int64_t> shape(x.dim(), 1);
    shape[ta] = steps;
    shape[ba] = x.size(ba);
    src = (ta < ba ? src : src.t()).reshape(shape).expand(x.sizes());
    return {x.gather(ta, src)};
  };
  d.traits.opaque_channels = true;
  return d;
}

// DepthToSpace (DCR or CRD) and SpaceToDepth on [N, C, H, W].
OpDef depth_space_op(bool to_space) {
  OpDef d = ops::data_op(to_space ? "DepthToSpace" : "SpaceToDepth", 1, 1,
                 to_space ? "[N, C*b*b, H, W] -> [N, C, H*b, W*b] by blocks of `blocksize` b; mode DCR (default, "
                            "depth-column-row) or CRD"
                          : "[N, C, H*b, W*b] -> [N, C*b*b, H, W] by blocks of `blocksize` b");
  d.attrs = {{"blocksize", AttrKind::kInt, true}};
  if (to_space) d.attrs.push_back(spec_string("mode"));
  d.forward = [to_space](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const int64_t b = n.attr_int("blocksize", 0);
    PARE_CHECK(x.dim() == 4 && b >= 1, n.describe(), ": needs [N, C, H, W] and blocksize >= 1, got ", x.sizes(),
               " and ", b);
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    if (!to_space) {
      PARE_CHECK(H % b == 0 && W % b == 0, n.describe(), ": H and W (", H, ", ", W, ") must divide by ", b);
      return {x.reshape({N, C, H / b, b, W / b, b}).permute({0, 3, 5, 1, 2, 4}).reshape({N, C * b * b, H / b, W / b})};
    }
    PARE_CHECK(C % (b * b) == 0, n.describe(), ": C (", C, ") must divide by blocksize squared (", b * b, ")");
    const std::string mode = n.attr_string("mode", "DCR");
    const int64_t c = C / (b * b);
    at::Tensor y;
    if (mode == "DCR") y = x.reshape({N, b, b, c, H, W}).permute({0, 3, 4, 1, 5, 2});
    else if (mode == "CRD") y = x.reshape({N, c, b, b, H, W}).permute({0, 1, 4, 2, 5, 3});
    else PARE_CHECK(false, n.describe(), ": mode must be DCR or CRD, got '", mode, "'");
    return {y.reshape({N, c, H * b, W * b})};
  };
  d.traits.opaque_channels = true;
  return d;
}

// MaxUnpool: X's values placed at MaxPool's flattened indices I in zeros of the shape the window
// geometry gives, (in - 1) * stride + kernel - pads; with output_shape (input 2, at least that
// large), zeros are added after the end of each dim, as ONNX's reference does (the indices keep
// their positions).
OpDef max_unpool_op() {
  OpDef d = ops::data_op("MaxUnpool", 2, 3,
                 "scatters X to MaxPool's flattened indices I in zeros of shape (in - 1) * stride + kernel - pads, "
                 "padded at the end to output_shape (input 2)");
  d.attrs = {{"kernel_shape", AttrKind::kInts, true}, ops::spec_ints("pads"), ops::spec_ints("strides")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor &x = in.at(0), &idx = in.at(1);
    PARE_CHECK(x.dim() >= 3 && idx.sizes() == x.sizes(), n.describe(), ": X [N, C, d...] and I of its shape, got ",
               x.sizes(), " and ", idx.sizes());
    const size_t ns = x.dim() - 2;
    const auto k = n.attr_ints("kernel_shape"), st = n.attr_ints("strides", std::vector<int64_t>(ns, 1));
    const auto pads = n.attr_ints("pads", std::vector<int64_t>(2 * ns, 0));
    PARE_CHECK(k.size() == ns && st.size() == ns && pads.size() == 2 * ns, n.describe(),
               ": kernel_shape, strides and pads must cover the ", ns, " spatial dims");
    std::vector<int64_t> shape = {x.size(0), x.size(1)};
    for (size_t i = 0; i < ns; ++i) shape.push_back((x.size(2 + i) - 1) * st[i] + k[i] - pads[i] - pads[ns + i]);
    int64_t total = 1;
    for (int64_t v : shape) {
      PARE_CHECK(v >= 0, n.describe(), ": the unpooled shape ", at::IntArrayRef(shape), " has a negative dim");
      total *= v;
    }
    at::Tensor flat = wrap_indices(n, idx.reshape({-1}), total, "indices");
    at::Tensor y = at::zeros({total}, x.options()).scatter(0, flat, x.reshape({-1})).reshape(shape);
    if (!has_input(in, 2)) return {y};
    const auto out = to_int_vector(in[2]);
    PARE_CHECK(out.size() == shape.size(), n.describe(), ": output_shape needs ", shape.size(), " values, got ",
               out.size());
    std::vector<int64_t> pad;  // constant_pad_nd: last dim first, (begin, end) pairs
    for (size_t i = shape.size(); i-- > 0;) {
      PARE_CHECK(out[i] >= shape[i] && (i >= 2 || out[i] == shape[i]), n.describe(), ": output_shape ",
                 at::IntArrayRef(out), " is smaller than the unpooled shape ", at::IntArrayRef(shape),
                 " (or changes N or C)");
      pad.insert(pad.end(), {0, out[i] - shape[i]});
    }
    return {at::constant_pad_nd(y, pad, 0)};
  };
  d.traits.opaque_channels = true;
  return d;
}

// NonMaxSuppression: per batch and class, boxes by descending score (ties: lower index first),
// each kept unless its IoU with a kept box exceeds iou_threshold, at most
// max_output_boxes_per_class, only scores above score_threshold. Output [K, 3]: batch, class, box.
double iou(const float* a, const float* b, bool center) {
  auto corners = [center](const float* p, double& y1, double& x1, double& y2, double& x2) {
    if (center) {  // [x_center, y_center, width, height]
      x1 = p[0] - p[2] / 2.0, x2 = p[0] + p[2] / 2.0, y1 = p[1] - p[3] / 2.0, y2 = p[1] + p[3] / 2.0;
    } else {  // [y1, x1, y2, x2], either corner first
      y1 = std::min(p[0], p[2]), y2 = std::max(p[0], p[2]), x1 = std::min(p[1], p[3]), x2 = std::max(p[1], p[3]);
    }
  };
  double ay1, ax1, ay2, ax2, by1, bx1, by2, bx2;
  corners(a, ay1, ax1, ay2, ax2);
  corners(b, by1, bx1, by2, bx2);
  const double iw = std::max(0.0, std::min(ax2, bx2) - std::max(ax1, bx1));
  const double ih = std::max(0.0, std::min(ay2, by2) - std::max(ay1, by1));
  const double inter = iw * ih, uni = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter;
  return uni > 0 ? inter / uni : 0.0;
}

OpDef non_max_suppression_op() {
  OpDef d = ops::data_op("NonMaxSuppression", 2, 5,
                 "int64 [K, 3] (batch, class, box) of the boxes [B, N, 4] kept per class of scores [B, C, N] by "
                 "greedy IoU suppression; inputs max_output_boxes_per_class, iou_threshold, score_threshold");
  d.attrs = {spec_int("center_point_box")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor boxes = in.at(0).to(at::kFloat).contiguous().cpu(), scores = in.at(1).to(at::kFloat).contiguous().cpu();
    PARE_CHECK(boxes.dim() == 3 && boxes.size(2) == 4 && scores.dim() == 3 && scores.size(0) == boxes.size(0) &&
                   scores.size(2) == boxes.size(1),
               n.describe(), ": needs boxes [B, N, 4] and scores [B, C, N], got ", boxes.sizes(), " and ", scores.sizes());
    const int64_t max_out = has_input(in, 2) ? scalar_int(n, in[2], "max_output_boxes_per_class") : 0;
    const double iou_max = has_input(in, 3) ? in[3].reshape({-1})[0].item<double>() : 0.0;
    const bool thresholded = has_input(in, 4);
    const double score_min = thresholded ? in[4].reshape({-1})[0].item<double>() : 0.0;
    PARE_CHECK(iou_max >= 0 && iou_max <= 1, n.describe(), ": iou_threshold must be in [0, 1], got ", iou_max);
    const bool center = n.attr_int("center_point_box", 0) != 0;
    const int64_t B = boxes.size(0), C = scores.size(1), N = boxes.size(1);
    std::vector<int64_t> picked;
    for (int64_t b = 0; b < B; ++b) {
      const float* bx = boxes.data_ptr<float>() + b * N * 4;
      for (int64_t c = 0; c < C && max_out > 0; ++c) {
        const float* sc = scores.data_ptr<float>() + (b * C + c) * N;
        std::vector<int64_t> order;
        for (int64_t i = 0; i < N; ++i)
          if (!thresholded || sc[i] > score_min) order.push_back(i);
        std::stable_sort(order.begin(), order.end(), [sc](int64_t i, int64_t j) { return sc[i] > sc[j]; });
        std::vector<int64_t> kept;
        for (int64_t i : order) {
          if (static_cast<int64_t>(kept.size()) >= max_out) break;
          bool keep = true;
          for (int64_t k : kept) keep = keep && iou(bx + 4 * i, bx + 4 * k, center) <= iou_max;
          if (!keep) continue;
          kept.push_back(i);
          picked.insert(picked.end(), {b, c, i});
        }
      }
    }
    return {ops::int64_tensor(picked).reshape({-1, 3}).to(in[0].device())};
  };
  d.traits.opaque_channels = true;
  return d;
}

// Unique: the distinct values (or slices along `axis`), sorted (default) or in order of first
// occurrence, with the index of each one's first occurrence, each element's index into them, and
// the counts.
OpDef unique_op() {
  OpDef d = ops::data_op("Unique", 1, 1,
                 "distinct elements (or slices along `axis`), sorted=1 ascending or else in order of first "
                 "occurrence; outputs Y, indices, inverse_indices, counts");
  d.outputs_max = 4;
  d.attrs = {spec_int("axis"), spec_int("sorted")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor& x = in.at(0);
    const bool has_axis = n.has_attr("axis");
    const int64_t axis = has_axis ? ops::normalize_axis(n.attr_int("axis", 0), x.dim(), n) : 0;
    at::Tensor y, inverse, counts;
    if (has_axis) std::tie(y, inverse, counts) = at::unique_dim(x, axis, true, true, true);
    else std::tie(y, inverse, counts) = at::_unique2(x.reshape({-1}), true, true, true);
    inverse = inverse.reshape({-1});
    const int64_t items = inverse.numel(), k = counts.numel();
    // Each value's first occurrence: the first position of its group in a stable sort by value
    // index (scatter_reduce would do too, but libtorch 1.13 warns that it is beta).
    at::Tensor by_value = std::get<1>(at::sort(inverse, /*stable=*/true, 0, false));
    at::Tensor first = by_value.index_select(0, at::cumsum(counts, 0) - counts);
    if (n.attr_int("sorted", 1) == 0) {
      at::Tensor order = at::argsort(first);
      at::Tensor rank = at::empty_like(order).scatter(0, order, at::arange(k, order.options()));
      y = y.index_select(has_axis ? axis : 0, order);
      first = first.index_select(0, order);
      counts = counts.index_select(0, order);
      inverse = rank.index_select(0, inverse);
    }
    Tensors out = {y, first, inverse, counts};
    out.resize(std::max<size_t>(1, n.outputs.size()));
    return out;
  };
  d.traits.opaque_channels = true;
  return d;
}

// HannWindow, HammingWindow, BlackmanWindow (opset 17): a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)
// for n in [0, size), N = size (periodic, default) or size - 1.
OpDef window_op(const std::string& name, double a0, double a2) {
  OpDef d = ops::data_op(name, 1, 1,
                 "the " + name.substr(0, name.size() - 6) + " window of `size` (input 0) values, periodic (default) or "
                 "symmetric, of type output_datatype (default float)");
  d.attrs = {spec_int("output_datatype"), spec_int("periodic")};
  d.forward = [a0, a2](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const int64_t size = scalar_int(n, in.at(0), "size");
    PARE_CHECK(size >= 0 && size <= (int64_t{1} << 30), n.describe(), ": size must be in [0, 2^30], got ", size);
    auto type = scalar_type_from_onnx(static_cast<int>(n.attr_int("output_datatype", 1)));
    PARE_CHECK(type.has_value(), n.describe(), ": output_datatype ", n.attr_int("output_datatype", 1),
               " is no ONNX type pare handles");
    const double N = n.attr_int("periodic", 1) != 0 ? size : size - 1;
    at::Tensor i = at::arange(size, at::TensorOptions().dtype(at::kDouble));
    const double pi = 3.14159265358979323846;
    at::Tensor w = a0 - (1 - a0 - a2) * at::cos(2 * pi * i / N) + a2 * at::cos(4 * pi * i / N);
    return {w.to(*type)};
  };
  d.traits.opaque_channels = true;
  return d;
}

}  // namespace

void register_index_ops(OpRegistry& reg) {
  reg.add(max_unpool_op());
  reg.add(non_max_suppression_op());
  reg.add(unique_op());
  reg.add(window_op("HannWindow", 0.5, 0.0));
  reg.add(window_op("HammingWindow", 25.0 / 46.0, 0.0));
  reg.add(window_op("BlackmanWindow", 0.42, 0.08));
  reg.add(cumsum_op());
  reg.add(top_k_op());
  reg.add(scatter_elements_op("ScatterElements"));
  reg.add(scatter_elements_op("Scatter"));
  reg.add(scatter_nd_op());
  reg.add(gather_nd_op());
  reg.add(one_hot_op());
  reg.add(non_zero_op());
  reg.add(compress_op());
  reg.add(eye_like_op());
  reg.add(reverse_sequence_op());
  reg.add(depth_space_op(true));
  reg.add(depth_space_op(false));
}

}  // namespace pare::core
