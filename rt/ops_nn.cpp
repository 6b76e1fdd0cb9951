// pare_rt's compute ops on oneDNN: Conv (weights reordered once into the layout oneDNN picks,
// activations fused as post-ops), Gemm and MatMul (oneDNN matmul), pooling. Also the window
// geometry (auto_pad, ceil_mode) that Conv and pooling share with the int8 nodes.
#include <cmath>
#include <cstring>

#include "rt/dnnl_compat.h"
#include "rt/internal.h"
#include "rt/nn.h"
#include "rt/ops_util.h"

namespace pare::rt {

using ops::set_out;
using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;

Window window_of(const InferCtx& c, const std::vector<int64_t>& x, const std::vector<int64_t>& kernel, bool pool) {
  const size_t sp = x.size() - 2;
  const Attrs& a = c.attrs();
  Window w;
  w.kernel = kernel;
  w.strides = a.ints("strides", std::vector<int64_t>(sp, 1));
  w.dilations = a.ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = a.ints("pads", std::vector<int64_t>(2 * sp, 0));
  c.check(w.kernel.size() == sp && w.strides.size() == sp && w.dilations.size() == sp && pads.size() == 2 * sp,
          "kernel_shape, strides, dilations or pads do not fit ", sp, " spatial dims of input ", dims_str(x));
  const std::string auto_pad = a.s("auto_pad", "NOTSET");
  const bool ceil = pool && a.i("ceil_mode", 0) != 0;
  w.pads_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(sp));
  w.pads_end.assign(pads.begin() + static_cast<int64_t>(sp), pads.end());
  for (size_t k = 0; k < sp; ++k) {
    const int64_t in = x[k + 2], s = w.strides[k], d = w.dilations[k];
    c.check(s > 0 && d > 0 && w.kernel[k] > 0, "strides, dilations and kernel_shape must be positive");
    const int64_t ext = (w.kernel[k] - 1) * d + 1;
    int64_t out;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>((out - 1) * s + ext - in, 0);
      const int64_t small = total / 2;
      w.pads_begin[k] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.pads_end[k] = total - w.pads_begin[k];
    } else {
      c.check(auto_pad == "NOTSET" || auto_pad == "VALID", "auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, "
              "SAME_LOWER, VALID");
      if (auto_pad == "VALID") w.pads_begin[k] = w.pads_end[k] = 0;
      c.check(w.pads_begin[k] >= 0 && w.pads_end[k] >= 0, "negative pads are not supported");
      const int64_t span = in + w.pads_begin[k] + w.pads_end[k] - ext;
      c.check(span >= 0, "kernel extent ", ext, " exceeds the padded input (", in + w.pads_begin[k] + w.pads_end[k], ")");
      out = (ceil ? (span + s - 1) / s : span / s) + 1;
      // ceil_mode: the last window must start inside the input or the left padding.
      if (ceil && (out - 1) * s >= in + w.pads_begin[k]) --out;
      // oneDNN wants the right padding that gives exactly `out`.
      w.pads_end[k] = (out - 1) * s + ext - in - w.pads_begin[k];
    }
    w.out.push_back(out);
  }
  return w;
}

std::vector<int64_t> conv_out_dims(const InferCtx& c, const std::vector<int64_t>& x, const std::vector<int64_t>& wdims,
                                   Window* win) {
  c.check(x.size() >= 3 && x.size() <= 5, "input must be [N, C, spatial...] of rank 3 to 5, got ", dims_str(x));
  c.check(wdims.size() == x.size(), "weight ", dims_str(wdims), " does not match input ", dims_str(x));
  const int64_t group = c.attrs().i("group", 1);
  c.check(group >= 1 && x[1] % group == 0 && wdims[0] % group == 0 && wdims[1] * group == x[1], "weight ",
          dims_str(wdims), " with group ", group, " does not match input ", dims_str(x));
  std::vector<int64_t> kernel(wdims.begin() + 2, wdims.end());
  if (c.attrs().has("kernel_shape"))
    c.check(c.attrs().ints("kernel_shape") == kernel, "kernel_shape does not match the weight ", dims_str(wdims));
  Window w = window_of(c, x, kernel, false);
  std::vector<int64_t> out = {x[0], wdims[0]};
  out.insert(out.end(), w.out.begin(), w.out.end());
  if (win) *win = w;
  return out;
}

// The Window of a node at plan time (after infer ran on the same dims).
Window window_at(const Node& n, const std::vector<int64_t>& x, const std::vector<int64_t>& kernel, bool pool) {
  InferCtx c{n, {}, {}, {}};
  return window_of(c, x, kernel, pool);
}

md conv_weights_md(const std::vector<int64_t>& w, int64_t group, dnnl::memory::data_type dt, bool any) {
  std::vector<int64_t> d = w;
  if (group > 1) {
    d[0] /= group;
    d.insert(d.begin(), group);
  }
  return any ? md(d, dt, tag::any) : md(d, dt, row_major_strides(d));
}

namespace {

// ---------------------------------------------------------------------------------------------
// Conv

void infer_conv(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32 && c.in[1].dtype == DType::kFloat32, "needs float32 input and weight");
  if (c.in.size() > 2 && c.in[2].present)
    c.check(numel_of(c.in[2].dims) == c.in[1].dims[0], "bias ", dims_str(c.in[2].dims), " does not match ",
            c.in[1].dims[0], " output channels");
  set_out(c, 0, DType::kFloat32, conv_out_dims(c, c.in[0].dims, c.in[1].dims, nullptr));
}

bool build_conv(BuildCtx& b) {
  if (!b.v(b.in[1]).known || (b.node.has_in(2) && !b.v(b.in[2]).known))
    b.fail("Conv with a weight or bias computed at run time is not supported");
  const PValue& x = b.v(b.in[0]);
  const HTensor& w = *b.v(b.in[1]).known;
  const Window win = window_at(b.node, x.dims, {w.dims.begin() + 2, w.dims.end()}, false);
  const int64_t group = b.node.attrs.i("group", 1);
  const auto f32 = dnnl::memory::data_type::f32;
  const PValue& y = b.v(b.out[0]);
  const md src(x.dims, f32, tag::any), dst(y.dims, f32, tag::any);
  const md bias = b.node.has_in(2) ? md({w.dims[0]}, f32, tag::x) : md();
  dnnl::primitive_attr attr;
  attr.set_post_ops(compat::float_post_ops(b.node.post));
  auto pd = compat::conv_pd(b.eng, src, conv_weights_md(w.dims, group, f32, true), bias, dst, win.strides,
                            compat::dilations(win.dilations), win.pads_begin, win.pads_end, attr);
  const int s = b.as(b.in[0], pd.src_desc());
  const int wt = b.weight(w, conv_weights_md(w.dims, group, f32, false), pd.weights_desc());
  b.v(b.out[0]).md = pd.dst_desc();
  std::unordered_map<int, int> args = {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, wt}, {DNNL_ARG_DST, b.out[0]}};
  if (b.node.has_in(2)) args[DNNL_ARG_BIAS] = b.weight(*b.v(b.in[2]).known, bias);
  b.prim(dnnl::convolution_forward(pd), args, b.node.label(), conv_macs(w.dims, b.v(b.out[0]).dims));
  return true;
}

// ---------------------------------------------------------------------------------------------
// MatMul and Gemm

void infer_matmul(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32 && c.in[1].dtype == DType::kFloat32, "needs float32 inputs, got ",
          dtype_name(c.in[0].dtype), " and ", dtype_name(c.in[1].dtype));
  set_out(c, 0, DType::kFloat32, matmul_out_dims(c, c.in[0].dims, c.in[1].dims));
}

void ref_matmul(RefCtx& c) {
  // Used only to fold constants: a plain loop over the broadcast batch.
  std::vector<int64_t> a = c.in[0].dims, b = c.in[1].dims;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  std::vector<int64_t> batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  const size_t r = std::max(batch_a.size(), batch_b.size());
  batch_a.insert(batch_a.begin(), r - batch_a.size(), 1);
  batch_b.insert(batch_b.begin(), r - batch_b.size(), 1);
  std::vector<int64_t> batch(r);
  for (size_t k = 0; k < r; ++k) batch[k] = std::max(batch_a[k], batch_b[k]);
  const std::vector<int64_t> st[2] = {ops::broadcast_strides(batch_a, batch), ops::broadcast_strides(batch_b, batch)};
  const float* A = c.in[0].ptr<float>();
  const float* B = c.in[1].ptr<float>();
  float* Y = c.out[0].ptr<float>();
  auto one = [&](int64_t o, const int64_t* off) {
    const float* pa = A + off[0] * M * K;
    const float* pb = B + off[1] * K * N;
    float* py = Y + o * M * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += static_cast<double>(pa[i * K + k]) * pb[k * N + j];
        py[i * N + j] = static_cast<float>(s);
      }
  };
  if (batch.empty()) {
    const int64_t off[2] = {0, 0};
    one(0, off);
  } else {
    ops::broadcast_loop<2>(batch, st, one);
  }
}

bool build_matmul(BuildCtx& b) {
  MatmulDims d = matmul_dims(b.v(b.in[0]).dims, b.v(b.in[1]).dims);
  const auto f32 = dnnl::memory::data_type::f32;
  const int a = b.plain(b.in[0]);
  const PValue& wv = b.v(b.in[1]);
  const md wmd = wv.known ? md(d.b, f32, tag::any) : md(d.b, f32, row_major_strides(d.b));
  dnnl::primitive_attr attr;
  attr.set_post_ops(compat::float_post_ops(b.node.post));
  auto pd = compat::matmul_pd(b.eng, md(d.a, f32, row_major_strides(d.a)), wmd, md(), md(d.y, f32, row_major_strides(d.y)), attr);
  const int av = b.temp(DType::kFloat32, d.a, pd.src_desc());
  b.v(av).alias = a;
  const int w = wv.known ? b.weight(*wv.known, md(d.b, f32, row_major_strides(d.b)), pd.weights_desc()) : [&] {
    const int p = b.plain(b.in[1]);
    const int t = b.temp(DType::kFloat32, d.b, pd.weights_desc());
    b.v(t).alias = p;
    return t;
  }();
  PValue& y = b.v(b.out[0]);
  y.md = plain_md(y.dtype, y.dims);
  const int yv = b.temp(DType::kFloat32, d.y, pd.dst_desc());
  b.v(yv).alias = b.out[0];
  b.prim(dnnl::matmul(pd), {{DNNL_ARG_SRC, av}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, yv}}, b.node.label(),
         numel_of(d.y) * d.a.back());
  return true;
}

void infer_gemm(InferCtx& c) {
  const auto &a = c.in[0].dims, &w = c.in[1].dims;
  c.check(c.in[0].dtype == DType::kFloat32 && c.in[1].dtype == DType::kFloat32, "needs float32 inputs");
  c.check(a.size() == 2 && w.size() == 2, "A and B must be 2-D, got ", dims_str(a), " and ", dims_str(w));
  const bool ta = c.attrs().i("transA", 0) != 0, tb = c.attrs().i("transB", 0) != 0;
  const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1], K2 = tb ? w[1] : w[0], N = tb ? w[0] : w[1];
  c.check(K == K2, "A ", dims_str(a), " and B ", dims_str(w), " do not multiply (transA ", ta, ", transB ", tb, ")");
  if (c.in.size() > 2 && c.in[2].present) ops::broadcast_dims(c, {c.in[2].dims, {M, N}});
  set_out(c, 0, DType::kFloat32, {M, N});
}

void ref_gemm(RefCtx& c) {
  const bool ta = c.attrs().i("transA", 0) != 0, tb = c.attrs().i("transB", 0) != 0;
  const float alpha = c.attrs().f("alpha", 1.f), beta = c.attrs().f("beta", 1.f);
  const auto &a = c.in[0].dims, &w = c.in[1].dims;
  const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1], N = tb ? w[0] : w[1];
  const float* A = c.in[0].ptr<float>();
  const float* B = c.in[1].ptr<float>();
  float* Y = c.out[0].ptr<float>();
  std::vector<int64_t> cst;
  if (c.in.size() > 2 && c.in[2].data) cst = ops::broadcast_strides(c.in[2].dims, {M, N});
#pragma omp parallel for if (M * N * K > 65536)
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(A[ta ? k * M + i : i * K + k]) * B[tb ? j * K + k : k * N + j];
      double v = alpha * s;
      if (!cst.empty()) v += beta * c.in[2].ptr<float>()[i * cst[0] + j * cst[1]];
      Y[i * N + j] = static_cast<float>(v);
    }
}

bool build_gemm(BuildCtx& b) {
  const Node& n = b.node;
  const bool ta = n.attrs.i("transA", 0) != 0, tb = n.attrs.i("transB", 0) != 0;
  const float alpha = n.attrs.f("alpha", 1.f), beta = n.attrs.f("beta", 1.f);
  const PValue &av = b.v(b.in[0]), &wv = b.v(b.in[1]);
  const int64_t M = b.v(b.out[0]).dims[0], N = b.v(b.out[0]).dims[1];
  const int64_t K = ta ? av.dims[0] : av.dims[1];
  const bool has_c = n.has_in(2);
  // alpha scales A*B only; oneDNN adds the bias before post-ops, so C is folded into the bias
  // as beta*C/alpha (a constant C), and alpha becomes a linear post-op.
  if (has_c && !b.v(b.in[2]).known && (alpha != 1.f || beta != 1.f))
    return b.refuse("alpha=", alpha, " beta=", beta, " with C computed at run time; oneDNN adds the bias before "
                    "scaling, so C must be a constant (or alpha=1 beta=1)");
  const auto f32 = dnnl::memory::data_type::f32;
  const md a_md = ta ? md({M, K}, f32, {1, M}) : md({M, K}, f32, {K, 1});
  const md w_src = tb ? md({K, N}, f32, {1, K}) : md({K, N}, f32, {N, 1});
  std::vector<int64_t> cdims;
  if (has_c) {
    cdims = b.v(b.in[2]).dims;
    cdims.insert(cdims.begin(), 2 - std::min<size_t>(cdims.size(), 2), 1);
  }
  const md bias = has_c ? md(cdims, f32, row_major_strides(cdims)) : md();
  std::vector<PostOp> post = n.post;
  if (alpha != 1.f) post.insert(post.begin(), PostOp{dnnl::algorithm::eltwise_linear, alpha, 0.f, "alpha"});
  dnnl::primitive_attr attr;
  attr.set_post_ops(compat::float_post_ops(post));
  auto pd = compat::matmul_pd(b.eng, a_md, wv.known ? md({K, N}, f32, tag::any) : w_src, bias,
                              md({M, N}, f32, {N, 1}), attr);
  const int a = b.temp(DType::kFloat32, {M, K}, a_md);
  b.v(a).alias = b.plain(b.in[0]);
  int w;
  if (wv.known) {
    w = b.weight(*wv.known, w_src, pd.weights_desc());
  } else {
    w = b.temp(DType::kFloat32, {K, N}, w_src);
    b.v(w).alias = b.plain(b.in[1]);
  }
  PValue& y = b.v(b.out[0]);
  y.md = plain_md(DType::kFloat32, y.dims);
  std::unordered_map<int, int> args = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, b.out[0]}};
  if (has_c) {
    const PValue& cv = b.v(b.in[2]);
    if (cv.known) {
      HTensor scaled = HTensor::zeros(DType::kFloat32, cdims);
      for (int64_t k = 0; k < scaled.numel(); ++k) scaled.ptr<float>()[k] = static_cast<float>(cv.known->f(k) * beta / alpha);
      args[DNNL_ARG_BIAS] = b.constant(scaled);
      b.v(args[DNNL_ARG_BIAS]).md = bias;
    } else {
      const int t = b.temp(DType::kFloat32, cdims, bias);
      b.v(t).alias = b.plain(b.in[2]);
      args[DNNL_ARG_BIAS] = t;
    }
  }
  b.prim(dnnl::matmul(pd), args, n.label(), M * N * K);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Pooling

std::string check_pool(Node& n, const Graph&) {
  if (n.out.size() > 1 && n.out[1] >= 0) return "MaxPool's Indices output is not supported";
  if (n.attrs.i("storage_order", 0) != 0) return "storage_order=1 is not supported";
  return "";
}

bool global_pool(const Node& n) { return n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool"; }

std::vector<int64_t> pool_kernel(const Node& n, const std::vector<int64_t>& x) {
  if (global_pool(n)) return {x.begin() + 2, x.end()};
  return n.attrs.ints("kernel_shape");
}

void infer_pool(InferCtx& c) {
  const auto& x = c.in[0].dims;
  c.check(x.size() >= 3 && x.size() <= 5, "input must be [N, C, spatial...] of rank 3 to 5, got ", dims_str(x));
  const bool max = c.node.op == "MaxPool" || c.node.op == "GlobalMaxPool";
  c.check(c.in[0].dtype == DType::kFloat32 || (max && (c.in[0].dtype == DType::kUInt8 || c.in[0].dtype == DType::kInt8)),
          "pooling of ", dtype_name(c.in[0].dtype), " is not supported");
  const auto kernel = pool_kernel(c.node, x);
  c.check(kernel.size() == x.size() - 2, "kernel_shape ", dims_str(kernel), " does not fit input ", dims_str(x));
  std::vector<int64_t> out = {x[0], x[1]};
  if (global_pool(c.node)) {
    out.insert(out.end(), x.size() - 2, 1);
  } else {
    Window w = window_of(c, x, kernel, true);
    out.insert(out.end(), w.out.begin(), w.out.end());
  }
  set_out(c, 0, c.in[0].dtype, out);
}

bool build_pool(BuildCtx& b) {
  const PValue& x = b.v(b.in[0]);
  const Node& n = b.node;
  const auto kernel = pool_kernel(n, x.dims);
  Window w;
  if (global_pool(n)) {
    w.kernel = kernel;
    w.strides.assign(kernel.size(), 1);
    w.dilations.assign(kernel.size(), 1);
    w.pads_begin.assign(kernel.size(), 0);
    w.pads_end.assign(kernel.size(), 0);
  } else {
    w = window_at(n, x.dims, kernel, true);
  }
  dnnl::algorithm a = dnnl::algorithm::pooling_max;
  if (n.op == "AveragePool" || n.op == "GlobalAveragePool")
    a = n.attrs.i("count_include_pad", 0) ? dnnl::algorithm::pooling_avg_include_padding
                                          : dnnl::algorithm::pooling_avg_exclude_padding;
  const PValue& y = b.v(b.out[0]);
  auto pd = compat::pool_pd(b.eng, a, x.md, md(y.dims, dnnl_type(y.dtype), tag::any), w.strides, w.kernel,
                            compat::dilations(w.dilations), w.pads_begin, w.pads_end);
  b.v(b.out[0]).md = pd.dst_desc();
  std::unordered_map<int, int> args = {{DNNL_ARG_SRC, b.in[0]}, {DNNL_ARG_DST, b.out[0]}};
  if (pd.workspace_desc().get_size()) args[DNNL_ARG_WORKSPACE] = b.temp(DType::kUInt8, {}, pd.workspace_desc());
  b.prim(compat::pooling(pd), args, n.label());
  return true;
}


}  // namespace

MatmulDims matmul_dims(std::vector<int64_t> a, std::vector<int64_t> b) {
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const size_t r = std::max(a.size(), b.size());
  a.insert(a.begin(), r - a.size(), 1);
  b.insert(b.begin(), r - b.size(), 1);
  MatmulDims d{a, b, a};
  for (size_t k = 0; k + 2 < r; ++k) d.y[k] = std::max(a[k], b[k]);
  d.y[r - 1] = b[r - 1];
  return d;
}

std::vector<int64_t> matmul_out_dims(const InferCtx& c, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  c.check(!a.empty() && !b.empty(), "MatMul of a 0-d tensor");
  const MatmulDims d = matmul_dims(a, b);
  const size_t r = d.a.size();
  c.check(d.a[r - 1] == d.b[r - 2], "A ", dims_str(a), " and B ", dims_str(b), " do not multiply");
  for (size_t k = 0; k + 2 < r; ++k)
    c.check(d.a[k] == d.b[k] || d.a[k] == 1 || d.b[k] == 1, "batch dims of A ", dims_str(a), " and B ", dims_str(b),
            " do not broadcast");
  std::vector<int64_t> out = d.y;
  if (a.size() == 1) out.erase(out.end() - 2);
  if (b.size() == 1) out.pop_back();
  return out;
}

void register_nn_ops(OpTable& t) {
  t.add(ops::make_op("Conv", 2, 3, infer_conv, nullptr, build_conv));
  t.add(ops::make_op("MatMul", 2, 2, infer_matmul, ref_matmul, build_matmul));
  t.add(ops::make_op("Gemm", 2, 3, infer_gemm, ref_gemm, build_gemm));
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}) {
    OpImpl p = ops::make_op(op, 1, 1, infer_pool, nullptr, build_pool);
    p.check = check_pool;
    p.out_max = std::string(op) == "MaxPool" ? 2 : 1;
    t.add(p);
  }
}

}  // namespace pare::rt
