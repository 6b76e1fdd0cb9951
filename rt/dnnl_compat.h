// The one place where pare_rt meets oneDNN's API differences. Debian 12 ships oneDNN 2.6: primitives
// are created from an op descriptor, int8 scales are attributes fixed at creation
// (`set_output_scales`), bias lives in the accumulator domain, and an eltwise post-op carries an
// output scale. oneDNN 3.x creates primitive descriptors directly, takes scales as run-time
// arguments (`set_scales_mask` + DNNL_ARG_ATTR_SCALES), adds bias after dequantization, and its
// eltwise post-ops have no scale. Everything else in pare_rt calls these functions.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <unordered_map>
#include <vector>

#include "rt/internal.h"

namespace pare::rt::compat {

using md = dnnl::memory::desc;
using dnnl::memory;

/// True when `m` lays its elements out row-major with no padding (dims of size 1 ignored).
inline bool is_row_major(const md& m) {
#if DNNL_VERSION_MAJOR < 3
  const auto& d = m.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || d.extra.flags != 0) return false;
  const auto* strides = d.format_desc.blocking.strides;
  const auto* padded = d.padded_dims;
  const memory::dims dims = m.dims();
#else
  if (m.get_format_kind() != memory::format_kind::blocked || m.get_inner_nblks() != 0) return false;
  const auto strides = m.get_strides();
  const auto padded = m.get_padded_dims();
  const memory::dims dims = m.get_dims();
#endif
  int64_t expect = 1;
  for (size_t k = dims.size(); k-- > 0;) {
    if (dims[k] == 1) continue;
    if (padded[k] != dims[k] || strides[k] != expect) return false;
    expect *= dims[k];
  }
  return true;
}

/// `m` with another data type, same layout.
inline md retyped(const md& m, memory::data_type dt) {
#if DNNL_VERSION_MAJOR < 3
  md r = m;
  r.data.data_type = static_cast<dnnl_data_type_t>(dt);
  return r;
#else
  if (is_row_major(m)) return md(m.get_dims(), dt, m.get_strides());
  return md(m.get_dims(), dt, memory::format_tag::any);
#endif
}

/// A key that tells layouts apart (for caches).
inline std::string md_key(const md& m) {
#if DNNL_VERSION_MAJOR < 3
  return std::string(reinterpret_cast<const char*>(&m.data), sizeof(m.data));
#else
  std::string k = std::to_string(static_cast<int>(m.get_data_type())) + ":" + std::to_string(m.get_size());
  for (auto d : m.get_dims()) k += "," + std::to_string(d);
  for (auto d : m.get_strides()) k += ";" + std::to_string(d);
  for (auto d : m.get_inner_blks()) k += "/" + std::to_string(d);
  for (auto d : m.get_inner_idxs()) k += "." + std::to_string(d);
  return k;
#endif
}

/// How an int8 compute primitive maps accumulators to its output:
///   y = post_ops(acc * src_scale * wei_scale[c] (+ bias)) / dst_scale + dst_zero
/// Per-output-channel weight scales are selected by a mask over the destination's dims in 2.x
/// (`dst_mask`) and over the weights' dims in 3.x (`wei_mask`); 0: one scale.
/// With `sum`, the real value of the tensor already in dst, sum_scale * (dst - sum_zero), is added
/// before the post-ops (a residual Add fused into the Conv before it).
struct Int8Scales {
  float src_scale = 1;
  std::vector<float> wei_scale;
  int dst_mask = 0, wei_mask = 0;
  float dst_scale = 1;  ///< 1 for a float output
  int32_t src_zero = 0, dst_zero = 0;
  bool sum = false;
  float sum_scale = 1;
  int32_t sum_zero = 0;
  /// With `sum`: the conv's own output grid (scale, zero point, integer range), which its real
  /// result is rounded to before the sum, as the QDQ graph's QuantizeLinear does.
  float mid_scale = 1;
  int32_t mid_zero = 0;
  float mid_lo = 0, mid_hi = 255;
};

/// Sets `attr` for an int8 primitive with `post` fused, and returns the run-time arguments the
/// primitive needs besides src/weights/dst (oneDNN 3.x: scale and zero-point memories; 2.x: none).
/// `acc_bias`, a bias in the accumulator domain, is converted to what the version expects.
inline std::vector<std::pair<int, HTensor>> set_int8_attr(dnnl::primitive_attr& attr, const Int8Scales& q,
                                                          const std::vector<PostOp>& post, HTensor* acc_bias) {
  std::vector<std::pair<int, HTensor>> args;
#if DNNL_VERSION_MAJOR < 3
  // 2.x: y = post_ops(output_scale * acc). The destination's scale and zero point are folded into the
  // post-ops: a zero point set as an attribute sends oneDNN 2.6's AVX2 int8 convolution down a path
  // measured 20-45% slower than a final linear post-op (y / dst_scale + dst_zero).
  // oneDNN 2.6's AVX2 int8 kernels compute wrong results when one eltwise algorithm appears twice
  // in a chain (two linear post-ops: off by up to 24 codes; tests/export/rt_lowering_test.cpp), so
  // every algorithm is used once at most: the sum's rounding uses round, clip with the eltwise
  // scale, and the shifted bounds round(v) + z in [lo, hi] <=> round(v) in [lo - z, hi - z].
  // The requantization is round(v / dst_scale) + dst_zero, rounded before the zero point is added
  // (on ties round(v + z) differs from round(v) + z when z is odd): 1/dst_scale goes into the
  // output scales, or into the last activation's eltwise scale (ReLU and Clip commute with it), and
  // an explicit round precedes a linear +dst_zero.
  const bool requant = q.dst_scale != 1.f || q.dst_zero != 0;
  const bool fold = post.empty() && !q.sum;
  const float pre = q.sum ? 1.f / q.mid_scale : (fold ? 1.f / q.dst_scale : 1.f);
  std::vector<float> out(q.wei_scale.size());
  for (size_t c = 0; c < out.size(); ++c) out[c] = q.src_scale * q.wei_scale[c] * pre;
  attr.set_output_scales(q.dst_mask, out);
  if (q.src_zero) attr.set_zero_points(DNNL_ARG_SRC, 0, {q.src_zero});
  dnnl::post_ops po;
  if (q.sum) {  // the conv's own requantization, back to real: (round(v / s) clamped) * s
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_round, 0.f, 0.f);
    po.append_eltwise(q.mid_scale, dnnl::algorithm::eltwise_clip, q.mid_lo - static_cast<float>(q.mid_zero),
                      q.mid_hi - static_cast<float>(q.mid_zero));
    po.append_sum(q.sum_scale, q.sum_zero);
  }
  for (size_t i = 0; i < post.size(); ++i)
    po.append_eltwise(requant && i + 1 == post.size() ? 1.f / q.dst_scale : 1.f, post[i].alg, post[i].alpha, post[i].beta);
  if (requant && q.sum && post.empty()) {
    // round is taken by the conv's own rounding: the zero point goes in with the scale (on exact
    // ties with an odd zero point this can round one step off the QDQ graph)
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f / q.dst_scale, static_cast<float>(q.dst_zero));
  } else if (requant && q.dst_zero) {
    if (!q.sum) po.append_eltwise(1.f, dnnl::algorithm::eltwise_round, 0.f, 0.f);
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f, static_cast<float>(q.dst_zero));
  }
  attr.set_post_ops(po);
  (void)acc_bias;  // 2.x adds the bias to the accumulators: as given
#else
  attr.set_scales_mask(DNNL_ARG_SRC, 0);
  attr.set_scales_mask(DNNL_ARG_WEIGHTS, q.wei_mask);
  if (q.dst_scale != 1.f) attr.set_scales_mask(DNNL_ARG_DST, 0);
  if (q.src_zero) attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
  if (q.dst_zero) attr.set_zero_points_mask(DNNL_ARG_DST, 0);
  dnnl::post_ops po;
  if (q.sum) {  // untested: written from oneDNN 3.x's documentation
    po.append_eltwise(dnnl::algorithm::eltwise_linear, 1.f / q.mid_scale, 0.f);
    po.append_eltwise(dnnl::algorithm::eltwise_round, 0.f, 0.f);
    po.append_eltwise(dnnl::algorithm::eltwise_clip, q.mid_lo - static_cast<float>(q.mid_zero),
                      q.mid_hi - static_cast<float>(q.mid_zero));
    po.append_eltwise(dnnl::algorithm::eltwise_linear, q.mid_scale, 0.f);
    po.append_sum(q.sum_scale, q.sum_zero);
  }
  for (auto& p : post) po.append_eltwise(p.alg, p.alpha, p.beta);
  attr.set_post_ops(po);
  auto scalar_f = [](float v) {
    HTensor t = HTensor::zeros(DType::kFloat32, {1});
    t.ptr<float>()[0] = v;
    return t;
  };
  auto scalar_i = [](int32_t v) {
    HTensor t = HTensor::zeros(DType::kInt32, {1});
    t.ptr<int32_t>()[0] = v;
    return t;
  };
  args.emplace_back(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, scalar_f(q.src_scale));
  HTensor w = HTensor::zeros(DType::kFloat32, {static_cast<int64_t>(q.wei_scale.size())});
  for (size_t c = 0; c < q.wei_scale.size(); ++c) w.ptr<float>()[c] = q.wei_scale[c];
  args.emplace_back(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, w);
  if (q.dst_scale != 1.f) args.emplace_back(DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, scalar_f(q.dst_scale));
  if (q.src_zero) args.emplace_back(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, scalar_i(q.src_zero));
  if (q.dst_zero) args.emplace_back(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, scalar_i(q.dst_zero));
  if (acc_bias && acc_bias->data) {  // 3.x adds a float bias after dequantization
    HTensor b = HTensor::zeros(DType::kFloat32, acc_bias->dims);
    const int64_t n = b.numel();
    for (int64_t c = 0; c < n; ++c)
      b.ptr<float>()[c] = static_cast<float>(acc_bias->f(c)) * q.src_scale * q.wei_scale[q.wei_mask ? c : 0];
    *acc_bias = b;
  }
#endif
  return args;
}

/// Post-ops of a float primitive.
inline dnnl::post_ops float_post_ops(const std::vector<PostOp>& post) {
  dnnl::post_ops po;
#if DNNL_VERSION_MAJOR < 3
  for (auto& p : post) po.append_eltwise(1.f, p.alg, p.alpha, p.beta);
#else
  for (auto& p : post) po.append_eltwise(p.alg, p.alpha, p.beta);
#endif
  return po;
}

/// A quantize / dequantize reorder: dst = src * scale (+ dst_zero), src - src_zero first.
inline dnnl::reorder::primitive_desc scaled_reorder(const dnnl::engine& eng, const md& src, const md& dst, float scale,
                                                    int32_t src_zero, int32_t dst_zero,
                                                    std::vector<std::pair<int, HTensor>>& args) {
  dnnl::primitive_attr attr;
#if DNNL_VERSION_MAJOR < 3
  attr.set_output_scales(0, {scale});
  if (src_zero) attr.set_zero_points(DNNL_ARG_SRC, 0, {src_zero});
  if (dst_zero) attr.set_zero_points(DNNL_ARG_DST, 0, {dst_zero});
  (void)args;
#else
  // 3.x: dst = src_scale * (src - src_zero) / dst_scale + dst_zero.
  attr.set_scales_mask(DNNL_ARG_DST, 0);
  HTensor s = HTensor::zeros(DType::kFloat32, {1});
  s.ptr<float>()[0] = 1.f / scale;
  args.emplace_back(DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, s);
  auto zp = [&](int arg, int32_t v) {
    attr.set_zero_points_mask(arg, 0);
    HTensor z = HTensor::zeros(DType::kInt32, {1});
    z.ptr<int32_t>()[0] = v;
    args.emplace_back(DNNL_ARG_ATTR_ZERO_POINTS | arg, z);
  };
  if (src_zero) zp(DNNL_ARG_SRC, src_zero);
  if (dst_zero) zp(DNNL_ARG_DST, dst_zero);
#endif
  return dnnl::reorder::primitive_desc(eng, src, eng, dst, attr);
}

inline dnnl::convolution_forward::primitive_desc conv_pd(const dnnl::engine& eng, const md& src, const md& wei,
                                                         const md& bias, const md& dst, const memory::dims& strides,
                                                         const memory::dims& dilates, const memory::dims& pad_l,
                                                         const memory::dims& pad_r, const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR < 3
  auto d = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           src, wei, bias, dst, strides, dilates, pad_l, pad_r);
  return dnnl::convolution_forward::primitive_desc(d, attr, eng);
#else
  return dnnl::convolution_forward::primitive_desc(eng, dnnl::prop_kind::forward_inference,
                                                   dnnl::algorithm::convolution_direct, src, wei, bias, dst, strides,
                                                   dilates, pad_l, pad_r, attr);
#endif
}

inline dnnl::matmul::primitive_desc matmul_pd(const dnnl::engine& eng, const md& src, const md& wei, const md& bias,
                                              const md& dst, const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR < 3
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, bias, dst), attr, eng);
#else
  return dnnl::matmul::primitive_desc(eng, src, wei, bias, dst, attr);
#endif
}

inline dnnl::inner_product_forward::primitive_desc inner_product_pd(const dnnl::engine& eng, const md& src,
                                                                    const md& wei, const md& bias, const md& dst,
                                                                    const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR < 3
  auto d = dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, src, wei, bias, dst);
  return dnnl::inner_product_forward::primitive_desc(d, attr, eng);
#else
  return dnnl::inner_product_forward::primitive_desc(eng, dnnl::prop_kind::forward_inference, src, wei, bias, dst,
                                                     attr);
#endif
}

#if DNNL_VERSION_MAJOR < 3
using pooling = dnnl::pooling_v2_forward;
#else
using pooling = dnnl::pooling_forward;
#endif

inline pooling::primitive_desc pool_pd(const dnnl::engine& eng, dnnl::algorithm alg, const md& src, const md& dst,
                                       const memory::dims& strides, const memory::dims& kernel,
                                       const memory::dims& dilation, const memory::dims& pad_l,
                                       const memory::dims& pad_r) {
#if DNNL_VERSION_MAJOR < 3
  auto d = pooling::desc(dnnl::prop_kind::forward_inference, alg, src, dst, strides, kernel, dilation, pad_l, pad_r);
  return pooling::primitive_desc(d, eng);
#else
  return pooling::primitive_desc(eng, dnnl::prop_kind::forward_inference, alg, src, dst, strides, kernel, dilation,
                                 pad_l, pad_r);
#endif
}

inline dnnl::eltwise_forward::primitive_desc eltwise_pd(const dnnl::engine& eng, dnnl::algorithm alg, const md& src,
                                                        const md& dst, float alpha, float beta) {
#if DNNL_VERSION_MAJOR < 3
  (void)dst;  // 2.x eltwise writes in the source's layout
  auto d = dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, src, alpha, beta);
  return dnnl::eltwise_forward::primitive_desc(d, eng);
#else
  return dnnl::eltwise_forward::primitive_desc(eng, dnnl::prop_kind::forward_inference, alg, src, dst, alpha, beta);
#endif
}

inline dnnl::binary::primitive_desc binary_pd(const dnnl::engine& eng, dnnl::algorithm alg, const md& a, const md& b,
                                              const md& dst, const std::vector<PostOp>& post) {
  dnnl::primitive_attr attr;
  attr.set_post_ops(float_post_ops(post));
#if DNNL_VERSION_MAJOR < 3
  return dnnl::binary::primitive_desc(dnnl::binary::desc(alg, a, b, dst), attr, eng);
#else
  return dnnl::binary::primitive_desc(eng, alg, a, b, dst, attr);
#endif
}

inline dnnl::softmax_forward::primitive_desc softmax_pd(const dnnl::engine& eng, const md& src, int axis) {
#if DNNL_VERSION_MAJOR < 3
  auto d = dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, src, axis);
  return dnnl::softmax_forward::primitive_desc(d, eng);
#else
  return dnnl::softmax_forward::primitive_desc(eng, dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::softmax_accurate, src, src, axis);
#endif
}

/// ONNX dilations (1 = none) as oneDNN counts them (0 = none, in 2.x and 3.x).
inline memory::dims dilations(const std::vector<int64_t>& onnx) {
  memory::dims d;
  for (int64_t v : onnx) d.push_back(v - 1);
  return d;
}

}  // namespace pare::rt::compat
