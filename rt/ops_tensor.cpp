// pare_rt's tensor ops: shapes and views (Reshape, Flatten, Squeeze, ...), Transpose, Concat,
// Slice, Gather, Cast, constants, reductions. Views share their input's bytes; the rest are
// reference kernels (Transpose and Concat of oneDNN types run as oneDNN reorders / concat).
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "rt/dnnl_compat.h"
#include "rt/internal.h"
#include "rt/ops_util.h"

namespace pare::rt {
namespace {

using ops::set_out;

// ---------------------------------------------------------------------------------------------
// Views: the output is the input's bytes with other dims.

void ref_copy(RefCtx& c) { ops::copy_bytes(c.out[0].data, c.in[0].data, c.in[0].numel() * dtype_size(c.in[0].dtype)); }

bool build_view(BuildCtx& b) {
  b.alias(0, b.plain(b.in[0]));
  return true;
}

OpImpl view_op(const std::string& op, int in_min, int in_max, std::function<void(InferCtx&)> infer) {
  OpImpl o;
  o.op = op;
  o.in_min = in_min;
  o.in_max = in_max;
  o.infer = std::move(infer);
  o.ref = ref_copy;
  o.build = build_view;
  return o;
}

void infer_reshape(InferCtx& c) {
  const auto& in = c.in[0].dims;
  std::vector<int64_t> shape = ops::ints_of(c.known(1));
  const bool allowzero = c.attrs().i("allowzero", 0) != 0;
  int64_t known = 1, infer_at = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0 && !allowzero) {
      c.check(k < in.size(), "shape ", dims_str(shape), " copies dim ", k, " of an input of rank ", in.size());
      shape[k] = in[k];
    }
    if (shape[k] == -1) {
      c.check(infer_at < 0, "shape ", dims_str(shape), " has more than one -1");
      infer_at = static_cast<int64_t>(k);
    } else {
      c.check(shape[k] >= 0, "shape ", dims_str(shape), " has a negative dim");
      known *= shape[k];
    }
  }
  const int64_t total = numel_of(in);
  if (infer_at >= 0) {
    c.check(known > 0 && total % known == 0, "cannot reshape ", dims_str(in), " to ", dims_str(shape));
    shape[static_cast<size_t>(infer_at)] = total / known;
  }
  c.check(numel_of(shape) == total, "cannot reshape ", dims_str(in), " (", total, " elements) to ", dims_str(shape));
  set_out(c, 0, c.in[0].dtype, shape);
}

void infer_flatten(InferCtx& c) {
  const auto& in = c.in[0].dims;
  // axis is in [-rank, rank]; a negative one counts from the back (-1 is rank - 1, not rank).
  const int64_t rank = static_cast<int64_t>(in.size());
  int64_t a = c.attrs().i("axis", 1);
  c.check(a >= -rank && a <= rank, "axis must be in [", -rank, ", ", rank, "], got ", a);
  if (a < 0) a += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < static_cast<int64_t>(in.size()); ++k) (k < a ? outer : inner) *= in[static_cast<size_t>(k)];
  set_out(c, 0, c.in[0].dtype, {outer, inner});
}

// Squeeze/Unsqueeze axes: the input (opset >= 13) or the attribute.
std::vector<int64_t> axes_of(InferCtx& c, size_t input, bool required) {
  if (c.in.size() > input && c.in[input].present) return ops::ints_of(c.known(input));
  c.check(!required || c.attrs().has("axes"), "axes are required");
  return c.attrs().ints("axes");
}

void infer_squeeze(InferCtx& c) {
  const auto& in = c.in[0].dims;
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes = axes_of(c, 1, false);
  std::vector<char> drop(in.size(), 0);
  if (axes.empty()) {
    for (size_t k = 0; k < in.size(); ++k) drop[k] = in[k] == 1;
  } else {
    for (int64_t a : axes) {
      const int64_t k = ops::axis(c, a, rank, "axes");
      c.check(in[static_cast<size_t>(k)] == 1, "cannot squeeze dim ", k, " of ", dims_str(in), ": it is not 1");
      drop[static_cast<size_t>(k)] = 1;
    }
  }
  std::vector<int64_t> out;
  for (size_t k = 0; k < in.size(); ++k)
    if (!drop[k]) out.push_back(in[k]);
  set_out(c, 0, c.in[0].dtype, out);
}

void infer_unsqueeze(InferCtx& c) {
  const auto& in = c.in[0].dims;
  std::vector<int64_t> axes = axes_of(c, 1, true);
  const int64_t rank = static_cast<int64_t>(in.size() + axes.size());
  std::vector<char> add(static_cast<size_t>(rank), 0);
  for (int64_t a : axes) {
    const int64_t k = ops::axis(c, a, rank, "axes");
    c.check(!add[static_cast<size_t>(k)], "axis ", a, " is repeated");
    add[static_cast<size_t>(k)] = 1;
  }
  std::vector<int64_t> out;
  size_t j = 0;
  for (int64_t k = 0; k < rank; ++k) out.push_back(add[static_cast<size_t>(k)] ? 1 : in[j++]);
  set_out(c, 0, c.in[0].dtype, out);
}

void infer_same(InferCtx& c) {
  set_out(c, 0, c.in[0].dtype, c.in[0].dims);
  for (size_t k = 1; k < c.out.size(); ++k) set_out(c, k, DType::kBool, c.in[0].dims);  // Dropout's mask
}

// Dropout runs as in inference: a training_mode input (opset 12) must be known at load and false.
void infer_dropout(InferCtx& c) {
  if (c.in.size() > 2 && c.in[2].present) {
    const HTensor& training = c.known(2);
    c.check(training.numel() == 1 && training.i(0) == 0,
            "pare_rt runs inference only: training_mode must be false (pare run --engine torch runs training Dropout)");
  }
  infer_same(c);
}

void ref_dropout(RefCtx& c) {
  ref_copy(c);
  if (c.out.size() > 1 && c.out[1].data) std::memset(c.out[1].data, 1, static_cast<size_t>(c.out[1].numel()));
}

// ---------------------------------------------------------------------------------------------
// Shape, Size, ConstantOfShape, Range: values computed from shapes

void infer_shape(InferCtx& c) {
  const auto& in = c.in[0].dims;
  const int64_t rank = static_cast<int64_t>(in.size());
  int64_t start = c.attrs().i("start", 0), end = c.attrs().i("end", rank);
  auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  start = clampi(start);
  end = clampi(end);
  HTensor t = HTensor::zeros(DType::kInt64, {std::max<int64_t>(end - start, 0)});
  for (int64_t k = start; k < end; ++k) t.ptr<int64_t>()[k - start] = in[static_cast<size_t>(k)];
  set_out(c, 0, DType::kInt64, t.dims);
  c.computed[0] = t;
}

void infer_size(InferCtx& c) {
  HTensor t = HTensor::zeros(DType::kInt64, {});
  t.ptr<int64_t>()[0] = numel_of(c.in[0].dims);
  set_out(c, 0, DType::kInt64, {});
  c.computed[0] = t;
}

void infer_constant_of_shape(InferCtx& c) {
  std::vector<int64_t> dims = ops::ints_of(c.known(0));
  for (int64_t d : dims) c.check(d >= 0, "shape ", dims_str(dims), " has a negative dim");
  DType t = DType::kFloat32;
  if (const reader::Tensor* v = c.attrs().tensor("value")) {
    c.check(v->numel() == 1, "value must hold one element");
    switch (v->elem_type) {
      case reader::kFloat: t = DType::kFloat32; break;
      case reader::kInt64: t = DType::kInt64; break;
      case reader::kInt32: t = DType::kInt32; break;
      case reader::kBool: t = DType::kBool; break;
      case reader::kUInt8: t = DType::kUInt8; break;
      case reader::kInt8: t = DType::kInt8; break;
      default: c.fail("value of type ", reader::elem_type_name(v->elem_type), " is not supported");
    }
  }
  set_out(c, 0, t, dims);
}

void ref_constant_of_shape(RefCtx& c) {
  const reader::Tensor* v = c.attrs().tensor("value");
  const int64_t n = c.out[0].numel(), size = dtype_size(c.out[0].dtype);
  if (!v) return;  // zeros
  auto* dst = static_cast<char*>(c.out[0].data);
  for (int64_t k = 0; k < n; ++k) std::memcpy(dst + k * size, v->data, static_cast<size_t>(size));
}

void infer_range(InferCtx& c) {
  const HTensor &s = c.known(0), &l = c.known(1), &d = c.known(2);
  const double start = s.f(0), limit = l.f(0), delta = d.f(0);
  c.check(delta != 0, "delta must not be 0");
  const int64_t n = std::max<int64_t>(static_cast<int64_t>(std::ceil((limit - start) / delta)), 0);
  c.check(n <= (int64_t{1} << 31), "range of ", n, " elements is too large");
  HTensor t = HTensor::zeros(s.dtype, {n});
  for (int64_t k = 0; k < n; ++k) {
    if (s.dtype == DType::kFloat32) t.ptr<float>()[k] = static_cast<float>(start + k * delta);
    else if (s.dtype == DType::kInt64) t.ptr<int64_t>()[k] = s.i(0) + k * d.i(0);
    else if (s.dtype == DType::kInt32) t.ptr<int32_t>()[k] = static_cast<int32_t>(s.i(0) + k * d.i(0));
    else c.fail("range of ", dtype_name(s.dtype), " is not supported");
  }
  set_out(c, 0, s.dtype, t.dims);
  c.computed[0] = t;
}

// ---------------------------------------------------------------------------------------------
// Transpose

std::vector<int64_t> perm_of(const Attrs& a, size_t rank) {
  std::vector<int64_t> p = a.ints("perm");
  if (p.empty()) {
    for (size_t k = 0; k < rank; ++k) p.push_back(static_cast<int64_t>(rank - 1 - k));
  }
  return p;
}

void infer_transpose(InferCtx& c) {
  const auto& in = c.in[0].dims;
  auto p = perm_of(c.attrs(), in.size());
  c.check(p.size() == in.size(), "perm ", dims_str(p), " does not fit an input of rank ", in.size());
  std::vector<char> seen(in.size(), 0);
  std::vector<int64_t> out;
  for (int64_t k : p) {
    c.check(k >= 0 && k < static_cast<int64_t>(in.size()) && !seen[static_cast<size_t>(k)], "perm ", dims_str(p),
            " is not a permutation of 0..", in.size() - 1);
    seen[static_cast<size_t>(k)] = 1;
    out.push_back(in[static_cast<size_t>(k)]);
  }
  set_out(c, 0, c.in[0].dtype, out);
}

void ref_transpose(RefCtx& c) {
  const auto& in = c.in[0].dims;
  auto p = perm_of(c.attrs(), in.size());
  const auto st = row_major_strides(in);
  std::vector<int64_t> src_strides(p.size());
  for (size_t k = 0; k < p.size(); ++k) src_strides[k] = st[static_cast<size_t>(p[k])];
  const std::vector<int64_t> strides[1] = {src_strides};
  const int64_t size = dtype_size(c.in[0].dtype);
  const char* src = static_cast<const char*>(c.in[0].data);
  char* dst = static_cast<char*>(c.out[0].data);
  ops::broadcast_loop<1>(c.out[0].dims, strides, [&](int64_t o, const int64_t* off) {
    std::memcpy(dst + o * size, src + off[0] * size, static_cast<size_t>(size));
  });
}

// A transpose of a oneDNN type is a reorder from the input read with permuted strides.
bool build_transpose(BuildCtx& b) {
  const PValue& x = b.v(b.in[0]);
  if (!has_dnnl_type(x.dtype))
    return b.refuse("the input is ", dtype_name(x.dtype), "; the oneDNN reorder takes float32, uint8, int8 or int32");
  if (x.dims.empty()) return b.refuse("the input is a scalar; the oneDNN reorder takes rank 1 or more");
  const int src = b.plain(b.in[0]);
  auto p = perm_of(b.node.attrs, x.dims.size());
  const auto st = row_major_strides(x.dims);
  dnnl::memory::dims dims, strides;
  for (int64_t k : p) {
    dims.push_back(x.dims[static_cast<size_t>(k)]);
    strides.push_back(st[static_cast<size_t>(k)]);
  }
  PValue& o = b.v(b.out[0]);
  o.md = plain_md(o.dtype, o.dims);
  const int view = b.temp(x.dtype, o.dims, dnnl::memory::desc(dims, dnnl_type(x.dtype), strides));
  b.v(view).alias = src;
  dnnl::reorder::primitive_desc pd(b.eng, b.v(view).md, b.eng, o.md);
  b.prim(dnnl::reorder(pd), {{DNNL_ARG_SRC, view}, {DNNL_ARG_DST, b.out[0]}}, b.node.label());
  return true;
}

// ---------------------------------------------------------------------------------------------
// Concat, Split, Slice, Gather, Expand, Tile, Pad

void infer_concat(InferCtx& c) {
  const auto& first = c.in[0].dims;
  const int64_t rank = static_cast<int64_t>(first.size());
  const int64_t a = ops::axis(c, c.attrs().i("axis", 0), rank);
  std::vector<int64_t> out = first;
  out[static_cast<size_t>(a)] = 0;
  for (auto& in : c.in) {
    if (!in.present) continue;
    c.check(in.dtype == c.in[0].dtype, "inputs have different types");
    c.check(in.dims.size() == first.size(), "inputs ", dims_str(first), " and ", dims_str(in.dims),
            " have different ranks");
    for (int64_t k = 0; k < rank; ++k)
      c.check(k == a || in.dims[static_cast<size_t>(k)] == first[static_cast<size_t>(k)], "inputs ", dims_str(first),
              " and ", dims_str(in.dims), " differ outside axis ", a);
    out[static_cast<size_t>(a)] += in.dims[static_cast<size_t>(a)];
  }
  set_out(c, 0, c.in[0].dtype, out);
}

void ref_concat(RefCtx& c) {
  const auto& out = c.out[0].dims;
  const int64_t rank = static_cast<int64_t>(out.size());
  int64_t a = c.attrs().i("axis", 0);
  if (a < 0) a += rank;
  int64_t outer = 1;
  for (int64_t k = 0; k < a; ++k) outer *= out[static_cast<size_t>(k)];
  const int64_t size = dtype_size(c.out[0].dtype);
  const int64_t row = numel_of(out) / std::max<int64_t>(outer, 1) * size;
  char* dst = static_cast<char*>(c.out[0].data);
  int64_t at = 0;
  for (auto& in : c.in) {
    if (!in.data && in.numel()) continue;
    const int64_t chunk = in.numel() / std::max<int64_t>(outer, 1) * size;
    for (int64_t o = 0; o < outer; ++o)
      ops::copy_bytes(dst + o * row + at, static_cast<const char*>(in.data) + o * chunk, chunk);
    at += chunk;
  }
}

void infer_split(InferCtx& c) {
  const auto& in = c.in[0].dims;
  const int64_t a = ops::axis(c, c.attrs().i("axis", 0), static_cast<int64_t>(in.size()));
  const int64_t total = in[static_cast<size_t>(a)];
  std::vector<int64_t> parts;
  if (c.in.size() > 1 && c.in[1].present) parts = ops::ints_of(c.known(1));
  else parts = c.attrs().ints("split");
  const int64_t n = static_cast<int64_t>(c.out.size());
  if (parts.empty()) {
    const int64_t each = (total + n - 1) / n;
    for (int64_t k = 0; k < n; ++k) parts.push_back(std::min(each, std::max<int64_t>(total - k * each, 0)));
  }
  c.check(static_cast<int64_t>(parts.size()) == n, "split ", dims_str(parts), " does not give ", n, " outputs");
  c.check(std::accumulate(parts.begin(), parts.end(), int64_t{0}) == total, "split ", dims_str(parts),
          " does not add up to dim ", a, " (", total, ")");
  for (int64_t k = 0; k < n; ++k) {
    auto d = in;
    d[static_cast<size_t>(a)] = parts[static_cast<size_t>(k)];
    set_out(c, static_cast<size_t>(k), c.in[0].dtype, d);
  }
}

void ref_split(RefCtx& c) {
  const auto& in = c.in[0].dims;
  int64_t a = c.attrs().i("axis", 0);
  if (a < 0) a += static_cast<int64_t>(in.size());
  int64_t outer = 1;
  for (int64_t k = 0; k < a; ++k) outer *= in[static_cast<size_t>(k)];
  const int64_t size = dtype_size(c.in[0].dtype);
  const int64_t row = c.in[0].numel() / std::max<int64_t>(outer, 1) * size;
  const char* src = static_cast<const char*>(c.in[0].data);
  int64_t at = 0;
  for (auto& o : c.out) {
    const int64_t chunk = o.numel() / std::max<int64_t>(outer, 1) * size;
    if (o.data)
      for (int64_t r = 0; r < outer; ++r) ops::copy_bytes(static_cast<char*>(o.data) + r * chunk, src + r * row + at, chunk);
    at += chunk;
  }
}

struct SliceSpec {
  std::vector<int64_t> start, step, out;
};

SliceSpec slice_spec(InferCtx& c) {
  const auto& in = c.in[0].dims;
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.in.size() > 1) {
    starts = ops::ints_of(c.known(1));
    ends = ops::ints_of(c.known(2));
    if (c.in.size() > 3 && c.in[3].present) axes = ops::ints_of(c.known(3));
    if (c.in.size() > 4 && c.in[4].present) steps = ops::ints_of(c.known(4));
  } else {
    starts = c.attrs().ints("starts");
    ends = c.attrs().ints("ends");
    axes = c.attrs().ints("axes");
  }
  c.check(starts.size() == ends.size(), "starts and ends differ in length");
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  c.check(axes.size() == starts.size() && steps.size() == starts.size(), "starts, ends, axes and steps differ in length");
  SliceSpec s;
  s.start.assign(in.size(), 0);
  s.step.assign(in.size(), 1);
  s.out = in;
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = ops::axis(c, axes[k], rank, "axes");
    const int64_t d = in[static_cast<size_t>(a)], st = steps[k];
    c.check(st != 0, "steps must not be 0");
    int64_t b = starts[k], e = ends[k];
    if (b < 0) b += d;
    if (e < 0) e += d;
    if (st > 0) {
      b = std::clamp<int64_t>(b, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
    } else {
      b = std::clamp<int64_t>(b, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
    }
    const int64_t n = st > 0 ? (e - b + st - 1) / st : (b - e - st - 1) / -st;
    s.start[static_cast<size_t>(a)] = b;
    s.step[static_cast<size_t>(a)] = st;
    s.out[static_cast<size_t>(a)] = std::max<int64_t>(n, 0);
  }
  return s;
}

void infer_slice(InferCtx& c) { set_out(c, 0, c.in[0].dtype, slice_spec(c).out); }

void ref_slice(RefCtx& c) {
  // Recomputed from the (known) starts/ends: the ref kernel sees only views.
  InferCtx ic{c.node, {}, {}, {}};
  std::vector<HTensor> held;
  held.reserve(c.in.size());
  for (auto& v : c.in) {
    VInfo vi;
    if (v.data || v.numel() == 0) {
      vi.present = v.data != nullptr || !v.dims.empty();
      vi.dtype = v.dtype;
      vi.dims = v.dims;
      HTensor h;
      h.dtype = v.dtype;
      h.dims = v.dims;
      h.data = v.data;
      held.push_back(h);
      vi.known = &held.back();
    }
    ic.in.push_back(vi);
  }
  const SliceSpec s = slice_spec(ic);
  const auto st = row_major_strides(c.in[0].dims);
  std::vector<int64_t> strides(st.size());
  int64_t base = 0;
  for (size_t k = 0; k < st.size(); ++k) {
    strides[k] = st[k] * s.step[k];
    base += s.start[k] * st[k];
  }
  const std::vector<int64_t> str[1] = {strides};
  const int64_t size = dtype_size(c.in[0].dtype);
  const char* src = static_cast<const char*>(c.in[0].data) + base * size;
  char* dst = static_cast<char*>(c.out[0].data);
  ops::broadcast_loop<1>(c.out[0].dims, str, [&](int64_t o, const int64_t* off) {
    std::memcpy(dst + o * size, src + off[0] * size, static_cast<size_t>(size));
  });
}

void infer_gather(InferCtx& c) {
  const auto& data = c.in[0].dims;
  const auto& idx = c.in[1].dims;
  c.check(c.in[1].dtype == DType::kInt64 || c.in[1].dtype == DType::kInt32, "indices must be int64 or int32");
  const int64_t a = ops::axis(c, c.attrs().i("axis", 0), static_cast<int64_t>(data.size()));
  std::vector<int64_t> out(data.begin(), data.begin() + a);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + a + 1, data.end());
  set_out(c, 0, c.in[0].dtype, out);
}

void ref_gather(RefCtx& c) {
  const auto& data = c.in[0].dims;
  int64_t a = c.attrs().i("axis", 0);
  if (a < 0) a += static_cast<int64_t>(data.size());
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < a; ++k) outer *= data[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(a) + 1; k < data.size(); ++k) inner *= data[k];
  const int64_t dim = data[static_cast<size_t>(a)], n = c.in[1].numel();
  const int64_t size = dtype_size(c.in[0].dtype) * inner;
  const char* src = static_cast<const char*>(c.in[0].data);
  char* dst = static_cast<char*>(c.out[0].data);
  const bool i64 = c.in[1].dtype == DType::kInt64;
  for (int64_t k = 0; k < n; ++k) {
    int64_t i = i64 ? c.in[1].ptr<int64_t>()[k] : c.in[1].ptr<int32_t>()[k];
    if (i < 0) i += dim;
    PARE_CHECK(i >= 0 && i < dim, c.node.label(), ": index ", i, " is outside [", -dim, ", ", dim - 1, "]");
  }
#pragma omp parallel for collapse(2) if (outer * n * size > 65536)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = i64 ? c.in[1].ptr<int64_t>()[k] : c.in[1].ptr<int32_t>()[k];
      if (i < 0) i += dim;
      std::memcpy(dst + (o * n + k) * size, src + (o * dim + i) * size, static_cast<size_t>(size));
    }
}

void infer_expand(InferCtx& c) {
  const std::vector<int64_t> shape = ops::ints_of(c.known(1));
  set_out(c, 0, c.in[0].dtype, ops::broadcast_dims(c, {c.in[0].dims, shape}));
}

void ref_broadcast_copy(RefCtx& c) {
  const std::vector<int64_t> st[1] = {ops::broadcast_strides(c.in[0].dims, c.out[0].dims)};
  const int64_t size = dtype_size(c.in[0].dtype);
  const char* src = static_cast<const char*>(c.in[0].data);
  char* dst = static_cast<char*>(c.out[0].data);
  ops::broadcast_loop<1>(c.out[0].dims, st, [&](int64_t o, const int64_t* off) {
    std::memcpy(dst + o * size, src + off[0] * size, static_cast<size_t>(size));
  });
}

void infer_tile(InferCtx& c) {
  const auto reps = ops::ints_of(c.known(1));
  c.check(reps.size() == c.in[0].dims.size(), "repeats ", dims_str(reps), " do not fit rank ", c.in[0].dims.size());
  auto out = c.in[0].dims;
  for (size_t k = 0; k < out.size(); ++k) {
    c.check(reps[k] >= 0, "repeats must be >= 0");
    out[k] *= reps[k];
  }
  set_out(c, 0, c.in[0].dtype, out);
}

void ref_tile(RefCtx& c) {
  const auto& in = c.in[0].dims;
  const auto st = row_major_strides(in);
  const int64_t size = dtype_size(c.in[0].dtype);
  const char* src = static_cast<const char*>(c.in[0].data);
  char* dst = static_cast<char*>(c.out[0].data);
  const auto& out = c.out[0].dims;
  const int64_t n = c.out[0].numel();
  for (int64_t o = 0; o < n; ++o) {
    int64_t rem = o, off = 0;
    for (size_t k = out.size(); k-- > 0;) {
      const int64_t idx = rem % out[k];
      rem /= out[k];
      off += (idx % in[k]) * st[k];
    }
    std::memcpy(dst + o * size, src + off * size, static_cast<size_t>(size));
  }
}

void infer_pad(InferCtx& c) {
  const auto& in = c.in[0].dims;
  std::vector<int64_t> pads = c.in.size() > 1 && c.in[1].present ? ops::ints_of(c.known(1)) : c.attrs().ints("pads");
  c.check(pads.size() == 2 * in.size(), "pads ", dims_str(pads), " do not fit rank ", in.size());
  c.check(c.attrs().s("mode", "constant") == "constant", "mode '", c.attrs().s("mode", ""), "' is not supported (constant only)");
  c.check(c.in.size() < 4 || !c.in[3].present, "axes are not supported");
  auto out = in;
  for (size_t k = 0; k < in.size(); ++k) {
    c.check(pads[k] >= 0 && pads[k + in.size()] >= 0, "negative pads are not supported");
    out[k] += pads[k] + pads[k + in.size()];
  }
  set_out(c, 0, c.in[0].dtype, out);
}

void ref_pad(RefCtx& c) {
  const auto& in = c.in[0].dims;
  const auto& out = c.out[0].dims;
  const size_t rank = in.size();
  std::vector<int64_t> pads;
  if (c.in.size() > 1 && c.in[1].data) {
    for (int64_t k = 0; k < c.in[1].numel(); ++k) pads.push_back(c.in[1].ptr<int64_t>()[k]);
  } else {
    pads = c.attrs().ints("pads");
  }
  const int64_t size = dtype_size(c.in[0].dtype);
  char* dst = static_cast<char*>(c.out[0].data);
  const int64_t n = c.out[0].numel();
  // The fill value (input 2, or the attribute of opset < 11), else 0.
  std::vector<char> fill(static_cast<size_t>(size), 0);
  if (c.in.size() > 2 && c.in[2].data) std::memcpy(fill.data(), c.in[2].data, static_cast<size_t>(size));
  else if (c.in[0].dtype == DType::kFloat32) {
    const float v = c.attrs().f("value", 0.f);
    std::memcpy(fill.data(), &v, 4);
  }
  for (int64_t o = 0; o < n; ++o) std::memcpy(dst + o * size, fill.data(), static_cast<size_t>(size));
  const auto st = row_major_strides(out);
  const int64_t m = c.in[0].numel();
  for (int64_t i = 0; i < m; ++i) {
    int64_t rem = i, off = 0;
    for (size_t k = rank; k-- > 0;) {
      const int64_t idx = rem % in[k];
      rem /= in[k];
      off += (idx + pads[k]) * st[k];
    }
    std::memcpy(dst + off * size, static_cast<const char*>(c.in[0].data) + i * size, static_cast<size_t>(size));
  }
}

// ---------------------------------------------------------------------------------------------
// Cast

std::string check_cast(Node& n, const Graph&) {
  const int64_t to = n.attrs.i("to", -1);
  if (dtype_from_onnx(to)) return "";
  return "Cast to " + reader::elem_type_name(static_cast<int>(to)) +
         " is not supported (pare_rt computes in float32, uint8, int8, int32, int64 and bool)";
}

void infer_cast(InferCtx& c) { set_out(c, 0, *dtype_from_onnx(c.attrs().i("to", reader::kFloat)), c.in[0].dims); }

template <class S, class D>
D cast_one(S v) {
  if constexpr (std::is_floating_point_v<S> && !std::is_floating_point_v<D>) {
    if constexpr (std::is_same_v<D, uint8_t>) return static_cast<D>(static_cast<int64_t>(v));
    return static_cast<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

void ref_cast(RefCtx& c) {
  const int64_t n = c.in[0].numel();
  const bool to_bool = c.out[0].dtype == DType::kBool;
  ops::dispatch(c.in[0].dtype, [&](auto s) {
    using S = decltype(s);
    ops::dispatch(c.out[0].dtype, [&](auto d) {
      using D = decltype(d);
      const S* src = c.in[0].ptr<S>();
      D* dst = c.out[0].ptr<D>();
#pragma omp parallel for if (n > 65536)
      for (int64_t k = 0; k < n; ++k) dst[k] = to_bool ? static_cast<D>(src[k] != S{}) : cast_one<S, D>(src[k]);
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Reductions (ReduceMean, ReduceSum, ReduceMax, ReduceMin) and ArgMax

std::vector<char> reduce_axes(InferCtx& c, bool& keep) {
  const auto& in = c.in[0].dims;
  std::vector<int64_t> axes;
  if (c.in.size() > 1 && c.in[1].present) axes = ops::ints_of(c.known(1));
  else axes = c.attrs().ints("axes");
  keep = c.attrs().i("keepdims", 1) != 0;
  std::vector<char> red(in.size(), 0);
  if (axes.empty()) {
    if (c.attrs().i("noop_with_empty_axes", 0) == 0) std::fill(red.begin(), red.end(), 1);
  } else {
    for (int64_t a : axes) red[static_cast<size_t>(ops::axis(c, a, static_cast<int64_t>(in.size()), "axes"))] = 1;
  }
  return red;
}

void infer_reduce(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32 || c.in[0].dtype == DType::kInt64, "reductions of ",
          dtype_name(c.in[0].dtype), " are not supported");
  bool keep = true;
  auto red = reduce_axes(c, keep);
  std::vector<int64_t> out;
  for (size_t k = 0; k < red.size(); ++k) {
    if (!red[k]) out.push_back(c.in[0].dims[k]);
    else if (keep) out.push_back(1);
  }
  set_out(c, 0, c.in[0].dtype, out);
}

void ref_reduce(RefCtx& c) {
  InferCtx ic{c.node, {VInfo{true, c.in[0].dtype, c.in[0].dims, nullptr}}, {}, {}};
  HTensor axes_t;
  if (c.in.size() > 1 && c.in[1].data) {
    axes_t.dtype = c.in[1].dtype;
    axes_t.dims = c.in[1].dims;
    axes_t.data = c.in[1].data;
    ic.in.push_back(VInfo{true, axes_t.dtype, axes_t.dims, &axes_t});
  }
  bool keep = true;
  const auto red = reduce_axes(ic, keep);
  const auto& in = c.in[0].dims;
  // Output strides in input space: 0 along reduced axes.
  std::vector<int64_t> out_dims_full(in.size());
  for (size_t k = 0; k < in.size(); ++k) out_dims_full[k] = red[k] ? 1 : in[k];
  const auto ost = row_major_strides(out_dims_full);
  std::vector<int64_t> st(in.size());
  for (size_t k = 0; k < in.size(); ++k) st[k] = red[k] ? 0 : ost[k];
  const int64_t count = numel_of(in) / std::max<int64_t>(numel_of(out_dims_full), 1);
  const std::string& op = c.node.op;
  ops::dispatch(c.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    const T* src = c.in[0].ptr<T>();
    T* dst = c.out[0].ptr<T>();
    const int64_t m = c.out[0].numel();
    std::vector<double> acc(static_cast<size_t>(m), op == "ReduceMax" ? -std::numeric_limits<double>::infinity()
                                                    : op == "ReduceMin" ? std::numeric_limits<double>::infinity() : 0.0);
    const int64_t n = c.in[0].numel();
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, o = 0;
      for (size_t k = in.size(); k-- > 0;) {
        o += (rem % in[k]) * st[k];
        rem /= in[k];
      }
      const double v = static_cast<double>(src[i]);
      double& a = acc[static_cast<size_t>(o)];
      if (op == "ReduceMax") a = std::max(a, v);
      else if (op == "ReduceMin") a = std::min(a, v);
      else a += v;
    }
    for (int64_t o = 0; o < m; ++o)
      dst[o] = static_cast<T>(op == "ReduceMean" ? acc[static_cast<size_t>(o)] / static_cast<double>(count)
                                                 : acc[static_cast<size_t>(o)]);
  });
}

void infer_argmax(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32, "ArgMax of ", dtype_name(c.in[0].dtype), " is not supported");
  const int64_t a = ops::axis(c, c.attrs().i("axis", 0), static_cast<int64_t>(c.in[0].dims.size()));
  auto out = c.in[0].dims;
  if (c.attrs().i("keepdims", 1)) out[static_cast<size_t>(a)] = 1;
  else out.erase(out.begin() + a);
  set_out(c, 0, DType::kInt64, out);
}

void ref_argmax(RefCtx& c) {
  const auto& in = c.in[0].dims;
  int64_t a = c.attrs().i("axis", 0);
  if (a < 0) a += static_cast<int64_t>(in.size());
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < a; ++k) outer *= in[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(a) + 1; k < in.size(); ++k) inner *= in[k];
  const int64_t d = in[static_cast<size_t>(a)];
  const bool last = c.attrs().i("select_last_index", 0) != 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const float* p = c.in[0].ptr<float>() + o * d * inner + i;
      int64_t best = 0;
      for (int64_t k = 1; k < d; ++k)
        if (p[k * inner] > p[best * inner] || (last && p[k * inner] == p[best * inner])) best = k;
      c.out[0].ptr<int64_t>()[o * inner + i] = best;
    }
}


}  // namespace

void register_tensor_ops(OpTable& t) {
  t.add(view_op("Reshape", 2, 2, infer_reshape));
  t.add(view_op("Flatten", 1, 1, infer_flatten));
  t.add(view_op("Squeeze", 1, 2, infer_squeeze));
  t.add(view_op("Unsqueeze", 1, 2, infer_unsqueeze));
  t.add(view_op("Identity", 1, 1, infer_same));
  OpImpl dropout = view_op("Dropout", 1, 3, infer_dropout);
  dropout.out_max = 2;
  dropout.ref = ref_dropout;
  dropout.build = [](BuildCtx& b) {
    if (b.out.size() > 1) return b.refuse("its mask output is read; the view kernel computes no mask");
    return build_view(b);
  };
  t.add(dropout);

  OpImpl constant = ops::make_op("Constant", 0, 0, [](InferCtx& c) { c.fail("Constant is folded at load"); }, nullptr);
  constant.in_min = 0;
  t.add(constant);
  t.add(ops::make_op("Shape", 1, 1, infer_shape, nullptr));
  t.add(ops::make_op("Size", 1, 1, infer_size, nullptr));
  t.add(ops::make_op("ConstantOfShape", 1, 1, infer_constant_of_shape, ref_constant_of_shape));
  t.add(ops::make_op("Range", 3, 3, infer_range, nullptr));
  OpImpl transpose = ops::make_op("Transpose", 1, 1, infer_transpose, ref_transpose);
  transpose.build = build_transpose;
  t.add(transpose);
  t.add(ops::make_op("Concat", 1, -1, infer_concat, ref_concat));
  t.add(ops::make_op("Split", 1, 2, infer_split, ref_split, nullptr, 64));
  t.add(ops::make_op("Slice", 1, 5, infer_slice, ref_slice));
  t.add(ops::make_op("Gather", 2, 2, infer_gather, ref_gather));
  t.add(ops::make_op("Expand", 2, 2, infer_expand, ref_broadcast_copy));
  t.add(ops::make_op("Tile", 2, 2, infer_tile, ref_tile));
  t.add(ops::make_op("Pad", 1, 4, infer_pad, ref_pad));
  OpImpl cast = ops::make_op("Cast", 1, 1, infer_cast, ref_cast);
  cast.check = check_cast;
  t.add(cast);
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"}) t.add(ops::make_op(op, 1, 2, infer_reduce, ref_reduce));
  t.add(ops::make_op("ArgMax", 1, 1, infer_argmax, ref_argmax));
}

}  // namespace pare::rt
