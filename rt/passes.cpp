// The load-time passes of pare_rt (passes.h): each rewrites one pattern of the graph and says
// whether it changed anything; graph_passes() lists them in the order they run.
#include "rt/passes.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace pare::rt {

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers of the passes

bool is_scalar(const HTensor* t) { return t && t->numel() == 1; }

// The only live consumer of `v`, when there is exactly one and `v` is not exposed.
Node* sole_consumer(Graph& g, int v) {
  if (g.values[static_cast<size_t>(v)].exposed) return nullptr;
  auto c = g.consumers(v);
  if (c.size() != 1) return nullptr;
  return &g.nodes[static_cast<size_t>(c[0])];
}

// A DequantizeLinear feeding value `v`.
struct Dq {
  Node* node = nullptr;
  int q = -1;                 ///< its integer input
  const HTensor* scale = nullptr;
  const HTensor* zero = nullptr;  ///< nullptr: zero point 0
  int64_t axis = 1;
};

std::optional<Dq> dq_feeding(Graph& g, int v) {
  Node* n = g.producer(v);
  if (!n || n->op != "DequantizeLinear" || !n->domain.empty()) return std::nullopt;
  Dq d;
  d.node = n;
  d.q = n->in[0];
  d.scale = g.constant(n->in[1]);
  d.zero = n->has_in(2) ? g.constant(n->in[2]) : nullptr;
  if (!d.scale || d.scale->dtype != DType::kFloat32 || (n->has_in(2) && !d.zero)) return std::nullopt;
  d.axis = n->attrs.i("axis", 1);
  return d;
}

bool zero_is_all_zero(const HTensor* z) {
  if (!z) return true;
  for (int64_t k = 0; k < z->numel(); ++k)
    if (z->i(k) != 0) return false;
  return true;
}

// Why DQ `d` is not a per-tensor activation DQ on a value computed at run time (u8 or s8), as int8
// kernels take; "" when it is.
std::string activation_dq_refusal(Graph& g, const Dq& d) {
  const std::string what = "the input '" + g.values[static_cast<size_t>(d.q)].name + "'";
  if (g.constant(d.q)) return what + " is a constant, not an activation";
  if (!is_scalar(d.scale) || (d.zero && !is_scalar(d.zero)))
    return what + " is quantized per channel; int8 kernels take one activation scale and zero point";
  if (d.zero && d.zero->dtype != DType::kUInt8 && d.zero->dtype != DType::kInt8)
    return what + " has a " + dtype_name(d.zero->dtype) + " zero point; int8 kernels take uint8 or int8";
  if (!(d.scale->ptr<float>()[0] > 0)) return what + " has a scale that is not positive";
  return "";
}

// Sets `why`, the reason a rewrite declines a node whose pattern it recognised, and returns false.
template <class... A>
bool decline(std::string& why, const A&... a) {
  why = detail::concat(a...);
  return false;
}

int32_t zero_of(const Dq& d) { return d.zero ? static_cast<int32_t>(d.zero->i(0)) : 0; }

// The QuantizeLinear reading `v` alone (per tensor, constant scale/zero of u8 or s8).
struct Q {
  Node* node = nullptr;
  float scale = 1;
  int32_t zero = 0;
  DType type = DType::kUInt8;
};

std::optional<Q> q_reading(Graph& g, int v) {
  Node* n = sole_consumer(g, v);
  if (!n || n->op != "QuantizeLinear" || !n->domain.empty() || n->in[0] != v) return std::nullopt;
  const HTensor* s = g.constant(n->in[1]);
  const HTensor* z = n->has_in(2) ? g.constant(n->in[2]) : nullptr;
  if (!is_scalar(s) || s->dtype != DType::kFloat32 || s->ptr<float>()[0] <= 0) return std::nullopt;
  if (n->has_in(2) && (!is_scalar(z) || (z->dtype != DType::kUInt8 && z->dtype != DType::kInt8))) return std::nullopt;
  Q q;
  q.node = n;
  q.scale = s->ptr<float>()[0];
  q.zero = z ? static_cast<int32_t>(z->i(0)) : 0;
  q.type = z ? z->dtype : DType::kUInt8;
  return q;
}

// Relu or Clip with constant bounds right after `v`, as a post-op.
std::optional<std::pair<Node*, PostOp>> fusable_relu(Graph& g, int v) {
  Node* n = sole_consumer(g, v);
  if (!n || n->in[0] != v) return std::nullopt;
  if (n->op != "Relu" && n->op != "Clip") return std::nullopt;
  auto p = activation_post_op(*n, g);
  if (!p) return std::nullopt;
  return std::make_pair(n, *p);
}

// What follows an int8 node's result `y`: an optional Relu/Clip (appended to `post`), then an
// optional QuantizeLinear (the requantization, into q). Both go to `eaten`; returns the value the
// int8 node will produce.
int follow_output(Graph& g, int y, QuantInfo& q, std::vector<PostOp>& post, std::vector<Node*>& eaten) {
  if (auto r = fusable_relu(g, y)) {
    post.push_back(r->second);
    eaten.push_back(r->first);
    y = r->first->out[0];
  }
  if (auto qo = q_reading(g, y)) {
    q.requantize = true;
    q.y_scale = qo->scale;
    q.y_zero = qo->zero;
    q.y_type = qo->type;
    eaten.push_back(qo->node);
    y = qo->node->out[0];
  }
  return y;
}

void retarget_output(Graph& g, Node& n, size_t slot, int v) {
  n.out[slot] = v;
  g.values[static_cast<size_t>(v)].producer = static_cast<int>(&n - g.nodes.data());
}

// The int8 weight of compute node `n` as its int8 node wants it (Gemm with transB: transposed to
// [K, N]) and the weight axis holding output channels; false, saying why, when the node does not fit
// an int8 kernel.
bool int8_weight(const Node& n, const HTensor& wq, HTensor& weight, int64_t& out_axis, std::string& why) {
  const int64_t wrank = static_cast<int64_t>(wq.dims.size());
  weight = wq;
  if (n.op == "Conv") {
    out_axis = 0;
    return wrank >= 3 || decline(why, "the weight has rank ", wrank, "; a Conv weight has rank 3 or more");
  }
  if (n.op == "MatMul") {
    out_axis = 1;
    return wrank == 2 || decline(why, "the weight has rank ", wrank, "; the int8 MatMul takes a 2-d weight");
  }
  if (wrank != 2) return decline(why, "the weight has rank ", wrank, "; the int8 Gemm takes a 2-d weight");
  if (n.attrs.i("transA", 0) != 0) return decline(why, "transA=1; the int8 Gemm takes A untransposed");
  const float alpha = n.attrs.f("alpha", 1.f), beta = n.attrs.f("beta", 1.f);
  if (alpha != 1.f || beta != 1.f)
    return decline(why, "alpha=", alpha, " beta=", beta, "; the int8 Gemm takes alpha=1 beta=1");
  const bool trans = n.attrs.i("transB", 0) != 0;
  out_axis = trans ? 0 : 1;
  if (trans) {  // stored [N, K]: the int8 matmul takes [K, N]
    const int64_t N = wq.dims[0], K = wq.dims[1];
    weight = HTensor::zeros(DType::kInt8, {K, N});
    for (int64_t a = 0; a < N; ++a)
      for (int64_t b = 0; b < K; ++b) weight.ptr<int8_t>()[b * N + a] = wq.ptr<int8_t>()[a * K + b];
  }
  return true;
}

// The bias of `n` (input 2 of Conv and Gemm) into q.bias, in the accumulator domain: int32 as stored
// when its scale is x_scale * w_scale, else float b / (x_scale * w_scale). False, saying why, when
// it is not a constant (or a dequantized constant) of one value per output channel.
bool accumulator_bias(Graph& g, const Node& n, int64_t channels, QuantInfo& q, std::string& why) {
  const size_t bias_slot = 2;
  if (n.op == "MatMul" || !n.has_in(bias_slot)) return true;
  const HTensor* b = g.constant(n.in[bias_slot]);
  std::optional<Dq> bd;
  if (!b) {
    bd = dq_feeding(g, n.in[bias_slot]);
    if (!bd || !g.constant(bd->q) || !zero_is_all_zero(bd->zero))
      return decline(why, "the bias is neither a constant nor a DequantizeLinear of a constant with zero point 0");
  }
  const HTensor& src = b ? *b : *g.constant(bd->q);
  if (src.numel() != channels || (src.dims.size() != 1))
    return decline(why, "the bias has dims ", dims_str(src.dims), ", not [", channels, "]");
  const size_t ns = q.w_scale.size();
  bool exact = !b && src.dtype == DType::kInt32;
  std::vector<double> real(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const double bs = b ? 1.0 : bd->scale->f(bd->scale->numel() == 1 ? 0 : c);
    const double acc_scale = static_cast<double>(q.x_scale) * q.w_scale[ns == 1 ? 0 : static_cast<size_t>(c)];
    real[static_cast<size_t>(c)] = src.f(c) * bs / acc_scale;
    if (exact && std::fabs(bs / acc_scale - 1.0) > 1e-6) exact = false;
  }
  HTensor acc = HTensor::zeros(exact ? DType::kInt32 : DType::kFloat32, {channels});
  for (int64_t c = 0; c < channels; ++c) {
    if (exact) acc.ptr<int32_t>()[c] = static_cast<int32_t>(src.i(c));
    else acc.ptr<float>()[c] = static_cast<float>(real[static_cast<size_t>(c)]);
  }
  q.bias = acc;
  return true;
}

// Replaces compute node `n` (Conv/Gemm/MatMul over a quantized activation and int8 weights) by an
// int8 node; true when it did. A QDQ pattern it cannot lower sets `why`.
bool fuse_compute(Graph& g, Node& n, LoweringReport& rep, std::string& why) {
  if (!n.has_in(0) || !n.has_in(1)) return false;
  auto x = dq_feeding(g, n.in[0]);
  auto w = dq_feeding(g, n.in[1]);
  if (!x || !w) return false;  // not a QDQ pattern
  if (std::string r = activation_dq_refusal(g, *x); !r.empty()) return decline(why, r);
  const HTensor* wq = g.constant(w->q);
  if (!wq) return decline(why, "the weight is computed at run time; int8 kernels take a constant weight");
  if (wq->dtype != DType::kInt8) return decline(why, "the weight is ", dtype_name(wq->dtype), "; int8 kernels take int8 weights");
  if (!zero_is_all_zero(w->zero)) return decline(why, "the weight zero point is not 0; int8 kernels take symmetric weights");
  const int64_t wrank = static_cast<int64_t>(wq->dims.size());
  HTensor weight;
  int64_t out_axis = 0;
  if (!int8_weight(n, *wq, weight, out_axis, why)) return false;
  const int64_t channels = wq->dims[static_cast<size_t>(out_axis)];
  const int64_t ns = w->scale->numel();
  int64_t dq_axis = w->axis < 0 ? w->axis + wrank : w->axis;
  if (ns != 1 && (ns != channels || dq_axis != out_axis))
    return decline(why, "the weight has ", ns, " scales along axis ", dq_axis, "; int8 kernels take one, or one per "
                   "output channel (", channels, " along axis ", out_axis, ")");

  QuantInfo q;
  q.x_scale = x->scale->ptr<float>()[0];
  q.x_zero = zero_of(*x);
  const DType x_type = x->zero ? x->zero->dtype : DType::kUInt8;
  const int x_value = x->q;
  for (int64_t c = 0; c < ns; ++c) q.w_scale.push_back(w->scale->ptr<float>()[c]);
  for (float s : q.w_scale)
    if (!(s > 0) || !std::isfinite(s)) return decline(why, "a weight scale is ", s, "; int8 kernels take positive finite scales");
  if (!accumulator_bias(g, n, channels, q, why)) return false;

  std::vector<PostOp> post;
  std::vector<Node*> eaten;
  const int y = follow_output(g, n.out[0], q, post, eaten);

  Node f;
  f.op = n.op == "Conv" ? "QConv" : "QMatMul";
  f.domain = "pare_rt";
  f.name = n.name;
  f.index = n.index;
  f.attrs = n.attrs;
  f.in = {x_value, -1};
  // g.value may grow g.values: no pointer into it (x, w) is used from here on.
  const int wv = g.value(g.values[static_cast<size_t>(n.in[1])].name + "#int8");
  g.values[static_cast<size_t>(wv)].constant = weight;
  f.in[1] = wv;
  f.out = {-1};
  f.post = post;
  f.q = q;
  std::ostringstream note;
  note << n.label() << ": int8 " << dtype_name(x_type) << " x int8 -> "
       << (q.requantize ? dtype_name(q.y_type) : "float32");
  for (auto& p : post) note << ", " << p.from << " fused";
  rep.notes.push_back(note.str());
  rep.int8_ops++;
  rep.fused_activations += static_cast<int>(post.size());
  n.dead = true;
  for (Node* e : eaten) e->dead = true;
  g.nodes.push_back(std::move(f));  // may move the nodes: `n`, `x`, `w` are not used after this
  retarget_output(g, g.nodes.back(), 0, y);
  return true;
}

// Add(DQ(a), DQ(b)) [-> Relu/Clip] [-> QuantizeLinear] into QAdd. A QDQ pattern it cannot lower
// sets `why`.
bool fuse_add(Graph& g, Node& n, LoweringReport& rep, std::string& why) {
  if (n.op != "Add" || !n.domain.empty() || n.in.size() != 2) return false;
  auto a = dq_feeding(g, n.in[0]);
  auto b = dq_feeding(g, n.in[1]);
  if (!a || !b) return false;  // not a QDQ pattern
  for (const Dq* d : {&*a, &*b})
    if (std::string r = activation_dq_refusal(g, *d); !r.empty()) return decline(why, r);
  QuantInfo q;
  q.x_scale = a->scale->ptr<float>()[0];
  q.x_zero = zero_of(*a);
  q.b_scale = b->scale->ptr<float>()[0];
  q.b_zero = zero_of(*b);
  std::vector<PostOp> post;
  std::vector<Node*> eaten;
  const int y = follow_output(g, n.out[0], q, post, eaten);
  Node f;
  f.op = "QAdd";
  f.domain = "pare_rt";
  f.name = n.name;
  f.index = n.index;
  f.in = {a->q, b->q};
  f.out = {-1};
  f.post = post;
  f.q = q;
  rep.notes.push_back(n.label() + ": int8 add -> " + (q.requantize ? dtype_name(q.y_type) : "float32") +
                      (post.empty() ? "" : ", " + post[0].from + " fused"));
  rep.int8_ops++;
  rep.fused_activations += static_cast<int>(post.size());
  n.dead = true;
  for (Node* e : eaten) e->dead = true;
  g.nodes.push_back(std::move(f));
  retarget_output(g, g.nodes.back(), 0, y);
  return true;
}

// DQ(q) -> MaxPool/Flatten/Reshape/... -> Q with the same parameters: the op runs on q itself. A
// QDQ pattern it cannot lower sets `why`.
bool fuse_passthrough(Graph& g, Node& n, LoweringReport& rep, std::string& why) {
  static const std::set<std::string> ops = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze",
                                            "Unsqueeze", "Identity", "Dropout"};
  if (!ops.count(n.op) || !n.domain.empty() || !n.has_in(0)) return false;
  auto a = dq_feeding(g, n.in[0]);
  if (!a || g.constant(a->q)) return false;  // not a QDQ pattern over an activation
  if (n.op == "MaxPool" && n.out.size() > 1 && n.out[1] >= 0)
    return decline(why, "its indices output is read; the int8 MaxPool has none");
  if (std::string r = activation_dq_refusal(g, *a); !r.empty()) return decline(why, r);
  auto qo = q_reading(g, n.out[0]);
  if (!qo) return decline(why, "no per-tensor QuantizeLinear alone reads its output");
  const DType in_type = a->zero ? a->zero->dtype : DType::kUInt8;
  if (qo->scale != a->scale->ptr<float>()[0] || qo->zero != zero_of(*a) || qo->type != in_type)
    return decline(why, "the QuantizeLinear after it (scale ", qo->scale, ", zero point ", qo->zero, ", ",
                   dtype_name(qo->type), ") differs from its input's (scale ", a->scale->ptr<float>()[0], ", zero point ",
                   zero_of(*a), ", ", dtype_name(in_type), ")");
  n.in[0] = a->q;
  qo->node->dead = true;
  retarget_output(g, n, 0, qo->node->out[0]);
  rep.notes.push_back(n.label() + ": runs on int8 values");
  return true;
}

// QConv (requantized, nothing fused after it) -> QAdd: the add becomes the conv's sum post-op, with
// the add's activation and requantization. The conv's own requantization stays, as post-ops that
// round its real result to its grid and back, so the numbers are the QDQ graph's; the residual
// block's second conv then writes its block's output directly, in place of the residual when
// nothing reads that later, without the intermediate tensor and the QAdd pass.
bool fuse_residuals(Graph& g, LoweringReport& rep) {
  bool changed = false;
  for (auto& a : g.nodes) {
    // The add's activation may not be a Clip: the fused conv uses clip for its own rounding (see
    // compat::set_int8_attr on oneDNN 2.6's repeated post-ops).
    if (a.dead || a.op != "QAdd" || !a.q.requantize) continue;
    if (std::any_of(a.post.begin(), a.post.end(), [](const PostOp& p) { return p.alg == dnnl::algorithm::eltwise_clip; }))
      continue;
    for (size_t side = 0; side < 2; ++side) {
      Node* c = g.producer(a.in[side]);
      if (!c || c->op != "QConv" || !c->q.requantize || !c->post.empty() || c->q.sum) continue;
      if (sole_consumer(g, a.in[side]) != &a || a.in[0] == a.in[1]) continue;
      const int other = a.in[1 - side];
      c->q.sum = true;
      c->q.sum_scale = side == 0 ? a.q.b_scale : a.q.x_scale;
      c->q.sum_zero = side == 0 ? a.q.b_zero : a.q.x_zero;
      c->q.mid_scale = c->q.y_scale;
      c->q.mid_zero = c->q.y_zero;
      c->q.mid_type = c->q.y_type;
      c->q.y_scale = a.q.y_scale;
      c->q.y_zero = a.q.y_zero;
      c->q.y_type = a.q.y_type;
      c->post = a.post;
      c->in.resize(2);
      c->in.push_back(other);
      a.dead = true;
      retarget_output(g, *c, 0, a.out[0]);
      rep.notes.push_back(a.label() + ": fused into " + c->label() + " (residual sum)");
      changed = true;
      break;
    }
  }
  return changed;
}

// A QConv with a residual may overwrite it when every other reader of the residual runs before it
// (nodes sorted) and it is an ordinary value of the graph.
bool mark_inplace(Graph& g, LoweringReport&) {
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& c = g.nodes[i];
    if (c.op != "QConv" || !c.q.sum) continue;
    const int r = c.in[2];
    const Value& v = g.values[static_cast<size_t>(r)];
    if (v.exposed || v.constant || std::find(g.inputs.begin(), g.inputs.end(), r) != g.inputs.end()) continue;
    bool later = false;
    for (int k : g.consumers(r)) later = later || static_cast<size_t>(k) > i;
    changed = changed || (!later && !c.q.inplace);
    c.q.inplace = !later;
  }
  return changed;
}

// Without VNNI, x86 int8 kernels multiply u8 x s8 pairs into int16 (vpmaddubsw), which saturates
// when both weights of a pair are large: weights within 7 bits never saturate.
bool note_saturation(Graph& g, LoweringReport& rep) {
  using isa = dnnl::cpu_isa;
  load_dnnl();
  const isa cpu = dnnl::get_effective_cpu_isa();
  if (cpu == isa::avx2_vnni || cpu == isa::avx512_core_vnni || cpu == isa::avx512_core_bf16 || cpu == isa::avx512_core_amx)
    return false;
  int wide = 0;
  for (auto& n : g.nodes) {
    if (n.dead || (n.op != "QConv" && n.op != "QMatMul")) continue;
    const HTensor* w = g.constant(n.in[1]);
    bool big = false;
    for (int64_t k = 0; w && k < w->numel() && !big; ++k) big = std::abs(w->ptr<int8_t>()[k]) > 63;
    wide += big;
  }
  if (wide)
    rep.notes.push_back(std::to_string(wide) + " int8 layer(s) use 8-bit weights and this CPU has no VNNI: its int8 "
                        "dot products (vpmaddubsw) can saturate, as ONNX Runtime's do; `pare quantize --weight-bits 7` "
                        "gives weights that never do");
  return false;  // a note only
}

// One walk in file order, each node tried by the rewrite for its op: a node's rewrite sees the
// rewrites of the nodes before it. Nodes matching a QDQ pattern that stay float say why.
bool fuse_qdq(Graph& g, LoweringReport& rep) {
  const size_t count = g.nodes.size();
  bool changed = false;
  for (size_t i = 0; i < count; ++i) {
    if (g.nodes[i].dead || !g.nodes[i].domain.empty()) continue;
    const std::string op = g.nodes[i].op, label = g.nodes[i].label();
    std::string why;
    bool done = false;
    if (op == "Conv" || op == "Gemm" || op == "MatMul") done = fuse_compute(g, g.nodes[i], rep, why);
    else if (op == "Add") done = fuse_add(g, g.nodes[i], rep, why);
    else done = fuse_passthrough(g, g.nodes[i], rep, why);
    changed = changed || done;
    if (!why.empty()) rep.fallbacks.push_back(label + ": stays float, QDQ simulated: " + why);
  }
  return changed;
}

// Conv (constant weight) -> BatchNormalization (constant parameters): the BN's scale and shift go
// into the Conv's weight and bias.
bool fold_batch_norms(Graph& g, LoweringReport& rep) {
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& c = g.nodes[i];
    if (c.dead || c.op != "Conv" || !c.domain.empty() || !c.post.empty()) continue;
    const HTensor* w = c.has_in(1) ? g.constant(c.in[1]) : nullptr;
    if (!w || w->dtype != DType::kFloat32) continue;
    Node* bn = sole_consumer(g, c.out[0]);
    if (!bn || bn->op != "BatchNormalization" || bn->in[0] != c.out[0] || bn->in.size() < 5) continue;
    if (bn->attrs.i("training_mode", 0) != 0) continue;
    if (bn->out.size() > 1 && std::any_of(bn->out.begin() + 1, bn->out.end(), [](int v) { return v >= 0; })) continue;
    const HTensor* p[4];
    bool ok = true;
    for (int k = 0; k < 4; ++k) {
      p[k] = g.constant(bn->in[static_cast<size_t>(k + 1)]);
      ok = ok && p[k] && p[k]->dtype == DType::kFloat32 && p[k]->numel() == w->dims[0];
    }
    const HTensor* b = c.has_in(2) ? g.constant(c.in[2]) : nullptr;
    if (!ok || (c.has_in(2) && (!b || b->dtype != DType::kFloat32))) continue;
    const float eps = bn->attrs.f("epsilon", 1e-5f);
    const int64_t oc = w->dims[0], per = w->numel() / std::max<int64_t>(oc, 1);
    HTensor nw = HTensor::zeros(DType::kFloat32, w->dims), nb = HTensor::zeros(DType::kFloat32, {oc});
    for (int64_t o = 0; o < oc; ++o) {
      const double s = p[0]->f(o) / std::sqrt(p[3]->f(o) + eps);
      for (int64_t k = 0; k < per; ++k) nw.ptr<float>()[o * per + k] = static_cast<float>(w->ptr<float>()[o * per + k] * s);
      nb.ptr<float>()[o] = static_cast<float>(((b ? b->f(o) : 0.0) - p[2]->f(o)) * s + p[1]->f(o));
    }
    const int wv = g.value(g.values[static_cast<size_t>(c.in[1])].name + "#bn");
    const int bv = g.value(g.values[static_cast<size_t>(bn->out[0])].name + "#bias");
    g.values[static_cast<size_t>(wv)].constant = nw;
    g.values[static_cast<size_t>(bv)].constant = nb;
    c.in.resize(3);
    c.in[1] = wv;
    c.in[2] = bv;
    bn->dead = true;
    retarget_output(g, c, 0, bn->out[0]);
    rep.folded_batch_norms++;
    changed = true;
  }
  return changed;
}

// Activations right after Conv, Gemm, MatMul (and their int8 forms with a float output) become
// their post-ops.
bool fuse_activations(Graph& g, LoweringReport& rep) {
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& c = g.nodes[i];
    if (c.dead) continue;
    const bool compute = (c.domain.empty() && (c.op == "Conv" || c.op == "Gemm" || c.op == "MatMul")) ||
                         ((c.op == "QConv" || c.op == "QMatMul") && !c.q.requantize);
    if (!compute) continue;
    for (;;) {
      Node* a = sole_consumer(g, c.out[0]);
      if (!a || a->in.empty() || a->in[0] != c.out[0]) break;
      auto p = activation_post_op(*a, g);
      // One eltwise algorithm appears once in a chain (oneDNN 2.6 miscomputes repeats); int8
      // outputs in float may get a final linear.
      if (!p || p->alg == dnnl::algorithm::eltwise_linear ||
          std::any_of(c.post.begin(), c.post.end(), [&](const PostOp& q) { return q.alg == p->alg; }))
        break;
      c.post.push_back(*p);
      a->dead = true;
      retarget_output(g, c, 0, a->out[0]);
      rep.fused_activations++;
      changed = true;
    }
  }
  return changed;
}

// Identity and Dropout (inference) of anything: readers read the source.
bool bypass_identities(Graph& g, LoweringReport&) {
  bool changed = false;
  for (auto& n : g.nodes) {
    if (n.dead || !n.domain.empty() || (n.op != "Identity" && n.op != "Dropout")) continue;
    if (n.op == "Dropout" && n.out.size() > 1 && n.out[1] >= 0) continue;  // the mask is wanted
    if (n.op == "Dropout" && n.in.size() > 2 && n.in[2] >= 0) continue;    // training_mode is checked
    const int src = n.in[0], dst = n.out[0];
    if (g.values[static_cast<size_t>(dst)].exposed) continue;
    for (auto& m : g.nodes)
      if (!m.dead)
        for (auto& v : m.in)
          if (v == dst) v = src;
    n.dead = true;
    changed = true;
  }
  return changed;
}


// Nodes whose inputs are all constant are computed now (shape subgraphs of a fixed-shape model,
// weights dequantized for a float op, ...).
bool fold_constants(Graph& g, LoweringReport& rep) {
  bool changed = false;
  const OpTable& table = OpTable::get();
  for (auto& n : g.nodes) {
    if (n.dead) continue;
    const OpImpl* impl = table.find(n.op, n.domain);
    if (!impl || !impl->ref || n.op == "QConv" || n.op == "QMatMul") continue;
    std::vector<const HTensor*> in;
    bool all = true;
    for (int v : n.in) {
      if (v < 0) {
        in.push_back(nullptr);
        continue;
      }
      const HTensor* c = g.constant(v);
      all = all && c;
      in.push_back(c);
    }
    if (!all || n.in.empty()) continue;
    std::vector<HTensor> out = eval_node(*impl, n, in);
    for (size_t k = 0; k < n.out.size(); ++k)
      if (n.out[k] >= 0 && k < out.size()) g.values[static_cast<size_t>(n.out[k])].constant = out[k];
    n.dead = true;
    rep.constant_nodes++;
    changed = true;
  }
  return changed;
}

// Drops nodes whose outputs nobody reads (in any order: int8 nodes were appended at the end).
bool drop_dead(Graph& g, LoweringReport&) {
  std::vector<char> live(g.values.size(), 0), needed(g.nodes.size(), 0);
  for (int v : g.outputs) live[static_cast<size_t>(v)] = 1;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = g.nodes.size(); i-- > 0;) {
      Node& n = g.nodes[i];
      if (n.dead || needed[i]) continue;
      bool used = false;
      for (int v : n.out) used = used || (v >= 0 && live[static_cast<size_t>(v)]);
      if (!used) continue;
      needed[i] = 1;
      changed = true;
      for (int v : n.in)
        if (v >= 0) live[static_cast<size_t>(v)] = 1;
    }
  }
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!needed[i] && !g.nodes[i].dead) {
      g.nodes[i].dead = true;
      changed = true;
    }
  return changed;
}

// Orders the live nodes so each comes after its producers (int8 nodes were appended at the end).
bool sort_nodes(Graph& g, LoweringReport&) {
  std::vector<Node> live;
  for (auto& n : g.nodes)
    if (!n.dead) live.push_back(std::move(n));
  bool changed = live.size() != g.nodes.size();
  std::vector<char> ready(g.values.size(), 0);
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].constant) ready[v] = 1;
  for (int v : g.inputs) ready[static_cast<size_t>(v)] = 1;
  std::vector<Node> sorted;
  std::vector<char> done(live.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t i = 0; i < live.size(); ++i) {
      if (done[i]) continue;
      bool ok = true;
      for (int v : live[i].in) ok = ok && (v < 0 || ready[static_cast<size_t>(v)]);
      if (!ok) continue;
      for (int v : live[i].out)
        if (v >= 0) ready[static_cast<size_t>(v)] = 1;
      done[i] = 1;
      changed = changed || i != sorted.size();
      sorted.push_back(std::move(live[i]));
      progress = true;
    }
  }
  for (size_t i = 0; i < live.size(); ++i) {
    if (done[i]) continue;
    std::string missing;
    for (int v : live[i].in)
      if (v >= 0 && !ready[static_cast<size_t>(v)]) missing = g.values[static_cast<size_t>(v)].name;
    throw InputError(live[i].label() + ": input '" + missing + "' is never computed (the graph has a cycle or "
                     "reads a value no node produces)");
  }
  g.nodes = std::move(sorted);
  for (auto& v : g.values) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].out)
      if (v >= 0) g.values[static_cast<size_t>(v)].producer = static_cast<int>(i);
  return changed;
}


bool decode_matmul_nbits_pass(Graph& g, LoweringReport&) { return decode_matmul_nbits(g); }

}  // namespace

const std::vector<Pass>& graph_passes() {
  static const std::vector<Pass> passes = {
      {"decode_matmul_nbits", "com.microsoft MatMulNBits into a float MatMul (+ Add) with its 4-bit weights decoded once",
       false, decode_matmul_nbits_pass},
      {"bypass_identities", "readers of Identity and inference Dropout read their input instead", false,
       bypass_identities},
      {"fuse_qdq", "DequantizeLinear -> Conv/Gemm/MatMul/Add/MaxPool/Reshape/... -> QuantizeLinear into int8 nodes",
       true, fuse_qdq},
      {"drop_dead", "nodes whose outputs nobody reads are dropped (here: the DequantizeLinear nodes fuse_qdq replaced)",
       true, drop_dead},
      {"fuse_residuals", "QConv -> QAdd into the QConv with a residual sum post-op", true, fuse_residuals},
      {"note_saturation", "notes int8 layers whose 8-bit weights can saturate on a CPU without VNNI (a note only)", true,
       note_saturation},
      {"fold_constants", "nodes whose inputs are all constant are computed once at load", false, fold_constants},
      {"fold_batch_norms", "Conv -> BatchNormalization into the Conv's weight and bias", false, fold_batch_norms},
      {"fuse_activations", "Relu/Clip/... after Conv, Gemm, MatMul (and float-output int8 nodes) into their post-ops",
       false, fuse_activations},
      {"drop_dead", "nodes whose outputs nobody reads are dropped", false, drop_dead},
      {"sort_nodes", "live nodes in an order where each comes after its producers; dead nodes removed", false,
       sort_nodes},
      {"mark_inplace", "a QConv with a residual sum writes over the residual when nothing reads it later", false,
       mark_inplace},
  };
  return passes;
}

const Pass& find_pass(const std::string& name) {
  for (const Pass& p : graph_passes())
    if (name == p.name) return p;
  throw InternalError("pare_rt has no graph pass named '" + name + "'");
}

void run_passes(Graph& g, const Options& opts, LoweringReport& rep) {
  for (const Pass& p : graph_passes()) {
    if (p.int8_only && !opts.int8_) continue;
    if (p.run(g, rep)) rep.passes.push_back(p.name);
  }
}

}  // namespace pare::rt
