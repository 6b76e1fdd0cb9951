// Resize (opsets 10 to 19), Upsample (opsets 7 to 9) and GridSample. Resize: nearest, linear and cubic interpolation
// along any axes, with every coordinate transformation mode of ONNX and the tf_crop_and_resize
// extrapolation, as ONNX's reference implementation defines them (onnx/reference/ops/op_resize.py).
//
// Interpolation is separable: each resized axis in turn is a weighted sum of a few input slices
// ("taps": 1 for nearest, 2 for linear, 4 for cubic), whose indices and weights depend only on
// the output position. So the forward is index_select and multiply-add, differentiable in the
// input, and its cost is taps x output size (no [out, in] interpolation matrix).
#include <cmath>
#include <set>

#include "core/op_registry.h"
#include "core/ops_util.h"

namespace pare::core {
namespace {

using ops::has_input;
using ops::spec_float;
using ops::spec_int;
using ops::spec_ints;
using ops::spec_string;
using Tensors = std::vector<at::Tensor>;

enum class Mode { kNearest, kLinear, kCubic };

// How one node resizes: its attributes, resolved once.
struct Resizing {
  Mode mode = Mode::kNearest;
  std::string coord = "half_pixel";
  std::string nearest = "round_prefer_floor";  // or "simple": floor up, ceil down (opsets < 11)
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
};

// One output axis: for each output position, `n` input indices (clamped to the axis) and weights,
// and whether the position lies outside the crop (tf_crop_and_resize: extrapolation_value).
struct Taps {
  int64_t n = 1;
  std::vector<int64_t> index;  // [out * n]
  std::vector<double> weight;  // [out * n]
  std::vector<bool> outside;   // [out]
  bool any_outside = false;
};

Mode parse_mode(const Node& n) {
  const std::string m = n.attr_string("mode", "nearest");
  if (m == "nearest") return Mode::kNearest;
  if (m == "linear" || m == "bilinear" || m == "trilinear") return Mode::kLinear;
  if (m == "cubic" || m == "bicubic") return Mode::kCubic;
  PARE_CHECK(false, n.describe(), ": mode must be nearest, linear or cubic, got '", m, "'");
  return Mode::kNearest;
}

// The input coordinate of output position x. `width` is scale * in_len as ONNX's reference takes
// it (a fraction when scales are given: align_corners divides by width - 1, not by out_len - 1).
double source_coordinate(const Resizing& r, double x, double scale, int64_t in_len, int64_t out_len,
                         double width, double roi_start, double roi_end) {
  const std::string& c = r.coord;
  if (c == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (c == "asymmetric") return x / scale;
  if (c == "tf_half_pixel_for_nn") return (x + 0.5) / scale;  // opsets 11 and 12
  if (c == "pytorch_half_pixel") return width == 1.0 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (c == "align_corners") return width == 1.0 ? 0.0 : x * (in_len - 1) / (width - 1);
  if (c == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out_len) / width;
    const double center = in_len / 2.0;
    return center * (1 - adjustment) + (x + 0.5) / scale - 0.5;
  }
  // tf_crop_and_resize (checked by the caller)
  const double span = (roi_end - roi_start) * (in_len - 1);
  return roi_start * (in_len - 1) + (width == 1.0 ? span / 2 : x * span / (width - 1));
}

std::vector<double> cubic_coefficients(double t, double A) {
  const double s = 1 - t;
  return {((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
          ((A + 2) * t - (A + 3)) * t * t + 1,
          ((A + 2) * s - (A + 3)) * s * s + 1,
          ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A};
}

Taps axis_taps(const Resizing& r, int64_t in_len, int64_t out_len, double scale, double width, double roi_start,
               double roi_end) {
  Taps t;
  t.n = r.mode == Mode::kNearest ? 1 : r.mode == Mode::kLinear ? 2 : 4;
  t.outside.assign(out_len, false);
  auto clamp = [in_len](int64_t i) { return std::min<int64_t>(std::max<int64_t>(i, 0), in_len - 1); };
  for (int64_t x = 0; x < out_len; ++x) {
    const double src = source_coordinate(r, static_cast<double>(x), scale, in_len, out_len, width, roi_start, roi_end);
    if (r.coord == "tf_crop_and_resize" && (src < 0 || src > in_len - 1)) {
      t.outside[x] = t.any_outside = true;
    }
    const double fl = std::floor(src);
    const int64_t i0 = static_cast<int64_t>(fl);
    const double frac = src - fl;  // in [0, 1): 0 puts all weight on i0
    if (r.mode == Mode::kNearest) {
      int64_t i = i0;
      if (frac > 0) {
        const std::string& m = r.nearest;
        bool up = false;
        if (m == "round_prefer_floor") up = frac > 0.5;
        else if (m == "round_prefer_ceil") up = frac >= 0.5;
        else if (m == "ceil") up = true;
        else if (m == "simple") up = scale < 1;
        i += up ? 1 : 0;
      }
      t.index.push_back(clamp(i));
      t.weight.push_back(1.0);
      continue;
    }
    std::vector<double> w = r.mode == Mode::kLinear ? std::vector<double>{1 - frac, frac}
                                                    : cubic_coefficients(frac, r.cubic_a);
    const int64_t first = r.mode == Mode::kLinear ? i0 : i0 - 1;
    if (r.exclude_outside) {
      double sum = 0;
      for (int64_t k = 0; k < t.n; ++k) {
        if (first + k < 0 || first + k >= in_len) w[k] = 0;
        sum += w[k];
      }
      for (auto& v : w) v = sum != 0 ? v / sum : 0;
    }
    for (int64_t k = 0; k < t.n; ++k) {
      t.index.push_back(clamp(first + k));
      t.weight.push_back(w[k]);
    }
  }
  return t;
}

// x resized along `axis` by `t`.
at::Tensor apply_taps(const at::Tensor& x, int64_t axis, const Taps& t, int64_t out_len) {
  auto cpu_long = at::TensorOptions().dtype(at::kLong);
  at::Tensor idx = at::tensor(at::ArrayRef<int64_t>(t.index), cpu_long).reshape({out_len, t.n}).to(x.device());
  if (t.n == 1) return x.index_select(axis, idx.select(1, 0));
  at::Tensor w = at::tensor(at::ArrayRef<double>(t.weight), at::TensorOptions().dtype(at::kDouble))
                     .reshape({out_len, t.n})
                     .to(x.options());
  std::vector<int64_t> shape(x.dim(), 1);
  shape[axis] = out_len;
  at::Tensor y;
  for (int64_t k = 0; k < t.n; ++k) {
    at::Tensor term = x.index_select(axis, idx.select(1, k)) * w.select(1, k).reshape(shape);
    y = y.defined() ? y + term : term;
  }
  return y;
}

// Values of a float input (scales, roi) as doubles.
std::vector<double> to_doubles(const at::Tensor& t) {
  at::Tensor c = t.to(at::kDouble).contiguous().cpu().reshape({-1});
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

struct Plan {
  std::vector<int64_t> axes, out;
  std::vector<double> scale, width, roi_start, roi_end;
};

// The output size and scale of every resized axis, from scales or sizes.
Plan plan_resize(const Node& n, const at::Tensor& x, const at::Tensor& roi, const at::Tensor& scales,
                 const at::Tensor& sizes, const Resizing& r) {
  const int64_t rank = x.dim();
  Plan p;
  if (n.has_attr("axes")) {
    for (int64_t a : n.attr_ints("axes")) p.axes.push_back(ops::normalize_axis(a, rank, n, "axes"));
  } else {
    for (int64_t a = 0; a < rank; ++a) p.axes.push_back(a);
  }
  const size_t k = p.axes.size();
  PARE_CHECK(scales.defined() != sizes.defined(), n.describe(), ": Resize needs exactly one of scales and sizes");
  p.roi_start.assign(k, 0.0);
  p.roi_end.assign(k, 1.0);
  if (r.coord == "tf_crop_and_resize") {
    PARE_CHECK(roi.defined(), n.describe(), ": tf_crop_and_resize needs roi");
    auto v = to_doubles(roi);
    PARE_CHECK(v.size() == 2 * k, n.describe(), ": roi needs ", 2 * k, " values (starts, then ends), got ", v.size());
    for (size_t i = 0; i < k; ++i) p.roi_start[i] = v[i], p.roi_end[i] = v[k + i];
  }
  constexpr int64_t kMaxLen = int64_t{1} << 31;
  if (scales.defined()) {
    auto s = to_doubles(scales);
    PARE_CHECK(s.size() == k, n.describe(), ": scales needs ", k, " values, got ", s.size());
    for (size_t i = 0; i < k; ++i) {
      PARE_CHECK(s[i] > 0 && std::isfinite(s[i]), n.describe(), ": scales must be positive, got ", s[i]);
      const double width = s[i] * x.size(p.axes[i]);
      const double len = std::floor(width * (p.roi_end[i] - p.roi_start[i]));
      PARE_CHECK(len >= 0 && len < kMaxLen, n.describe(), ": scale ", s[i], " gives an output length of ", len);
      p.out.push_back(static_cast<int64_t>(len));
      p.scale.push_back(s[i]);
      p.width.push_back(width);
    }
    return p;
  }
  PARE_CHECK(!at::isFloatingType(sizes.scalar_type()), n.describe(), ": sizes must be int64");
  auto sz = to_int_vector(sizes);
  PARE_CHECK(sz.size() == k, n.describe(), ": sizes needs ", k, " values, got ", sz.size());
  const std::string policy = n.attr_string("keep_aspect_ratio_policy", "stretch");
  PARE_CHECK(policy == "stretch" || policy == "not_larger" || policy == "not_smaller", n.describe(),
             ": keep_aspect_ratio_policy must be stretch, not_larger or not_smaller, got '", policy, "'");
  double common = policy == "not_larger" ? INFINITY : 0.0;
  for (size_t i = 0; i < k; ++i) {
    PARE_CHECK(sz[i] >= 0 && sz[i] < kMaxLen, n.describe(), ": sizes must be in [0, 2^31), got ", sz[i]);
    PARE_CHECK(x.size(p.axes[i]) > 0, n.describe(), ": cannot resize an empty axis");
    const double s = static_cast<double>(sz[i]) / x.size(p.axes[i]);
    common = policy == "not_larger" ? std::min(common, s) : std::max(common, s);
  }
  for (size_t i = 0; i < k; ++i) {
    const int64_t in_len = x.size(p.axes[i]);
    const double s = policy == "stretch" ? static_cast<double>(sz[i]) / in_len : common;
    const int64_t len = policy == "stretch" ? sz[i] : static_cast<int64_t>(std::floor(s * in_len + 0.5));
    p.out.push_back(len);
    p.scale.push_back(s);
    p.width.push_back(policy == "stretch" ? static_cast<double>(len) : s * in_len);
  }
  return p;
}

at::Tensor resize(const Node& n, const at::Tensor& x_in, const at::Tensor& roi, const at::Tensor& scales,
                  const at::Tensor& sizes, const Resizing& r) {
  PARE_CHECK(n.attr_int("antialias", 0) == 0, n.describe(), ": antialias=1 is not supported");
  PARE_CHECK(r.mode == Mode::kNearest || at::isFloatingType(x_in.scalar_type()), n.describe(),
             ": linear and cubic modes need a floating-point input, got ", x_in.scalar_type());
  static const std::set<std::string> coords = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                               "align_corners", "asymmetric", "tf_crop_and_resize",
                                               "tf_half_pixel_for_nn"};
  PARE_CHECK(coords.count(r.coord), n.describe(), ": unknown coordinate_transformation_mode '", r.coord, "'");
  static const std::set<std::string> nearest = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"};
  PARE_CHECK(nearest.count(r.nearest), n.describe(), ": unknown nearest_mode '", r.nearest, "'");
  const Plan p = plan_resize(n, x_in, roi, scales, sizes, r);
  // Half-precision inputs interpolate in float32.
  const bool narrow = x_in.scalar_type() == at::kHalf || x_in.scalar_type() == at::kBFloat16;
  at::Tensor y = narrow ? x_in.to(at::kFloat) : x_in;
  at::Tensor outside;
  for (size_t i = 0; i < p.axes.size(); ++i) {
    const int64_t axis = p.axes[i], in_len = y.size(axis);
    if (p.out[i] == in_len && p.scale[i] == 1.0 && r.coord != "tf_crop_and_resize") continue;
    PARE_CHECK(in_len > 0 || p.out[i] == 0, n.describe(), ": cannot resize an empty axis");
    const Taps t = axis_taps(r, in_len, p.out[i], p.scale[i], p.width[i], p.roi_start[i], p.roi_end[i]);
    y = apply_taps(y, axis, t, p.out[i]);
    if (t.any_outside) {
      std::vector<int64_t> shape(y.dim(), 1);
      shape[axis] = p.out[i];
      std::vector<uint8_t> bits(t.outside.begin(), t.outside.end());
      at::Tensor m = at::tensor(at::ArrayRef<uint8_t>(bits), at::TensorOptions().dtype(at::kByte))
                         .to(at::kBool).reshape(shape).to(y.device());
      outside = outside.defined() ? outside.logical_or(m) : m;
    }
  }
  if (outside.defined()) y = at::where(outside, at::scalar_tensor(r.extrapolation, y.options()), y);
  return narrow ? y.to(x_in.scalar_type()) : y;
}

// FLOPs: a multiply-add per tap per output element, for every axis whose size changes.
FlopsFn resize_flops() {
  return [](const Node& n, const std::vector<std::vector<int64_t>>& in,
            const std::vector<std::vector<int64_t>>& out) -> int64_t {
    if (in.empty() || out.empty() || in[0].size() != out[0].size()) return 0;
    const std::string m = n.attr_string("mode", "nearest");
    const int64_t taps = m == "nearest" ? 0 : (m == "cubic" || m == "bicubic") ? 4 : 2;
    int64_t axes = 0;
    for (size_t i = 0; i < in[0].size(); ++i) axes += in[0][i] != out[0][i];
    return 2 * taps * axes * ops::numel(out[0]);
  };
}

Resizing resizing_of(const Node& n) {
  Resizing r;
  r.mode = parse_mode(n);
  r.coord = n.attr_string("coordinate_transformation_mode", "half_pixel");
  r.nearest = n.attr_string("nearest_mode", "round_prefer_floor");
  r.cubic_a = n.attr_float("cubic_coeff_a", -0.75f);
  r.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
  r.extrapolation = n.attr_float("extrapolation_value", 0.0f);
  return r;
}

at::Tensor optional_input(const Tensors& in, size_t i) {
  return has_input(in, i) && in[i].numel() > 0 ? in[i] : at::Tensor();
}

OpDef resize_op() {
  OpDef d = ops::op_def("Resize", 2, 4,
                        "interpolates X (nearest, linear or cubic `mode`) to `sizes` (input 3) or by `scales` "
                        "(input 2), on every axis or on `axes`; inputs (X, scales) are opset 10's form");
  d.attrs = {spec_int("antialias"),        spec_ints("axes"),
             spec_string("coordinate_transformation_mode"), spec_float("cubic_coeff_a"),
             spec_int("exclude_outside"),  spec_float("extrapolation_value"),
             spec_string("keep_aspect_ratio_policy"), spec_string("mode"),
             spec_string("nearest_mode")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    Resizing r = resizing_of(n);
    if (in.size() == 2) {  // opset 10: (X, scales), asymmetric, no other attributes
      r.coord = "asymmetric";
      r.nearest = "simple";
      return {resize(n, in[0], {}, in[1], {}, r)};
    }
    return {resize(n, in.at(0), optional_input(in, 1), optional_input(in, 2), optional_input(in, 3), r)};
  };
  d.flops = resize_flops();
  d.traits.opaque_channels = true;
  return d;
}

OpDef upsample_op() {
  OpDef d = ops::op_def("Upsample", 1, 2,
                        "Resize by `scales` (input 1, or the attribute in opset 7) with asymmetric coordinates; "
                        "mode nearest or linear (deprecated since opset 10)");
  d.attrs = {spec_string("mode"), ops::spec_floats("scales")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    Resizing r = resizing_of(n);
    PARE_CHECK(r.mode != Mode::kCubic, n.describe(), ": Upsample mode must be nearest or linear");
    r.coord = "asymmetric";
    r.nearest = "simple";
    at::Tensor scales;
    if (has_input(in, 1)) {
      scales = in[1];
    } else {
      auto v = n.attr_floats("scales");
      PARE_CHECK(!v.empty(), n.describe(), ": Upsample needs scales (input 1 or attribute)");
      scales = at::tensor(at::ArrayRef<float>(v), at::kFloat);
    }
    return {resize(n, in.at(0), {}, scales, {}, r)};
  };
  d.flops = resize_flops();
  d.traits.opaque_channels = true;
  return d;
}

// GridSample (opset 16, and 20's names): X [N, C, H, W] sampled at the normalised [-1, 1]
// coordinates of grid [N, Ho, Wo, 2] (x, y), by libtorch's grid_sampler, which ONNX's op follows.
OpDef grid_sample_op() {
  OpDef d = ops::op_def("GridSample", 2, 2,
                        "X [N, C, H, W] sampled at grid [N, Ho, Wo, 2]; mode bilinear, nearest or bicubic, "
                        "padding_mode zeros, border or reflection, align_corners");
  d.attrs = {spec_int("align_corners"), spec_string("mode"), spec_string("padding_mode")};
  d.forward = [](const Node& n, const Tensors& in, const RunContext&) -> Tensors {
    const at::Tensor &x = in.at(0), &grid = in.at(1);
    PARE_CHECK(x.dim() == 4 && grid.dim() == 4 && grid.size(0) == x.size(0) && grid.size(3) == 2 &&
                   x.is_floating_point(),
               n.describe(), ": needs floating-point X [N, C, H, W] and grid [N, Ho, Wo, 2], got ", x.sizes(),
               " and ", grid.sizes());
    const std::string mode = n.attr_string("mode", "bilinear"), pad = n.attr_string("padding_mode", "zeros");
    int64_t m = 0, p = 0;
    if (mode == "bilinear" || mode == "linear") m = 0;
    else if (mode == "nearest") m = 1;
    else if (mode == "bicubic" || mode == "cubic") m = 2;
    else PARE_CHECK(false, n.describe(), ": mode must be bilinear, nearest or bicubic, got '", mode, "'");
    if (pad == "zeros") p = 0;
    else if (pad == "border") p = 1;
    else if (pad == "reflection") p = 2;
    else PARE_CHECK(false, n.describe(), ": padding_mode must be zeros, border or reflection, got '", pad, "'");
    return {at::grid_sampler(x, grid.to(x.scalar_type()), m, p, n.attr_int("align_corners", 0) != 0)};
  };
  d.flops = [](const Node& n, const std::vector<std::vector<int64_t>>&,
               const std::vector<std::vector<int64_t>>& out) -> int64_t {
    const std::string m = n.attr_string("mode", "bilinear");
    const int64_t taps = m == "nearest" ? 0 : (m == "bicubic" || m == "cubic") ? 16 : 4;
    return out.empty() ? 0 : 2 * taps * ops::numel(out[0]);
  };
  d.traits.opaque_channels = true;
  return d;
}

}  // namespace

void register_resize_ops(OpRegistry& reg) {
  reg.add(resize_op());
  reg.add(upsample_op());
  reg.add(grid_sample_op());
}

}  // namespace pare::core
