// pare_rt's quantization ops: QuantizeLinear / DequantizeLinear (oneDNN scaled reorders per tensor,
// reference kernels per axis), dynamic quantization (DynamicQuantizeLinear, MatMulInteger),
// MatMulNBits (decoded to a float MatMul at load), and the int8 nodes the QDQ pass makes: QConv and
// QMatMul (oneDNN int8 primitives: u8/s8 activations x s8 weights, per-channel scales, zero points,
// fused activations, requantized output) and QAdd.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "rt/dnnl_compat.h"
#include "rt/internal.h"
#include "rt/nn.h"
#include "rt/ops_util.h"

namespace pare::rt {
namespace {

using ops::set_out;
using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;

// Round half to even (the default floating-point rounding mode) of v clamped to +-2^22: adding and
// subtracting 1.5 * 2^23 rounds exactly there, and vectorizes where nearbyint is a library call on
// baseline x86-64. Quantized values saturate far inside that range.
inline float clamp_value(float v, float lo, float hi) {  // by value: vectorizes (std::min/max return references)
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

inline float round_even(float v) {
  constexpr float kMagic = 12582912.f, kMax = 4194304.f;  // 1.5 * 2^23, 2^22
  return (clamp_value(v, -kMax, kMax) + kMagic) - kMagic;
}

// ONNX's QuantizeLinear of `v` = x / scale: round half to even, then add the zero point, then
// saturate (the order matters: round(v) + z and round(v + z) differ on ties when z is odd).
template <class T>
T quantize_value(float v, float zero) {
  const float lo = static_cast<float>(std::numeric_limits<T>::min()), hi = static_cast<float>(std::numeric_limits<T>::max());
  if constexpr (sizeof(T) == 1) {
    return static_cast<T>(static_cast<int32_t>(clamp_value(round_even(v) + zero, lo, hi)));
  } else {
    return static_cast<T>(std::min(std::max(std::nearbyint(v) + zero, lo), hi));
  }
}

// ---------------------------------------------------------------------------------------------
// QuantizeLinear / DequantizeLinear

// Per-element parameter index of a per-tensor (numel 1) or per-axis parameter.
struct AxisParam {
  int64_t outer = 1, len = 1, inner = 1;
  bool per_axis = false;
};

AxisParam axis_param(const std::vector<int64_t>& x, int64_t n_param, int64_t axis) {
  AxisParam a;
  if (n_param == 1) return a;
  a.per_axis = true;
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  for (int64_t k = 0; k < axis; ++k) a.outer *= x[static_cast<size_t>(k)];
  a.len = x[static_cast<size_t>(axis)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < x.size(); ++k) a.inner *= x[k];
  return a;
}

void check_params(InferCtx& c, const char* what) {
  const auto& x = c.in[0].dims;
  const int64_t n = numel_of(c.in[1].dims);
  c.check(c.in[1].dtype == DType::kFloat32, what, " scale must be float32");
  c.check(c.attrs().i("block_size", 0) == 0, "blocked quantization (block_size) is not supported");
  if (n != 1) {
    const int64_t axis = ops::axis(c, c.attrs().i("axis", 1), static_cast<int64_t>(x.size()));
    c.check(c.in[1].dims.size() == 1 && n == x[static_cast<size_t>(axis)], what, " scale of shape ",
            dims_str(c.in[1].dims), " is neither per tensor nor per axis ", axis, " of ", dims_str(x));
  }
  if (c.in.size() > 2 && c.in[2].present)
    c.check(numel_of(c.in[2].dims) == n, what, " zero point and scale differ in size");
}

void infer_quantize(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32 || c.in[0].dtype == DType::kInt32, "input must be float32");
  check_params(c, "y");
  DType t = DType::kUInt8;
  if (c.in.size() > 2 && c.in[2].present) {
    t = c.in[2].dtype;
    c.check(t == DType::kUInt8 || t == DType::kInt8, "zero point must be uint8 or int8, got ", dtype_name(t));
  }
  set_out(c, 0, t, c.in[0].dims);
}

void ref_quantize(RefCtx& c) {
  const auto& x = c.in[0];
  const View& s = c.in[1];
  const View* z = c.in.size() > 2 && c.in[2].data ? &c.in[2] : nullptr;
  const AxisParam ap = axis_param(x.dims, s.numel(), c.attrs().i("axis", 1));
  ops::dispatch(c.out[0].dtype, [&](auto t) {
    using T = decltype(t);
    T* y = c.out[0].ptr<T>();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t k = 0; k < n; ++k) {
      const int64_t p = ap.per_axis ? (k / ap.inner) % ap.len : 0;
      const float zp = z ? static_cast<float>(static_cast<const T*>(z->data)[p]) : 0.f;
      const float v = x.dtype == DType::kFloat32 ? x.ptr<float>()[k] : static_cast<float>(x.ptr<int32_t>()[k]);
      y[k] = quantize_value<T>(v / s.ptr<float>()[p], zp);
    }
  });
}

void infer_dequantize(InferCtx& c) {
  const DType t = c.in[0].dtype;
  c.check(t == DType::kUInt8 || t == DType::kInt8 || t == DType::kInt32, "input must be uint8, int8 or int32, got ",
          dtype_name(t));
  check_params(c, "x");
  if (c.in.size() > 2 && c.in[2].present) c.check(c.in[2].dtype == t, "zero point and input differ in type");
  set_out(c, 0, DType::kFloat32, c.in[0].dims);
}

void ref_dequantize(RefCtx& c) {
  const auto& x = c.in[0];
  const View& s = c.in[1];
  const View* z = c.in.size() > 2 && c.in[2].data ? &c.in[2] : nullptr;
  const AxisParam ap = axis_param(x.dims, s.numel(), c.attrs().i("axis", 1));
  ops::dispatch(x.dtype, [&](auto t) {
    using T = decltype(t);
    const T* q = x.ptr<T>();
    float* y = c.out[0].ptr<float>();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t k = 0; k < n; ++k) {
      const int64_t p = ap.per_axis ? (k / ap.inner) % ap.len : 0;
      const int64_t zp = z ? static_cast<int64_t>(static_cast<const T*>(z->data)[p]) : 0;
      y[k] = static_cast<float>(static_cast<int64_t>(q[k]) - zp) * s.ptr<float>()[p];
    }
  });
}

// y = saturate(round(x / scale) + zero) of a plain float tensor, written with `dst_strides` (row-major,
// or NHWC for an int8 conv): ONNX divides, where a oneDNN reorder would multiply by 1/scale and
// round differently on ties.
// Compiled for AVX2 as well as the baseline (the division is the cost: 8 lanes instead of 4), by
// GCC; clang (the sanitizer build) does not multiversion templates and compiles the baseline only.
#if defined(__clang__)
#define PARE_AVX2_CLONES
#else
#define PARE_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#endif
template <class T>
PARE_AVX2_CLONES void quantize_run(const float* __restrict x, T* __restrict y, int64_t n,
                                    int64_t y_stride, float scale, float zp) {
  if (y_stride == 1) {  // its own loop: the vectorizer wants a known unit stride
    for (int64_t k = 0; k < n; ++k) y[k] = quantize_value<T>(x[k] / scale, zp);
  } else {
    for (int64_t k = 0; k < n; ++k) y[k * y_stride] = quantize_value<T>(x[k] / scale, zp);
  }
}

template <class T>
void quantize_strided(const float* x, T* y, const std::vector<int64_t>& dims, bool nhwc, float scale, int32_t zero) {
  const float zp = static_cast<float>(zero);
  if (!nhwc) {
    ops::parallel_ranges(numel_of(dims), 32768,
                         [=](int64_t b, int64_t e) { quantize_run(x + b, y + b, e - b, 1, scale, zp); });
    return;
  }
  // NCHW in, NHWC out: each (image, channel) plane is read contiguously and written with stride C.
  const int64_t N = dims[0], C = dims[1], HW = dims[2] * dims[3];
  ops::parallel_ranges(N * C, 32768 / std::max<int64_t>(HW, 1), [=](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const int64_t img = plane / C, c = plane % C;
      quantize_run(x + plane * HW, y + img * HW * C + c, HW, C, scale, zp);
    }
  });
}

// Per-tensor Q/DQ with known parameters. DequantizeLinear is one oneDNN reorder in the input's own
// layout ((q - zero) * scale, as ONNX computes it). QuantizeLinear of a plain float tensor is our own
// loop (ONNX's division), writing NHWC directly when an int8 conv reads it; of a blocked one, a
// oneDNN reorder (multiplying by 1/scale: within one step of ONNX's rounding on ties).
bool build_qdq(BuildCtx& b, bool quantize) {
  const PValue& x = b.v(b.in[0]);
  const PValue& s = b.v(b.in[1]);
  const bool has_z = b.node.has_in(2);
  if (!s.known || s.known->numel() != 1)
    return b.refuse("the scale is not one known value (per-axis or computed at run time); the oneDNN reorder takes a "
                    "per-tensor constant scale");
  if (has_z && !b.v(b.in[2]).known) return b.refuse("the zero point is computed at run time; the oneDNN reorder takes a constant");
  if (!has_dnnl_type(x.dtype) || x.dtype == DType::kInt32)
    return b.refuse("the input is ", dtype_name(x.dtype), "; the oneDNN reorder takes float32, uint8 or int8");
  if (x.dims.empty()) return b.refuse("the input is a scalar; the oneDNN reorder takes rank 1 or more");
  const float scale = s.known->ptr<float>()[0];
  const int32_t zero = has_z ? static_cast<int32_t>(b.v(b.in[2]).known->i(0)) : 0;
  const PValue& y = b.v(b.out[0]);
  if (quantize && x.plain()) {
    const bool nhwc = x.dims.size() == 4 && b.feeds_int8_conv(b.node.out[0]);
    b.v(b.out[0]).md = nhwc ? md(x.dims, dnnl_type(y.dtype), tag::nhwc) : plain_md(y.dtype, y.dims);
    const int in = b.in[0], out = b.out[0];
    const std::vector<int64_t> dims = x.dims;
    const DType t = y.dtype;
    b.fn([=](RunCtx& ctx) {
      const float* src = static_cast<const float*>(ctx.ptr[static_cast<size_t>(in)]);
      void* dst = ctx.ptr[static_cast<size_t>(out)];
      if (t == DType::kUInt8) quantize_strided(src, static_cast<uint8_t*>(dst), dims, nhwc, scale, zero);
      else quantize_strided(src, static_cast<int8_t*>(dst), dims, nhwc, scale, zero);
    }, {in, out});
    return true;
  }
  const md dst = compat::retyped(x.md, dnnl_type(y.dtype));
  std::vector<std::pair<int, HTensor>> extra;
  auto pd = quantize ? compat::scaled_reorder(b.eng, x.md, dst, 1.f / scale, 0, zero, extra)
                     : compat::scaled_reorder(b.eng, x.md, dst, scale, zero, 0, extra);
  b.v(b.out[0]).md = dst;
  std::unordered_map<int, int> args = {{DNNL_ARG_SRC, b.in[0]}, {DNNL_ARG_DST, b.out[0]}};
  for (auto& [arg, t] : extra) args[arg] = b.constant(t);
  b.prim(dnnl::reorder(pd), args, b.node.label());
  return true;
}

// ---------------------------------------------------------------------------------------------
// Dynamic quantization

void infer_dynamic_quantize(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32, "input must be float32");
  set_out(c, 0, DType::kUInt8, c.in[0].dims);
  if (c.out.size() > 1) set_out(c, 1, DType::kFloat32, {});
  if (c.out.size() > 2) set_out(c, 2, DType::kUInt8, {});
}

void ref_dynamic_quantize(RefCtx& c) {
  const float* x = c.in[0].ptr<float>();
  const int64_t n = c.in[0].numel();
  float lo = 0, hi = 0;  // the range always includes 0
  for (int64_t k = 0; k < n; ++k) {
    lo = std::min(lo, x[k]);
    hi = std::max(hi, x[k]);
  }
  const float scale = (hi - lo) / 255.f;
  const uint8_t zp = scale > 0 ? quantize_value<uint8_t>(0.f - lo / scale, 0.f) : 0;
  uint8_t* y = c.out[0].ptr<uint8_t>();
#pragma omp parallel for if (n > 65536)
  for (int64_t k = 0; k < n; ++k) y[k] = scale > 0 ? quantize_value<uint8_t>(x[k] / scale, zp) : zp;
  if (c.out.size() > 1 && c.out[1].data) c.out[1].ptr<float>()[0] = scale;
  if (c.out.size() > 2 && c.out[2].data) c.out[2].ptr<uint8_t>()[0] = zp;
}

void infer_matmul_integer(InferCtx& c) {
  for (size_t k = 0; k < 2; ++k)
    c.check(c.in[k].dtype == DType::kUInt8 || c.in[k].dtype == DType::kInt8, "inputs must be uint8 or int8");
  for (size_t k = 2; k < c.in.size(); ++k)
    if (c.in[k].present) c.check(numel_of(c.in[k].dims) == 1, "only per-tensor zero points are supported");
  set_out(c, 0, DType::kInt32, matmul_out_dims(c, c.in[0].dims, c.in[1].dims));
}

void ref_matmul_integer(RefCtx& c) {
  const MatmulDims d = matmul_dims(c.in[0].dims, c.in[1].dims);
  const size_t r = d.a.size();
  const int64_t M = d.a[r - 2], K = d.a[r - 1], N = d.b[r - 1];
  std::vector<int64_t> batch(d.y.begin(), d.y.end() - 2);
  const std::vector<int64_t> ba(d.a.begin(), d.a.end() - 2), bb(d.b.begin(), d.b.end() - 2);
  const std::vector<int64_t> st[2] = {ops::broadcast_strides(ba, batch), ops::broadcast_strides(bb, batch)};
  auto zp = [&](size_t k) -> int32_t {
    if (c.in.size() <= k || !c.in[k].data) return 0;
    return c.in[k].dtype == DType::kUInt8 ? c.in[k].ptr<uint8_t>()[0] : c.in[k].ptr<int8_t>()[0];
  };
  const int32_t za = zp(2), zb = zp(3);
  auto val = [](const View& v, int64_t i) -> int32_t {
    return v.dtype == DType::kUInt8 ? v.ptr<uint8_t>()[i] : v.ptr<int8_t>()[i];
  };
  int32_t* y = c.out[0].ptr<int32_t>();
  auto one = [&](int64_t o, const int64_t* off) {
#pragma omp parallel for if (M * N * K > 65536)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        int32_t s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += (val(c.in[0], off[0] * M * K + i * K + k) - za) * (val(c.in[1], off[1] * K * N + k * N + j) - zb);
        y[o * M * N + i * N + j] = s;
      }
  };
  if (batch.empty()) {
    const int64_t off[2] = {0, 0};
    one(0, off);
  } else {
    ops::broadcast_loop<2>(batch, st, one);
  }
}

// ---------------------------------------------------------------------------------------------
// The int8 nodes of the QDQ pass

compat::Int8Scales int8_scales(const QuantInfo& q, int dst_mask, int wei_mask) {
  compat::Int8Scales s;
  s.src_scale = q.x_scale;
  s.wei_scale = q.w_scale;
  const bool per_channel = q.w_scale.size() > 1;
  s.dst_mask = per_channel ? dst_mask : 0;
  s.wei_mask = per_channel ? wei_mask : 0;
  s.dst_scale = q.requantize ? q.y_scale : 1.f;
  s.src_zero = q.x_zero;
  s.dst_zero = q.requantize ? q.y_zero : 0;
  s.sum = q.sum;
  s.sum_scale = q.sum_scale;
  s.sum_zero = q.sum_zero;
  s.mid_scale = q.mid_scale;
  s.mid_zero = q.mid_zero;
  s.mid_lo = q.mid_type == DType::kInt8 ? -128.f : 0.f;
  s.mid_hi = q.mid_type == DType::kInt8 ? 127.f : 255.f;
  return s;
}

// The activation's zero point moved into the bias: sum((x - zx) * w) = sum(x * w) - zx * sum(w) per
// output channel, exact where no padding reads a zero that stands for zx (MatMul; Conv without
// pads). `w_rows` weights per channel, laid out channel-major (Conv [M, ...]) or channel-minor
// (MatMul [K, N]). Returns the new accumulator-domain bias.
HTensor fold_src_zero(const QuantInfo& q, const HTensor& w, int64_t channels, bool channel_major) {
  const int64_t per = w.numel() / channels;
  HTensor bias = q.bias && q.bias->dtype == DType::kFloat32 ? HTensor::zeros(DType::kFloat32, {channels})
                                                             : HTensor::zeros(DType::kInt32, {channels});
  const int8_t* pw = w.ptr<int8_t>();
  for (int64_t c = 0; c < channels; ++c) {
    int64_t sum = 0;
    for (int64_t k = 0; k < per; ++k) sum += channel_major ? pw[c * per + k] : pw[k * channels + c];
    const int64_t comp = static_cast<int64_t>(q.x_zero) * sum;
    if (bias.dtype == DType::kFloat32) bias.ptr<float>()[c] = static_cast<float>(q.bias->f(c) - static_cast<double>(comp));
    else bias.ptr<int32_t>()[c] = static_cast<int32_t>((q.bias ? q.bias->i(c) : 0) - comp);
  }
  return bias;
}

// oneDNN's int8 kernels without VNNI take s8 activations by halving the weights (its "scale adjust"),
// which costs the weights' last bit; u8 activations do not. s8 values shifted by 128 (x ^ 0x80) are
// the same numbers as u8 with the zero point shifted by 128: exact, for one pass over the input.
int as_u8(BuildCtx& b, int x, QuantInfo& q) {
  if (b.v(x).dtype != DType::kInt8) return x;
  const md m = compat::retyped(b.v(x).md, dnnl::memory::data_type::u8);
  const int u = b.temp(DType::kUInt8, b.v(x).dims, m);
  const int64_t bytes = static_cast<int64_t>(m.get_size());
  b.fn([x, u, bytes](RunCtx& ctx) {
    const auto* src = static_cast<const uint8_t*>(ctx.ptr[static_cast<size_t>(x)]);
    auto* dst = static_cast<uint8_t*>(ctx.ptr[static_cast<size_t>(u)]);
#pragma omp parallel for if (bytes > 65536)
    for (int64_t k = 0; k < bytes; ++k) dst[k] = src[k] ^ 0x80;
  }, {x, u});
  q.x_zero += 128;
  return u;
}

void infer_qconv(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kUInt8 || c.in[0].dtype == DType::kInt8, "int8 input expected");
  const auto out = conv_out_dims(c, c.in[0].dims, c.in[1].dims, nullptr);
  const DType t = c.node.q.requantize ? c.node.q.y_type : DType::kFloat32;
  if (c.node.q.sum)
    c.check(c.in[2].dims == out && c.in[2].dtype == t, "the residual input ", dims_str(c.in[2].dims), " ",
            dtype_name(c.in[2].dtype), " does not match the convolution's output ", dims_str(out), " ", dtype_name(t),
            " (rerun with PARE_RT_INT8=0)");
  set_out(c, 0, t, out);
}

bool build_qconv(BuildCtx& b) {
  const Node& n = b.node;
  const PValue& x = b.v(b.in[0]);
  const HTensor& w = *b.v(b.in[1]).known;
  const Window win = window_at(n, x.dims, {w.dims.begin() + 2, w.dims.end()}, false);
  const int64_t group = n.attrs.i("group", 1);
  const PValue& y = b.v(b.out[0]);
  const auto s8 = dnnl::memory::data_type::s8;
  bool padded = false;
  for (size_t k = 0; k < win.pads_begin.size(); ++k) padded = padded || win.pads_begin[k] || win.pads_end[k];
  QuantInfo q = n.q;
  const int x_in = as_u8(b, b.in[0], q);
  if (q.x_zero && !padded) {  // oneDNN's source zero point costs up to 40%; the bias does it for free
    q.bias = fold_src_zero(q, w, w.dims[0], true);
    q.x_zero = 0;
  }
  std::optional<HTensor> bias = q.bias;
  dnnl::primitive_attr attr;
  auto extra = compat::set_int8_attr(attr, int8_scales(q, 1 << 1, group > 1 ? 3 : 1), n.post, bias ? &*bias : nullptr);
  const md bias_md = bias ? md({w.dims[0]}, dnnl_type(bias->dtype), tag::x) : md();
  auto pd = compat::conv_pd(b.eng, md(x.dims, dnnl::memory::data_type::u8, tag::any), conv_weights_md(w.dims, group, s8, true),
                            bias_md, md(y.dims, dnnl_type(y.dtype), tag::any), win.strides,
                            compat::dilations(win.dilations), win.pads_begin, win.pads_end, attr);
  const int src = b.as(x_in, pd.src_desc());
  const int wt = b.weight(w, conv_weights_md(w.dims, group, s8, false), pd.weights_desc());
  if (q.sum) {
    // The residual goes into dst first: the conv adds its own result to it. In place when nothing
    // reads the residual later, else copied (and laid out as the conv writes).
    // A residual that is itself written in place (the previous block's output) is fine: each link of
    // the chain was checked to have no later reader.
    const PValue& r = b.v(b.in[2]);
    const PValue& root = b.v(b.root(b.in[2]));
    if (q.inplace && r.md == pd.dst_desc() && root.input < 0 && !root.known && !r.known) {
      b.v(b.out[0]).md = pd.dst_desc();
      b.v(b.out[0]).alias = b.in[2];
    } else {
      b.v(b.out[0]).md = pd.dst_desc();
      dnnl::reorder::primitive_desc rd(b.eng, r.md, b.eng, pd.dst_desc());
      b.prim(dnnl::reorder(rd), {{DNNL_ARG_SRC, b.in[2]}, {DNNL_ARG_DST, b.out[0]}}, n.label() + " residual");
    }
  } else {
    b.v(b.out[0]).md = pd.dst_desc();
  }
  std::unordered_map<int, int> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wt}, {DNNL_ARG_DST, b.out[0]}};
  if (bias) args[DNNL_ARG_BIAS] = b.constant(*bias);
  for (auto& [arg, t] : extra) args[arg] = b.constant(t);
  b.prim(dnnl::convolution_forward(pd), args, n.label(), conv_macs(w.dims, y.dims));
  return true;
}

void infer_qmatmul(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kUInt8 || c.in[0].dtype == DType::kInt8, "int8 input expected");
  set_out(c, 0, c.node.q.requantize ? c.node.q.y_type : DType::kFloat32,
          matmul_out_dims(c, c.in[0].dims, c.in[1].dims));
}

// x [.., K] (int8) @ w [K, N] (int8): a oneDNN inner product for 2-D x (its int8 kernel beats
// matmul's at small batches here), matmul for batched x. The activation's zero point is folded
// into the bias.
bool build_qmatmul(BuildCtx& b) {
  const Node& n = b.node;
  const HTensor& w = *b.v(b.in[1]).known;  // [K, N]
  const MatmulDims d = matmul_dims(b.v(b.in[0]).dims, w.dims);
  const int r = static_cast<int>(d.y.size());
  const PValue& y = b.v(b.out[0]);
  const int64_t K = w.dims[0], N = w.dims[1];
  QuantInfo q = n.q;
  const int a = b.plain(as_u8(b, b.plain(b.in[0]), q));
  const DType xt = DType::kUInt8;
  if (q.x_zero) {
    q.bias = fold_src_zero(q, w, N, false);
    q.x_zero = 0;
  }
  std::optional<HTensor> bias = q.bias;
  const auto s8 = dnnl::memory::data_type::s8;
  b.v(b.out[0]).md = plain_md(y.dtype, y.dims);
  std::unordered_map<int, int> args;
  dnnl::primitive prim;
  if (r == 2) {
    const int64_t M = d.a[0];
    dnnl::primitive_attr attr;
    auto extra = compat::set_int8_attr(attr, int8_scales(q, 1 << 1, 1), n.post, bias ? &*bias : nullptr);
    const md bias_md = bias ? md({N}, dnnl_type(bias->dtype), tag::x) : md();
    auto pd = compat::inner_product_pd(b.eng, md({M, K}, dnnl_type(xt), tag::ab), md({N, K}, s8, tag::any), bias_md,
                                       md({M, N}, dnnl_type(y.dtype), tag::ab), attr);
    const int av = b.temp(xt, {M, K}, pd.src_desc());
    b.v(av).alias = a;
    // w [K, N] row-major read as [N, K] with strides (1, N).
    const int wt = b.weight(w, md({N, K}, s8, {1, N}), pd.weights_desc());
    const int yv = b.temp(y.dtype, {M, N}, pd.dst_desc());
    b.v(yv).alias = b.out[0];
    args = {{DNNL_ARG_SRC, av}, {DNNL_ARG_WEIGHTS, wt}, {DNNL_ARG_DST, yv}};
    if (bias) args[DNNL_ARG_BIAS] = b.constant(*bias);
    for (auto& [arg, t] : extra) args[arg] = b.constant(t);
    prim = dnnl::inner_product_forward(pd);
  } else {
    dnnl::primitive_attr attr;
    const int mask = 1 << (r - 1);
    auto extra = compat::set_int8_attr(attr, int8_scales(q, mask, mask), n.post, bias ? &*bias : nullptr);
    std::vector<int64_t> bdims(static_cast<size_t>(r), 1);
    bdims.back() = N;
    const md bias_md = bias ? md(bdims, dnnl_type(bias->dtype), row_major_strides(bdims)) : md();
    auto pd = compat::matmul_pd(b.eng, md(d.a, dnnl_type(xt), row_major_strides(d.a)), md(d.b, s8, tag::any), bias_md,
                                md(d.y, dnnl_type(y.dtype), row_major_strides(d.y)), attr);
    const int av = b.temp(xt, d.a, pd.src_desc());
    b.v(av).alias = a;
    const int wt = b.weight(w, md(d.b, s8, row_major_strides(d.b)), pd.weights_desc());
    const int yv = b.temp(y.dtype, d.y, pd.dst_desc());
    b.v(yv).alias = b.out[0];
    args = {{DNNL_ARG_SRC, av}, {DNNL_ARG_WEIGHTS, wt}, {DNNL_ARG_DST, yv}};
    if (bias) {
      args[DNNL_ARG_BIAS] = b.constant(*bias);
      b.v(args[DNNL_ARG_BIAS]).md = bias_md;
    }
    for (auto& [arg, t] : extra) args[arg] = b.constant(t);
    prim = dnnl::matmul(pd);
  }
  b.prim(prim, args, n.label(), numel_of(d.y) * K);
  return true;
}

void infer_qadd(InferCtx& c) {
  for (size_t k = 0; k < 2; ++k)
    c.check(c.in[k].dtype == DType::kUInt8 || c.in[k].dtype == DType::kInt8, "int8 inputs expected");
  set_out(c, 0, c.node.q.requantize ? c.node.q.y_type : DType::kFloat32,
          ops::broadcast_dims(c, {c.in[0].dims, c.in[1].dims}));
}

// y = post(sa * (a - za) + sb * (b - zb)), requantized to y's scale when the node says so.
struct QAddParams {
  float sa, za, sb, zb, lo, hi, sy, zy;
};

template <class A, class B, class Y>
void qadd_run(const A* __restrict a, const B* __restrict b, Y* __restrict y, int64_t n, const int64_t* ia,
              const int64_t* ib, const QAddParams p) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = ia ? ia[k] : k, j = ib ? ib[k] : k;
    float v = p.sa * (static_cast<float>(a[i]) - p.za) + p.sb * (static_cast<float>(b[j]) - p.zb);
    v = clamp_value(v, p.lo, p.hi);
    if constexpr (std::is_same_v<Y, float>) y[k] = v;
    else y[k] = quantize_value<Y>(v / p.sy, p.zy);
  }
}

template <class A, class B, class Y>
void qadd_loop(const QuantInfo& q, const std::vector<PostOp>& post, const A* a, const B* b, Y* y, int64_t n,
               const int64_t* ia, const int64_t* ib) {
  QAddParams p{q.x_scale, static_cast<float>(q.x_zero), q.b_scale, static_cast<float>(q.b_zero),
               -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(), q.y_scale,
               static_cast<float>(q.y_zero)};
  for (auto& op : post) {
    if (op.alg == dnnl::algorithm::eltwise_relu) p.lo = std::max(p.lo, 0.f);
    else if (op.alg == dnnl::algorithm::eltwise_clip) p.lo = std::max(p.lo, op.alpha), p.hi = std::min(p.hi, op.beta);
  }
  ops::parallel_ranges(n, 16384, [=](int64_t s, int64_t e) {
    if (ia) qadd_run(a, b, y + s, e - s, ia + s, ib + s, p);
    else qadd_run(a + s, b + s, y + s, e - s, nullptr, nullptr, p);
  });
}

void run_qadd(const Node& n, const View& a, const View& b, const View& y, bool broadcast) {
  std::vector<int64_t> ia, ib;
  if (broadcast) {
    const std::vector<int64_t> st[2] = {ops::broadcast_strides(a.dims, y.dims), ops::broadcast_strides(b.dims, y.dims)};
    ia.resize(static_cast<size_t>(y.numel()));
    ib.resize(static_cast<size_t>(y.numel()));
    ops::broadcast_loop<2>(y.dims, st, [&](int64_t o, const int64_t* off) {
      ia[static_cast<size_t>(o)] = off[0];
      ib[static_cast<size_t>(o)] = off[1];
    });
  }
  const int64_t* pa = broadcast ? ia.data() : nullptr;
  const int64_t* pb = broadcast ? ib.data() : nullptr;
  const int64_t count = y.numel();
  ops::dispatch(a.dtype, [&](auto ta) {
    using A = decltype(ta);
    ops::dispatch(b.dtype, [&](auto tb) {
      using B = decltype(tb);
      if (y.dtype == DType::kFloat32) qadd_loop(n.q, n.post, a.ptr<A>(), b.ptr<B>(), y.ptr<float>(), count, pa, pb);
      else if (y.dtype == DType::kUInt8) qadd_loop(n.q, n.post, a.ptr<A>(), b.ptr<B>(), y.ptr<uint8_t>(), count, pa, pb);
      else qadd_loop(n.q, n.post, a.ptr<A>(), b.ptr<B>(), y.ptr<int8_t>(), count, pa, pb);
    });
  });
}

void ref_qadd(RefCtx& c) { run_qadd(c.node, c.in[0], c.in[1], c.out[0], c.in[0].dims != c.in[1].dims); }

// Same shapes: elementwise over the bytes of whatever dense layout input 0 has (NHWC from an int8
// conv), input 1 brought to that layout.
bool build_qadd(BuildCtx& b) {
  const PValue& a = b.v(b.in[0]);
  const PValue& y = b.v(b.out[0]);
  if (a.dims != b.v(b.in[1]).dims)
    return b.refuse("the inputs have dims ", dims_str(a.dims), " and ", dims_str(b.v(b.in[1]).dims),
                    "; the int8 add kernel takes equal shapes (no broadcast)");
  if (a.dims.empty()) return b.refuse("the inputs are scalars; the int8 add kernel takes rank 1 or more");
  if (a.md.get_size() != static_cast<size_t>(numel_of(a.dims) * dtype_size(a.dtype)))
    return b.refuse("input 0 is in a padded layout; the int8 add kernel takes dense bytes");
  const int bb = b.as(b.in[1], compat::retyped(a.md, dnnl_type(b.v(b.in[1]).dtype)));
  b.v(b.out[0]).md = compat::retyped(a.md, dnnl_type(y.dtype));
  const Node& n = b.node;
  const int ia = b.in[0], ib = bb, io = b.out[0];
  // Views with the logical dims, made once (the bytes are dense in the shared layout, which
  // elementwise math does not care about); each run only points them at its bytes.
  auto views = std::make_shared<std::array<View, 3>>(std::array<View, 3>{
      View{b.v(ia).dtype, b.v(ia).dims, nullptr}, View{b.v(ib).dtype, b.v(ib).dims, nullptr},
      View{b.v(io).dtype, b.v(io).dims, nullptr}});
  b.fn([&n, views, ia, ib, io](RunCtx& ctx) {
    auto& v = *views;
    v[0].data = ctx.ptr[static_cast<size_t>(ia)];
    v[1].data = ctx.ptr[static_cast<size_t>(ib)];
    v[2].data = ctx.ptr[static_cast<size_t>(io)];
    run_qadd(n, v[0], v[1], v[2], false);
  }, {ia, ib, io});
  return true;
}

// ---------------------------------------------------------------------------------------------
// MatMulNBits: decoded at load

std::string check_nbits(Node& n, const Graph& g) {
  for (size_t k = 1; k < n.in.size(); ++k)
    if (n.has_in(k) && !g.constant(n.in[k])) return "MatMulNBits with weights computed at run time is not supported";
  if (n.attrs.i("bits", 4) != 4) return "MatMulNBits supports bits=4";
  return "";
}


}  // namespace

bool decode_matmul_nbits(Graph& g) {
  const size_t count = g.nodes.size();
  bool changed = false;
  for (size_t i = 0; i < count; ++i) {
    Node& n = g.nodes[i];
    if (n.dead || n.op != "MatMulNBits" || n.domain != "com.microsoft") continue;
    const int64_t K = n.attrs.i("K", 0), N = n.attrs.i("N", 0), block = n.attrs.i("block_size", 0);
    PARE_CHECK(K > 0 && N > 0 && block >= 16 && (block & (block - 1)) == 0, n.label(),
               ": MatMulNBits needs K, N > 0 and a power-of-two block_size >= 16, got K=", K, " N=", N,
               " block_size=", block);
    const int64_t blocks = (K + block - 1) / block;
    const HTensor* q = g.constant(n.in[1]);
    const HTensor* s = g.constant(n.in[2]);
    const HTensor* z = n.has_in(3) ? g.constant(n.in[3]) : nullptr;
    PARE_CHECK(q->dtype == DType::kUInt8 && q->numel() == N * blocks * block / 2, n.label(),
               ": B must be uint8 [N, ceil(K / block_size), block_size / 2] = [", N, ", ", blocks, ", ", block / 2, "]");
    PARE_CHECK(s->dtype == DType::kFloat32 && s->numel() == N * blocks, n.label(), ": scales must hold N * blocks = ",
               N * blocks, " float32 values");
    PARE_CHECK(!z || (z->dtype == DType::kUInt8 && z->numel() >= N * ((blocks + 1) / 2)), n.label(),
               ": only packed uint8 zero points are supported");
    PARE_CHECK(!n.has_in(4) && (!n.has_in(5) || g.constant(n.in[5])), n.label(),
               ": g_idx and a computed bias are not supported");
    HTensor w = HTensor::zeros(DType::kFloat32, {K, N});  // W^T: the MatMul's [K, N]
    const int64_t zrow = (blocks + 1) / 2;
    for (int64_t r = 0; r < N; ++r)
      for (int64_t bl = 0; bl < blocks; ++bl) {
        float zp = 8;
        if (z) {
          const uint8_t byte = z->ptr<uint8_t>()[r * zrow + bl / 2];
          zp = static_cast<float>(bl % 2 ? byte >> 4 : byte & 15);
        }
        const float sc = s->ptr<float>()[r * blocks + bl];
        for (int64_t j = 0; j < block && bl * block + j < K; ++j) {
          const uint8_t byte = q->ptr<uint8_t>()[(r * blocks + bl) * (block / 2) + j / 2];
          const float code = static_cast<float>(j % 2 ? byte >> 4 : byte & 15);
          w.ptr<float>()[(bl * block + j) * N + r] = (code - zp) * sc;
        }
      }
    const int wv = g.value(g.values[static_cast<size_t>(n.in[1])].name + "#decoded");
    g.values[static_cast<size_t>(wv)].constant = w;
    const int bias = n.has_in(5) ? n.in[5] : -1;
    Node& m = g.nodes[i];
    m.op = "MatMul";
    m.domain = "";
    m.attrs = Attrs();
    m.in = {m.in[0], wv};
    if (bias >= 0) {
      const int y = m.out[0];
      const int mid = g.value(g.values[static_cast<size_t>(y)].name + "#matmul");
      m.out[0] = mid;
      g.values[static_cast<size_t>(mid)].producer = static_cast<int>(i);
      Node add;
      add.op = "Add";
      add.name = m.name + "#bias";
      add.index = m.index;
      add.in = {mid, bias};
      add.out = {y};
      g.nodes.push_back(std::move(add));
      g.values[static_cast<size_t>(y)].producer = static_cast<int>(g.nodes.size()) - 1;
    }
    changed = true;
  }
  return changed;
}

void register_quant_ops(OpTable& t) {
  using ops::make_op;
  t.add(make_op("QuantizeLinear", 2, 3, infer_quantize, ref_quantize, [](BuildCtx& b) { return build_qdq(b, true); }));
  t.add(make_op("DequantizeLinear", 2, 3, infer_dequantize, ref_dequantize,
                [](BuildCtx& b) { return build_qdq(b, false); }));
  t.add(make_op("DynamicQuantizeLinear", 1, 1, infer_dynamic_quantize, ref_dynamic_quantize, nullptr, 3));
  t.add(make_op("MatMulInteger", 2, 4, infer_matmul_integer, ref_matmul_integer));
  OpImpl nbits =
      make_op("MatMulNBits", 3, 6, [](InferCtx& c) { c.fail("decoded at load"); }, nullptr, nullptr, 1, "com.microsoft");
  nbits.check = check_nbits;
  t.add(nbits);
  t.add(make_op("QConv", 2, 3, infer_qconv, nullptr, build_qconv, 1, "pare_rt"));
  t.add(make_op("QMatMul", 2, 2, infer_qmatmul, nullptr, build_qmatmul, 1, "pare_rt"));
  t.add(make_op("QAdd", 2, 2, infer_qadd, ref_qadd, build_qadd, 1, "pare_rt"));
}

}  // namespace pare::rt
