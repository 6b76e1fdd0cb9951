// pare_rt's elementwise and normalisation ops. Float activations run as oneDNN eltwise primitives in
// whatever layout their input has (and fuse into Conv/Gemm/MatMul as post-ops); broadcasting
// arithmetic runs as oneDNN binary primitives where oneDNN's broadcast rules allow, else as a
// reference loop; Softmax runs on oneDNN; the rest are reference kernels.
#include <cmath>
#include <cstring>
#include <limits>

#include "rt/dnnl_compat.h"
#include "rt/internal.h"
#include "rt/ops_util.h"

namespace pare::rt {
namespace {

using ops::set_out;
using alg = dnnl::algorithm;

// ---------------------------------------------------------------------------------------------
// Unary elementwise

struct Unary {
  const char* op;
  std::optional<alg> dnnl_alg;     ///< oneDNN's form, when there is one
  float (*f)(float x, float a, float b);
  const char* alpha_attr = nullptr;
  float alpha_def = 0;
  const char* beta_attr = nullptr;
  float beta_def = 0;
};

const Unary kUnary[] = {
    {"Relu", alg::eltwise_relu, [](float x, float, float) { return x > 0 ? x : 0.f; }},
    {"LeakyRelu", alg::eltwise_relu, [](float x, float a, float) { return x >= 0 ? x : a * x; }, "alpha", 0.01f},
    {"Sigmoid", alg::eltwise_logistic, [](float x, float, float) { return 1.f / (1.f + std::exp(-x)); }},
    {"Tanh", alg::eltwise_tanh, [](float x, float, float) { return std::tanh(x); }},
    {"Elu", alg::eltwise_elu, [](float x, float a, float) { return x >= 0 ? x : a * (std::exp(x) - 1.f); }, "alpha", 1.f},
    {"Abs", alg::eltwise_abs, [](float x, float, float) { return std::fabs(x); }},
    {"Sqrt", alg::eltwise_sqrt, [](float x, float, float) { return std::sqrt(x); }},
    {"Exp", alg::eltwise_exp, [](float x, float, float) { return std::exp(x); }},
    // Not oneDNN's eltwise_log: it gives log(1) = -1.43e-6 (the ONNX node test test_log_example).
    {"Log", std::nullopt, [](float x, float, float) { return std::log(x); }},
    {"Neg", std::nullopt, [](float x, float, float) { return -x; }},
    {"Reciprocal", std::nullopt, [](float x, float, float) { return 1.f / x; }},
    {"Floor", std::nullopt, [](float x, float, float) { return std::floor(x); }},
    {"Ceil", std::nullopt, [](float x, float, float) { return std::ceil(x); }},
    {"Erf", std::nullopt, [](float x, float, float) { return std::erf(x); }},
    {"Softplus", std::nullopt, [](float x, float, float) { return x > 20 ? x : std::log1p(std::exp(x)); }},
    {"HardSwish", alg::eltwise_hardswish,
     [](float x, float, float) { return x * std::max(0.f, std::min(1.f, x / 6.f + 0.5f)); }},
    {"HardSigmoid", std::nullopt, [](float x, float a, float b) { return std::max(0.f, std::min(1.f, a * x + b)); },
     "alpha", 0.2f, "beta", 0.5f},
    {"Gelu", alg::eltwise_gelu_erf,
     [](float x, float, float) { return 0.5f * x * (1.f + std::erf(x / std::sqrt(2.f))); }},
};

const Unary* unary_of(const std::string& op) {
  for (auto& u : kUnary)
    if (op == u.op) return &u;
  return nullptr;
}

std::pair<float, float> unary_params(const Unary& u, const Attrs& a) {
  return {u.alpha_attr ? a.f(u.alpha_attr, u.alpha_def) : u.alpha_def, u.beta_attr ? a.f(u.beta_attr, u.beta_def) : u.beta_def};
}

void infer_float_same(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32, "needs float32 input, got ", dtype_name(c.in[0].dtype));
  set_out(c, 0, c.in[0].dtype, c.in[0].dims);
}

void infer_numeric_same(InferCtx& c) {
  c.check(c.in[0].dtype != DType::kBool, "needs a numeric input, got bool");
  set_out(c, 0, c.in[0].dtype, c.in[0].dims);
}

void ref_unary(RefCtx& c) {
  const Unary& u = *unary_of(c.node.op);
  // Named variables, not a structured binding: clang 16 crashes on one used in an OpenMP loop.
  const std::pair<float, float> ab = unary_params(u, c.attrs());
  const float a = ab.first, b = ab.second;
  const int64_t n = c.in[0].numel();
  if (c.in[0].dtype != DType::kFloat32) {  // Abs / Neg of integers
    ops::dispatch(c.in[0].dtype, [&](auto t) {
      using T = decltype(t);
      const T* x = c.in[0].ptr<T>();
      T* y = c.out[0].ptr<T>();
      const bool neg = c.node.op == "Neg";
      for (int64_t k = 0; k < n; ++k) y[k] = neg ? static_cast<T>(-x[k]) : (x[k] < 0 ? static_cast<T>(-x[k]) : x[k]);
    });
    return;
  }
  const float* x = c.in[0].ptr<float>();
  float* y = c.out[0].ptr<float>();
  auto f = u.f;
#pragma omp parallel for if (n > 32768)
  for (int64_t k = 0; k < n; ++k) y[k] = f(x[k], a, b);
}

// oneDNN eltwise in the input's own layout (blocked layouts included).
bool build_unary(BuildCtx& b) {
  const Unary& u = *unary_of(b.node.op);
  const PValue& x = b.v(b.in[0]);
  if (!u.dnnl_alg) return b.refuse(b.node.op, " has no oneDNN eltwise algorithm");
  if (x.dtype != DType::kFloat32) return b.refuse("the input is ", dtype_name(x.dtype), "; oneDNN eltwise runs float32");
  if (x.dims.empty()) return b.refuse("the input is a scalar; oneDNN eltwise takes rank 1 or more");
  auto [a, be] = unary_params(u, b.node.attrs);
  if (b.node.op == "Relu") a = 0;
  auto pd = compat::eltwise_pd(b.eng, *u.dnnl_alg, x.md, x.md, a, be);
  b.v(b.out[0]).md = pd.dst_desc();
  b.prim(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, b.in[0]}, {DNNL_ARG_DST, b.out[0]}}, b.node.label());
  return true;
}

// Clip: bounds from inputs 1 and 2 (opset >= 11, constant) or the min/max attributes.
std::optional<std::pair<float, float>> clip_bounds(const Node& n, const std::function<const HTensor*(int)>& known) {
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  if (n.attrs.has("min")) lo = n.attrs.f("min", lo);
  if (n.attrs.has("max")) hi = n.attrs.f("max", hi);
  for (size_t k = 1; k <= 2; ++k) {
    if (!n.has_in(k)) continue;
    const HTensor* t = known(n.in[k]);
    if (!t || t->numel() != 1) return std::nullopt;
    (k == 1 ? lo : hi) = static_cast<float>(t->f(0));
  }
  return std::make_pair(lo, hi);
}

void ref_clip(RefCtx& c) {
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  if (c.attrs().has("min")) lo = c.attrs().f("min", lo);
  if (c.attrs().has("max")) hi = c.attrs().f("max", hi);
  ops::dispatch(c.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    T l = static_cast<T>(std::max<double>(lo, static_cast<double>(std::numeric_limits<T>::lowest())));
    T h = static_cast<T>(std::min<double>(hi, static_cast<double>(std::numeric_limits<T>::max())));
    if (c.in.size() > 1 && c.in[1].data) l = c.in[1].ptr<T>()[0];
    if (c.in.size() > 2 && c.in[2].data) h = c.in[2].ptr<T>()[0];
    const T* x = c.in[0].ptr<T>();
    T* y = c.out[0].ptr<T>();
    const int64_t n = c.in[0].numel();
#pragma omp parallel for if (n > 32768)
    for (int64_t k = 0; k < n; ++k) y[k] = std::min(std::max(x[k], l), h);
  });
}

bool build_clip(BuildCtx& b) {
  const PValue& x = b.v(b.in[0]);
  if (x.dtype != DType::kFloat32) return b.refuse("the input is ", dtype_name(x.dtype), "; oneDNN clip runs float32");
  if (x.dims.empty()) return b.refuse("the input is a scalar; oneDNN clip takes rank 1 or more");
  auto bounds = clip_bounds(b.node, [&](int v) {
    for (size_t k = 0; k < b.node.in.size(); ++k)
      if (b.node.in[k] == v) return b.v(b.in[k]).known;
    return static_cast<const HTensor*>(nullptr);
  });
  if (!bounds) return b.refuse("min or max is not a known scalar; oneDNN clip takes constant bounds");
  auto pd = compat::eltwise_pd(b.eng, alg::eltwise_clip, x.md, x.md, bounds->first, bounds->second);
  b.v(b.out[0]).md = pd.dst_desc();
  b.prim(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, b.in[0]}, {DNNL_ARG_DST, b.out[0]}}, b.node.label());
  return true;
}

// ---------------------------------------------------------------------------------------------
// Binary and variadic elementwise

enum class Kind { kArith, kCompare, kLogic };

struct Binary {
  const char* op;
  Kind kind;
  std::optional<alg> dnnl_alg;
};

const Binary kBinary[] = {
    {"Add", Kind::kArith, alg::binary_add},   {"Sub", Kind::kArith, alg::binary_sub},
    {"Mul", Kind::kArith, alg::binary_mul},   {"Div", Kind::kArith, alg::binary_div},
    {"Pow", Kind::kArith, std::nullopt},      {"Max", Kind::kArith, alg::binary_max},
    {"Min", Kind::kArith, alg::binary_min},   {"Equal", Kind::kCompare, std::nullopt},
    {"Less", Kind::kCompare, std::nullopt},   {"Greater", Kind::kCompare, std::nullopt},
    {"LessOrEqual", Kind::kCompare, std::nullopt}, {"GreaterOrEqual", Kind::kCompare, std::nullopt},
    {"And", Kind::kLogic, std::nullopt},      {"Or", Kind::kLogic, std::nullopt},
    {"Xor", Kind::kLogic, std::nullopt},      {"Mod", Kind::kArith, std::nullopt},
};

const Binary* binary_of(const std::string& op) {
  for (auto& b : kBinary)
    if (op == b.op) return &b;
  return nullptr;
}

void infer_binary(InferCtx& c) {
  const Binary& bi = *binary_of(c.node.op);
  std::vector<std::vector<int64_t>> shapes;
  for (auto& in : c.in) {
    c.check(in.present, "an input is missing");
    if (bi.kind != Kind::kLogic && c.node.op != "Pow")
      c.check(in.dtype == c.in[0].dtype, "inputs are ", dtype_name(c.in[0].dtype), " and ", dtype_name(in.dtype));
    shapes.push_back(in.dims);
  }
  if (bi.kind == Kind::kLogic) c.check(c.in[0].dtype == DType::kBool && c.in[1].dtype == DType::kBool, "needs bool inputs");
  if (c.node.op == "Mod")
    c.check(c.in[0].dtype != DType::kFloat32 || c.attrs().i("fmod", 0) == 1,
            "a float32 Mod needs fmod = 1 (ONNX: C's fmod; the integer remainder of fmod = 0 has no float form)");
  set_out(c, 0, bi.kind == Kind::kArith ? c.in[0].dtype : DType::kBool, ops::broadcast_dims(c, shapes));
}

template <class T>
T arith(const std::string& op, T a, T b) {
  switch (op[0]) {
    case 'A': return static_cast<T>(a + b);
    case 'S': return static_cast<T>(a - b);
    case 'M':
      if (op == "Mul") return static_cast<T>(a * b);
      if (op == "Max") return std::max(a, b);
      return std::min(a, b);
    case 'D':
      if constexpr (std::is_integral_v<T>) {
        if (b == 0) return 0;  // refused before the loop (ref_binary): no throw inside OpenMP regions
      }
      return static_cast<T>(a / b);
    default: return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  }
}

// ONNX Mod: with fmod, C's remainder (the dividend's sign); without, the divisor's sign, as Python's %.
template <class T>
T mod(T a, T b, bool fmod) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;  // refused before the loop (ref_binary)
    const T r = static_cast<T>(a % b);
    if (fmod || r == 0) return r;
    return (r < 0) != (b < 0) ? static_cast<T>(r + b) : r;
  } else {
    (void)fmod;  // a float Mod has fmod = 1 (infer_binary)
    return std::fmod(a, b);
  }
}

template <class T>
bool compare(const std::string& op, T a, T b) {
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "Greater") return a > b;
  if (op == "LessOrEqual") return a <= b;
  return a >= b;
}

void ref_binary(RefCtx& c) {
  const Binary& bi = *binary_of(c.node.op);
  const std::string& op = c.node.op;
  const auto& out = c.out[0].dims;
  // Variadic Max/Min/Sum fold left over their inputs.
  const size_t n_in = c.in.size();
  if (n_in == 1) {
    ops::copy_bytes(c.out[0].data, c.in[0].data, c.out[0].numel() * dtype_size(c.out[0].dtype));
    return;
  }
  const std::vector<int64_t> st[2] = {ops::broadcast_strides(c.in[0].dims, out), ops::broadcast_strides(c.in[1].dims, out)};
  ops::dispatch(c.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    // Integer division by zero is bad input, refused here: an exception must not leave the
    // OpenMP region of the loop below (that terminates the process).
    if constexpr (std::is_integral_v<T>) {
      if ((op == "Div" || op == "Mod") && c.in[1].dtype == c.in[0].dtype) {
        const T* d = c.in[1].ptr<T>();
        for (int64_t k = 0; k < c.in[1].numel(); ++k)
          PARE_CHECK(d[k] != 0, c.node.label(), ": integer ", op == "Mod" ? "remainder" : "division", " by zero (divisor element ", k, " of ",
                     dims_str(c.in[1].dims), ")");
      }
    }
    const T* a = c.in[0].ptr<T>();
    if (bi.kind == Kind::kArith) {
      T* y = c.out[0].ptr<T>();
      if (op == "Pow" && c.in[1].dtype != c.in[0].dtype) {
        const HTensor e{c.in[1].dtype, c.in[1].dims, nullptr, c.in[1].data};
        ops::broadcast_loop<2>(out, st, [&](int64_t o, const int64_t* off) {
          y[o] = static_cast<T>(std::pow(static_cast<double>(a[off[0]]), e.f(off[1])));
        });
        return;
      }
      const T* b = c.in[1].ptr<T>();
      if (op == "Mod") {
        const bool fmod = c.attrs().i("fmod", 0) != 0;
        ops::broadcast_loop<2>(out, st, [&](int64_t o, const int64_t* off) { y[o] = mod<T>(a[off[0]], b[off[1]], fmod); });
        return;
      }
      ops::broadcast_loop<2>(out, st, [&](int64_t o, const int64_t* off) { y[o] = arith<T>(op, a[off[0]], b[off[1]]); });
    } else if (bi.kind == Kind::kCompare) {
      const T* b = c.in[1].ptr<T>();
      uint8_t* y = c.out[0].ptr<uint8_t>();
      ops::broadcast_loop<2>(out, st, [&](int64_t o, const int64_t* off) { y[o] = compare<T>(op, a[off[0]], b[off[1]]); });
    } else {
      const uint8_t* b = c.in[1].ptr<uint8_t>();
      const uint8_t* x = c.in[0].ptr<uint8_t>();
      uint8_t* y = c.out[0].ptr<uint8_t>();
      ops::broadcast_loop<2>(out, st, [&](int64_t o, const int64_t* off) {
        const bool p = x[off[0]] != 0, q = b[off[1]] != 0;
        y[o] = op == "And" ? (p && q) : op == "Or" ? (p || q) : (p != q);
      });
    }
  });
  // Further inputs of a variadic op.
  for (size_t k = 2; k < n_in; ++k) {
    const std::vector<int64_t> s2[2] = {row_major_strides(out), ops::broadcast_strides(c.in[k].dims, out)};
    ops::dispatch(c.out[0].dtype, [&](auto t) {
      using T = decltype(t);
      T* y = c.out[0].ptr<T>();
      const T* b = c.in[k].ptr<T>();
      ops::broadcast_loop<2>(out, s2, [&](int64_t o, const int64_t* off) { y[o] = arith<T>(op, y[off[0]], b[off[1]]); });
    });
  }
}

// oneDNN binary: float32, two inputs, the first already of the output's shape, the second
// broadcast to it (oneDNN broadcasts src1 only); src0 in any layout, src1 plain or in src0's.
bool build_binary(BuildCtx& b) {
  const Binary& bi = *binary_of(b.node.op);
  if (!bi.dnnl_alg) return b.refuse(b.node.op, " has no oneDNN binary algorithm");
  if (b.in.size() != 2) return b.refuse(b.in.size(), " inputs; oneDNN binary takes 2");
  const PValue &x = b.v(b.in[0]), &y = b.v(b.in[1]);
  const PValue& o = b.v(b.out[0]);
  if (x.dtype != DType::kFloat32 || y.dtype != DType::kFloat32)
    return b.refuse("the inputs are ", dtype_name(x.dtype), " and ", dtype_name(y.dtype), "; oneDNN binary runs float32");
  if (o.dims.empty()) return b.refuse("the output is a scalar; oneDNN binary takes rank 1 or more");
  int a = b.in[0], c = b.in[1];
  bool swap = false;
  if (x.dims != o.dims) {
    const bool commutes = b.node.op == "Add" || b.node.op == "Mul" || b.node.op == "Max" || b.node.op == "Min";
    if (!commutes || y.dims != o.dims)
      return b.refuse("input 0 has dims ", dims_str(x.dims), " and is broadcast to ", dims_str(o.dims),
                      "; oneDNN binary broadcasts input 1 only");
    std::swap(a, c);
    swap = true;
  }
  (void)swap;
  // src1 with src0's rank (leading 1s), plain, unless it has src0's very layout.
  std::vector<int64_t> d1 = b.v(c).dims;
  d1.insert(d1.begin(), o.dims.size() - d1.size(), 1);
  int c_arg;
  if (b.v(c).dims == o.dims) {
    c_arg = b.as(c, b.v(a).md);
  } else {
    const int plain = b.plain(c);
    c_arg = b.temp(DType::kFloat32, d1, plain_md(DType::kFloat32, d1));
    b.v(c_arg).alias = plain;
    if (b.v(plain).known) {
      b.v(c_arg).known = b.v(plain).known;
      b.v(c_arg).alias = -1;
    }
  }
  auto pd = compat::binary_pd(b.eng, *bi.dnnl_alg, b.v(a).md, b.v(c_arg).md, b.v(a).md, b.node.post);
  b.v(b.out[0]).md = pd.dst_desc();
  b.prim(dnnl::binary(pd), {{DNNL_ARG_SRC_0, a}, {DNNL_ARG_SRC_1, c_arg}, {DNNL_ARG_DST, b.out[0]}}, b.node.label());
  return true;
}

void infer_not(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kBool, "needs a bool input");
  set_out(c, 0, DType::kBool, c.in[0].dims);
}

void ref_not(RefCtx& c) {
  const int64_t n = c.in[0].numel();
  for (int64_t k = 0; k < n; ++k) c.out[0].ptr<uint8_t>()[k] = !c.in[0].ptr<uint8_t>()[k];
}

void infer_where(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kBool, "condition must be bool");
  c.check(c.in[1].dtype == c.in[2].dtype, "X and Y differ in type");
  set_out(c, 0, c.in[1].dtype, ops::broadcast_dims(c, {c.in[0].dims, c.in[1].dims, c.in[2].dims}));
}

void ref_where(RefCtx& c) {
  const auto& out = c.out[0].dims;
  const std::vector<int64_t> st[3] = {ops::broadcast_strides(c.in[0].dims, out), ops::broadcast_strides(c.in[1].dims, out),
                                      ops::broadcast_strides(c.in[2].dims, out)};
  const int64_t size = dtype_size(c.out[0].dtype);
  const uint8_t* cond = c.in[0].ptr<uint8_t>();
  const char* x = static_cast<const char*>(c.in[1].data);
  const char* y = static_cast<const char*>(c.in[2].data);
  char* dst = static_cast<char*>(c.out[0].data);
  ops::broadcast_loop<3>(out, st, [&](int64_t o, const int64_t* off) {
    std::memcpy(dst + o * size, cond[off[0]] ? x + off[1] * size : y + off[2] * size, static_cast<size_t>(size));
  });
}

// ---------------------------------------------------------------------------------------------
// Softmax, LayerNormalization, BatchNormalization

void infer_softmax(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32, "needs float32 input");
  ops::axis(c, c.attrs().i("axis", c.attrs().has("pare_rt.legacy") ? 1 : -1), static_cast<int64_t>(c.in[0].dims.size()));
  set_out(c, 0, DType::kFloat32, c.in[0].dims);
}

// Opset < 13 coerces the input to 2-D at `axis` (default 1) and normalises each row; 13+ normalises
// along `axis` (default -1).
void softmax_ref(RefCtx& c, bool log) {
  const auto& d = c.in[0].dims;
  const int64_t rank = static_cast<int64_t>(d.size());
  const bool legacy = c.attrs().has("pare_rt.legacy");
  int64_t a = c.attrs().i("axis", legacy ? 1 : -1);
  if (a < 0) a += rank;
  int64_t outer = 1, inner = 1, len = 1;
  if (legacy) {
    for (int64_t k = 0; k < a; ++k) outer *= d[static_cast<size_t>(k)];
    for (int64_t k = a; k < rank; ++k) len *= d[static_cast<size_t>(k)];
  } else {
    for (int64_t k = 0; k < a; ++k) outer *= d[static_cast<size_t>(k)];
    len = d[static_cast<size_t>(a)];
    for (int64_t k = a + 1; k < rank; ++k) inner *= d[static_cast<size_t>(k)];
  }
  const float* x = c.in[0].ptr<float>();
  float* y = c.out[0].ptr<float>();
#pragma omp parallel for collapse(2) if (outer * inner * len > 32768)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const float* p = x + o * len * inner + i;
      float* q = y + o * len * inner + i;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < len; ++k) m = std::max(m, p[k * inner]);
      double s = 0;
      for (int64_t k = 0; k < len; ++k) s += std::exp(static_cast<double>(p[k * inner] - m));
      for (int64_t k = 0; k < len; ++k)
        q[k * inner] = log ? static_cast<float>(p[k * inner] - m - std::log(s))
                           : static_cast<float>(std::exp(static_cast<double>(p[k * inner] - m)) / s);
    }
}

bool build_softmax(BuildCtx& b) {
  const PValue& x = b.v(b.in[0]);
  if (b.node.attrs.has("pare_rt.legacy"))
    return b.refuse("opset ", b.graph.opset, " softmax flattens from its axis into 2-d; oneDNN softmax takes one axis");
  if (x.dims.empty()) return b.refuse("the input is a scalar; oneDNN softmax takes rank 1 or more");
  int64_t a = b.node.attrs.i("axis", -1);
  if (a < 0) a += static_cast<int64_t>(x.dims.size());
  const int src = b.plain(b.in[0]);
  auto pd = compat::softmax_pd(b.eng, b.v(src).md, static_cast<int>(a));
  b.v(b.out[0]).md = pd.dst_desc();
  b.prim(dnnl::softmax_forward(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, b.out[0]}}, b.node.label());
  return true;
}

std::string check_softmax(Node& n, const Graph& g) {
  // Opset < 13: the input is coerced to 2-D at `axis` (default 1).
  if (g.opset < 13) n.attrs.set_int("pare_rt.legacy", 1);
  return "";
}

void infer_layer_norm(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32, "needs float32 input");
  const int64_t rank = static_cast<int64_t>(c.in[0].dims.size());
  const int64_t a = ops::axis(c, c.attrs().i("axis", -1), rank);
  int64_t len = 1;
  for (int64_t k = a; k < rank; ++k) len *= c.in[0].dims[static_cast<size_t>(k)];
  for (size_t k = 1; k < c.in.size(); ++k)
    if (c.in[k].present) c.check(numel_of(c.in[k].dims) == len, "scale/bias of shape ", dims_str(c.in[k].dims),
                                 " do not match the normalised size ", len);
  set_out(c, 0, DType::kFloat32, c.in[0].dims);
  for (size_t k = 1; k < c.out.size(); ++k) {
    auto d = c.in[0].dims;
    for (int64_t j = a; j < rank; ++j) d[static_cast<size_t>(j)] = 1;
    set_out(c, k, DType::kFloat32, d);
  }
}

void ref_layer_norm(RefCtx& c) {
  const auto& d = c.in[0].dims;
  const int64_t rank = static_cast<int64_t>(d.size());
  int64_t a = c.attrs().i("axis", -1);
  if (a < 0) a += rank;
  int64_t len = 1;
  for (int64_t k = a; k < rank; ++k) len *= d[static_cast<size_t>(k)];
  const int64_t rows = c.in[0].numel() / std::max<int64_t>(len, 1);
  const float eps = c.attrs().f("epsilon", 1e-5f);
  const float* x = c.in[0].ptr<float>();
  const float* g = c.in.size() > 1 && c.in[1].data ? c.in[1].ptr<float>() : nullptr;
  const float* bias = c.in.size() > 2 && c.in[2].data ? c.in[2].ptr<float>() : nullptr;
  float* y = c.out[0].ptr<float>();
  float* mean_out = c.out.size() > 1 ? c.out[1].ptr<float>() : nullptr;
  float* inv_out = c.out.size() > 2 ? c.out[2].ptr<float>() : nullptr;
#pragma omp parallel for if (rows * len > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * len;
    double m = 0, v = 0;
    for (int64_t k = 0; k < len; ++k) m += p[k];
    m /= static_cast<double>(len);
    for (int64_t k = 0; k < len; ++k) v += (p[k] - m) * (p[k] - m);
    v /= static_cast<double>(len);
    const double inv = 1.0 / std::sqrt(v + eps);
    for (int64_t k = 0; k < len; ++k)
      y[r * len + k] = static_cast<float>((p[k] - m) * inv * (g ? g[k] : 1.f) + (bias ? bias[k] : 0.f));
    if (mean_out) mean_out[r] = static_cast<float>(m);
    if (inv_out) inv_out[r] = static_cast<float>(inv);
  }
}

void infer_batch_norm(InferCtx& c) {
  c.check(c.in[0].dtype == DType::kFloat32, "needs float32 input");
  c.check(c.in[0].dims.size() >= 2, "needs an input of rank >= 2");
  c.check(c.attrs().i("training_mode", 0) == 0, "training_mode=1 is not supported (inference only)");
  const int64_t ch = c.in[0].dims[1];
  for (size_t k = 1; k < 5; ++k) c.check(numel_of(c.in[k].dims) == ch, "parameter ", k, " of shape ",
                                         dims_str(c.in[k].dims), " does not match ", ch, " channels");
  set_out(c, 0, DType::kFloat32, c.in[0].dims);
  for (size_t k = 1; k < c.out.size(); ++k) set_out(c, k, DType::kFloat32, {ch});
}

void ref_batch_norm(RefCtx& c) {
  const auto& d = c.in[0].dims;
  const int64_t n = d[0], ch = d[1], hw = c.in[0].numel() / std::max<int64_t>(n * ch, 1);
  const float eps = c.attrs().f("epsilon", 1e-5f);
  const float *x = c.in[0].ptr<float>(), *g = c.in[1].ptr<float>(), *b = c.in[2].ptr<float>(),
              *mean = c.in[3].ptr<float>(), *var = c.in[4].ptr<float>();
  float* y = c.out[0].ptr<float>();
#pragma omp parallel for collapse(2) if (n * ch * hw > 32768)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < ch; ++k) {
      const float s = g[k] / std::sqrt(var[k] + eps), t = b[k] - mean[k] * s;
      const float* p = x + (i * ch + k) * hw;
      float* q = y + (i * ch + k) * hw;
      for (int64_t j = 0; j < hw; ++j) q[j] = p[j] * s + t;
    }
  for (size_t k = 1; k < c.out.size(); ++k)
    if (c.out[k].data) std::memcpy(c.out[k].data, c.in[k + 2].data, static_cast<size_t>(ch * 4));
}


}  // namespace

std::optional<PostOp> activation_post_op(const Node& n, const Graph& g) {
  if (!n.domain.empty() || n.out.size() != 1) return std::nullopt;
  PostOp p;
  p.from = n.op;
  if (n.op == "Clip") {
    auto b = clip_bounds(n, [&](int v) { return g.constant(v); });
    if (!b) return std::nullopt;
    p.alg = alg::eltwise_clip;
    p.alpha = b->first;
    p.beta = b->second;
    return p;
  }
  const Unary* u = unary_of(n.op);
  if (!u || !u->dnnl_alg) return std::nullopt;
  auto [a, be] = unary_params(*u, n.attrs);
  p.alg = *u->dnnl_alg;
  p.alpha = n.op == "Relu" ? 0.f : a;
  p.beta = be;
  return p;
}

void register_math_ops(OpTable& t) {
  for (auto& u : kUnary) {
    const bool any_numeric = std::string(u.op) == "Abs" || std::string(u.op) == "Neg";
    t.add(ops::make_op(u.op, 1, 1, any_numeric ? infer_numeric_same : infer_float_same, ref_unary,
               u.dnnl_alg ? build_unary : nullptr));
  }
  OpImpl clip = ops::make_op("Clip", 1, 3, infer_numeric_same, ref_clip, build_clip);
  t.add(clip);
  for (auto& bi : kBinary) {
    const bool variadic = std::string(bi.op) == "Max" || std::string(bi.op) == "Min";
    t.add(ops::make_op(bi.op, variadic ? 1 : 2, variadic ? -1 : 2, infer_binary, ref_binary,
               bi.dnnl_alg ? build_binary : nullptr));
  }
  t.add(ops::make_op("Sum", 1, -1, [](InferCtx& c) {
    std::vector<std::vector<int64_t>> s;
    for (auto& in : c.in) s.push_back(in.dims);
    set_out(c, 0, c.in[0].dtype, ops::broadcast_dims(c, s));
  }, [](RefCtx& c) {
    // Sum folds like Add.
    Node add = c.node;
    add.op = "Add";
    RefCtx r{add, c.in, c.out};
    ref_binary(r);
  }));
  t.add(ops::make_op("Not", 1, 1, infer_not, ref_not));
  t.add(ops::make_op("Where", 3, 3, infer_where, ref_where));
  OpImpl softmax = ops::make_op("Softmax", 1, 1, infer_softmax, [](RefCtx& c) { softmax_ref(c, false); }, build_softmax);
  softmax.check = check_softmax;
  t.add(softmax);
  OpImpl log_softmax = ops::make_op("LogSoftmax", 1, 1, infer_softmax, [](RefCtx& c) { softmax_ref(c, true); });
  log_softmax.check = check_softmax;
  t.add(log_softmax);
  t.add(ops::make_op("LayerNormalization", 2, 3, infer_layer_norm, ref_layer_norm, nullptr, 3));
  t.add(ops::make_op("BatchNormalization", 5, 5, infer_batch_norm, ref_batch_norm, nullptr, 3));
}

}  // namespace pare::rt
