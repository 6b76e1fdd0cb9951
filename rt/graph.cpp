// Builds pare_rt's graph from a read model and rewrites it for execution: QDQ patterns into int8
// nodes, BatchNormalization into the Conv before it, activations into the op before them, constant
// subgraphs computed once, dead nodes dropped.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "rt/internal.h"

namespace pare::rt {

// ---------------------------------------------------------------------------------------------
// Attributes, nodes, the graph

const reader::AttrValue* Attrs::find(const std::string& k) const {
  for (auto& [name, v] : list_)
    if (name == k) return &v;
  return nullptr;
}

namespace {
template <class T>
const T& attr_as(const reader::AttrValue* v, const std::string& k, const std::string& node, const char* kind) {
  const T* p = std::get_if<T>(v);
  PARE_CHECK(p != nullptr, node, ": attribute '", k, "' must be ", kind);
  return *p;
}
}  // namespace

int64_t Attrs::i(const std::string& k, int64_t def) const {
  auto* v = find(k);
  return v ? attr_as<int64_t>(v, k, node_, "an INT") : def;
}
float Attrs::f(const std::string& k, float def) const {
  auto* v = find(k);
  return v ? attr_as<float>(v, k, node_, "a FLOAT") : def;
}
std::string Attrs::s(const std::string& k, const std::string& def) const {
  auto* v = find(k);
  return v ? attr_as<std::string>(v, k, node_, "a STRING") : def;
}
std::vector<int64_t> Attrs::ints(const std::string& k, const std::vector<int64_t>& def) const {
  auto* v = find(k);
  return v ? attr_as<std::vector<int64_t>>(v, k, node_, "INTS") : def;
}
std::vector<float> Attrs::floats(const std::string& k, const std::vector<float>& def) const {
  auto* v = find(k);
  return v ? attr_as<std::vector<float>>(v, k, node_, "FLOATS") : def;
}
const reader::Tensor* Attrs::tensor(const std::string& k) const {
  auto* v = find(k);
  return v ? &attr_as<reader::Tensor>(v, k, node_, "a TENSOR") : nullptr;
}
std::vector<std::string> Attrs::names() const {
  std::vector<std::string> r;
  for (auto& [k, v] : list_) r.push_back(k);
  return r;
}
void Attrs::set_int(const std::string& k, int64_t v) {
  for (auto& [name, x] : list_)
    if (name == k) {
      x = v;
      return;
    }
  list_.emplace_back(k, v);
}

std::string Node::label() const {
  return name.empty() ? op + " #" + std::to_string(index) : op + " '" + name + "'";
}

int Graph::value(const std::string& name) {
  auto it = by_name.find(name);
  if (it != by_name.end()) return it->second;
  const int id = static_cast<int>(values.size());
  values.push_back(Value{name, std::nullopt, -1, false});
  by_name.emplace(name, id);
  return id;
}

std::vector<int> Graph::consumers(int v) const {
  std::vector<int> r;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].dead) continue;
    for (int x : nodes[i].in)
      if (x == v) {
        r.push_back(static_cast<int>(i));
        break;
      }
  }
  return r;
}

Node* Graph::producer(int v) {
  const int p = values[static_cast<size_t>(v)].producer;
  if (p < 0 || nodes[static_cast<size_t>(p)].dead) return nullptr;
  return &nodes[static_cast<size_t>(p)];
}

namespace {

// ---------------------------------------------------------------------------------------------
// Reading

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while (!(m & 0x400u));
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A constant from the file: the block is shared, not copied. float16/bfloat16/float64 become
// float32 and int16 becomes int32 (pare_rt computes in those).
HTensor from_reader(const reader::Tensor& t, const std::string& what, std::vector<std::string>* notes) {
  HTensor h;
  h.dims = t.dims;
  if (auto d = dtype_from_onnx(t.elem_type)) {
    h.dtype = *d;
    h.storage = t.storage;
    h.data = t.data;
    if (!h.data) h = HTensor::zeros(*d, t.dims);
    return h;
  }
  const int64_t n = t.numel();
  const bool to_int = t.elem_type == reader::kInt16;
  h = HTensor::zeros(to_int ? DType::kInt32 : DType::kFloat32, t.dims);
  for (int64_t k = 0; k < n; ++k) {
    switch (t.elem_type) {
      case reader::kInt16: h.ptr<int32_t>()[k] = static_cast<const int16_t*>(t.data)[k]; break;
      case reader::kDouble: h.ptr<float>()[k] = static_cast<float>(static_cast<const double*>(t.data)[k]); break;
      case reader::kFloat16: h.ptr<float>()[k] = half_to_float(static_cast<const uint16_t*>(t.data)[k]); break;
      case reader::kBFloat16: {
        const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(t.data)[k]) << 16;
        std::memcpy(h.ptr<float>() + k, &bits, 4);
        break;
      }
      default: PARE_CHECK(false, what, " has element type ", reader::elem_type_name(t.elem_type), ", which pare_rt does not run");
    }
  }
  if (notes) notes->push_back(what + ": " + reader::elem_type_name(t.elem_type) + " read as " + dtype_name(h.dtype));
  return h;
}

ValueSpec spec_of(const reader::ValueInfo& v, const std::string& role) {
  PARE_CHECK(v.is_tensor, role, " '", v.name, "' is not a tensor (sequences and maps are not supported)");
  auto d = dtype_from_onnx(v.elem_type);
  PARE_CHECK(d.has_value(), role, " '", v.name, "' has element type ", reader::elem_type_name(v.elem_type),
             "; pare_rt takes float32, uint8, int8, int32, int64 and bool");
  ValueSpec s;
  s.name = v.name;
  s.dtype = *d;
  for (auto& dim : v.dims) {
    s.dims.push_back(dim.value);
    s.symbols.push_back(dim.value >= 0 ? "" : dim.symbol);
  }
  return s;
}

// A Constant node's value.
HTensor constant_value(const Node& n) {
  const Attrs& a = n.attrs;
  if (const reader::Tensor* t = a.tensor("value")) return from_reader(*t, n.label(), nullptr);
  if (a.has("value_float")) {
    HTensor h = HTensor::zeros(DType::kFloat32, {});
    h.ptr<float>()[0] = a.f("value_float", 0);
    return h;
  }
  if (a.has("value_int")) {
    HTensor h = HTensor::zeros(DType::kInt64, {});
    h.ptr<int64_t>()[0] = a.i("value_int", 0);
    return h;
  }
  if (a.has("value_floats")) {
    auto v = a.floats("value_floats");
    HTensor h = HTensor::zeros(DType::kFloat32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), h.ptr<float>());
    return h;
  }
  if (a.has("value_ints")) {
    auto v = a.ints("value_ints");
    HTensor h = HTensor::zeros(DType::kInt64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), h.ptr<int64_t>());
    return h;
  }
  throw InputError(n.label() + ": Constant needs one of value, value_float, value_int, value_floats, value_ints "
                   "(strings and sparse values are not supported)");
}

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

// A per-tensor activation DQ on a value computed at run time (u8 or s8).
bool activation_dq(Graph& g, const Dq& d) {
  if (g.constant(d.q) || !is_scalar(d.scale) || (d.zero && !is_scalar(d.zero))) return false;
  if (d.zero && d.zero->dtype != DType::kUInt8 && d.zero->dtype != DType::kInt8) return false;
  return d.scale->ptr<float>()[0] > 0;
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

// Replaces compute node `n` (Conv/Gemm/MatMul over a quantized activation and int8 weights) by an
// int8 node; true when it did.
bool fuse_compute(Graph& g, Node& n, LoweringReport& rep) {
  if (!n.has_in(0) || !n.has_in(1)) return false;
  auto x = dq_feeding(g, n.in[0]);
  auto w = dq_feeding(g, n.in[1]);
  if (!x || !w || !activation_dq(g, *x)) return false;
  const HTensor* wq = g.constant(w->q);
  if (!wq || wq->dtype != DType::kInt8 || !zero_is_all_zero(w->zero)) return false;
  const int64_t wrank = static_cast<int64_t>(wq->dims.size());

  // Which weight axis holds output channels, and the weight as the int8 node wants it.
  HTensor weight = *wq;
  int64_t out_axis = 0;
  if (n.op == "Conv") {
    if (wrank < 3) return false;
    out_axis = 0;
  } else if (n.op == "Gemm") {
    if (wrank != 2 || n.attrs.i("transA", 0) != 0 || n.attrs.f("alpha", 1.f) != 1.f || n.attrs.f("beta", 1.f) != 1.f)
      return false;
    const bool trans = n.attrs.i("transB", 0) != 0;
    out_axis = trans ? 0 : 1;
    if (trans) {  // stored [N, K]: the int8 matmul takes [K, N]
      const int64_t N = wq->dims[0], K = wq->dims[1];
      weight = HTensor::zeros(DType::kInt8, {K, N});
      for (int64_t a = 0; a < N; ++a)
        for (int64_t b = 0; b < K; ++b) weight.ptr<int8_t>()[b * N + a] = wq->ptr<int8_t>()[a * K + b];
    }
  } else {  // MatMul
    if (wrank != 2) return false;
    out_axis = 1;
  }
  const int64_t channels = wq->dims[static_cast<size_t>(out_axis)];
  const int64_t ns = w->scale->numel();
  int64_t dq_axis = w->axis < 0 ? w->axis + wrank : w->axis;
  if (ns != 1 && (ns != channels || dq_axis != out_axis)) return false;

  QuantInfo q;
  q.x_scale = x->scale->ptr<float>()[0];
  q.x_zero = zero_of(*x);
  const DType x_type = x->zero ? x->zero->dtype : DType::kUInt8;
  const int x_value = x->q;
  for (int64_t c = 0; c < ns; ++c) q.w_scale.push_back(w->scale->ptr<float>()[c]);
  for (float s : q.w_scale)
    if (!(s > 0) || !std::isfinite(s)) return false;

  // The bias, in the accumulator domain: int32 as stored when its scale is x_scale * w_scale,
  // else float b / (x_scale * w_scale).
  const size_t bias_slot = 2;
  if (n.op != "MatMul" && n.has_in(bias_slot)) {
    const HTensor* b = g.constant(n.in[bias_slot]);
    std::optional<Dq> bd;
    if (!b) {
      bd = dq_feeding(g, n.in[bias_slot]);
      if (!bd || !g.constant(bd->q) || !zero_is_all_zero(bd->zero)) return false;
    }
    const HTensor& src = b ? *b : *g.constant(bd->q);
    if (src.numel() != channels || (src.dims.size() != 1)) return false;
    bool exact = !b && src.dtype == DType::kInt32;
    std::vector<double> real(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      const double bs = b ? 1.0 : bd->scale->f(bd->scale->numel() == 1 ? 0 : c);
      const double acc_scale = static_cast<double>(q.x_scale) * q.w_scale[ns == 1 ? 0 : c];
      real[static_cast<size_t>(c)] = src.f(c) * bs / acc_scale;
      if (exact && std::fabs(bs / acc_scale - 1.0) > 1e-6) exact = false;
    }
    HTensor acc = HTensor::zeros(exact ? DType::kInt32 : DType::kFloat32, {channels});
    for (int64_t c = 0; c < channels; ++c) {
      if (exact) acc.ptr<int32_t>()[c] = static_cast<int32_t>(src.i(c));
      else acc.ptr<float>()[c] = static_cast<float>(real[static_cast<size_t>(c)]);
    }
    q.bias = acc;
  }

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

// Add(DQ(a), DQ(b)) [-> Relu/Clip] [-> QuantizeLinear] into QAdd.
bool fuse_add(Graph& g, Node& n, LoweringReport& rep) {
  if (n.op != "Add" || !n.domain.empty() || n.in.size() != 2) return false;
  auto a = dq_feeding(g, n.in[0]);
  auto b = dq_feeding(g, n.in[1]);
  if (!a || !b || !activation_dq(g, *a) || !activation_dq(g, *b)) return false;
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

// DQ(q) -> MaxPool/Flatten/Reshape/... -> Q with the same parameters: the op runs on q itself.
bool fuse_passthrough(Graph& g, Node& n, LoweringReport& rep) {
  static const std::set<std::string> ops = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze",
                                            "Unsqueeze", "Identity", "Dropout"};
  if (!ops.count(n.op) || !n.domain.empty() || !n.has_in(0)) return false;
  if (n.op == "MaxPool" && n.out.size() > 1 && n.out[1] >= 0) return false;  // indices wanted
  auto a = dq_feeding(g, n.in[0]);
  if (!a || !activation_dq(g, *a)) return false;
  auto qo = q_reading(g, n.out[0]);
  if (!qo || qo->scale != a->scale->ptr<float>()[0] || qo->zero != zero_of(*a) ||
      qo->type != (a->zero ? a->zero->dtype : DType::kUInt8))
    return false;
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
void fuse_residuals(Graph& g, LoweringReport& rep) {
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
      break;
    }
  }
}

// A QConv with a residual may overwrite it when every other reader of the residual runs before it
// (nodes sorted) and it is an ordinary value of the graph.
void mark_inplace(Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& c = g.nodes[i];
    if (c.op != "QConv" || !c.q.sum) continue;
    const int r = c.in[2];
    const Value& v = g.values[static_cast<size_t>(r)];
    if (v.exposed || v.constant || std::find(g.inputs.begin(), g.inputs.end(), r) != g.inputs.end()) continue;
    bool later = false;
    for (int k : g.consumers(r)) later = later || static_cast<size_t>(k) > i;
    c.q.inplace = !later;
  }
}

// Without VNNI, x86 int8 kernels multiply u8 x s8 pairs into int16 (vpmaddubsw), which saturates
// when both weights of a pair are large: weights within 7 bits never saturate.
void note_saturation(const Graph& g, LoweringReport& rep) {
  using isa = dnnl::cpu_isa;
  load_dnnl();
  const isa cpu = dnnl::get_effective_cpu_isa();
  if (cpu == isa::avx2_vnni || cpu == isa::avx512_core_vnni || cpu == isa::avx512_core_bf16 || cpu == isa::avx512_core_amx)
    return;
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
}

void fuse_qdq(Graph& g, LoweringReport& rep) {
  const size_t count = g.nodes.size();
  for (size_t i = 0; i < count; ++i) {
    if (g.nodes[i].dead || !g.nodes[i].domain.empty()) continue;
    const std::string op = g.nodes[i].op;
    if (op == "Conv" || op == "Gemm" || op == "MatMul") fuse_compute(g, g.nodes[i], rep);
    else if (op == "Add") fuse_add(g, g.nodes[i], rep);
    else fuse_passthrough(g, g.nodes[i], rep);
  }
}

// Conv (constant weight) -> BatchNormalization (constant parameters): the BN's scale and shift go
// into the Conv's weight and bias.
void fold_batch_norms(Graph& g, LoweringReport& rep) {
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
  }
}

// Activations right after Conv, Gemm, MatMul (and their int8 forms with a float output) become
// their post-ops.
void fuse_activations(Graph& g, LoweringReport& rep) {
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
    }
  }
}

// Identity and Dropout (inference) of anything: readers read the source.
void bypass_identities(Graph& g) {
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
  }
}

}  // namespace

namespace {

// Nodes whose inputs are all constant are computed now (shape subgraphs of a fixed-shape model,
// weights dequantized for a float op, ...).
void fold_constants(Graph& g, LoweringReport& rep) {
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
  }
}

// Drops nodes whose outputs nobody reads (in any order: int8 nodes were appended at the end).
void drop_dead(Graph& g) {
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
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!needed[i]) g.nodes[i].dead = true;
}

// Orders the live nodes so each comes after its producers (int8 nodes were appended at the end).
void sort_nodes(Graph& g) {
  std::vector<Node> live;
  for (auto& n : g.nodes)
    if (!n.dead) live.push_back(std::move(n));
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
}

}  // namespace

Graph build_graph(const reader::Model& m, const Options& opts, LoweringReport& rep) {
  Graph g;
  g.origin = m.origin;
  g.opset = m.opset;
  for (auto& [name, t] : m.initializers) {
    const int v = g.value(name);
    g.values[static_cast<size_t>(v)].constant = from_reader(t, "initializer '" + name + "'", &rep.notes);
  }
  for (auto& vi : m.inputs) {
    g.input_specs.push_back(spec_of(vi, "graph input"));
    const int v = g.value(vi.name);
    PARE_CHECK(!g.values[static_cast<size_t>(v)].constant, "graph input '", vi.name, "' is also an initializer");
    g.inputs.push_back(v);
  }
  const OpTable& table = OpTable::get();
  std::set<int> defined(g.inputs.begin(), g.inputs.end());
  for (auto& rn : m.nodes) {
    Node n;
    n.op = rn.op_type;
    n.domain = rn.domain;
    n.name = rn.name;
    n.index = rn.index;
    n.attrs = Attrs(rn.attrs, rn.label());
    const std::string label = n.label();
    const OpImpl* impl = n.domain == "pare_rt" ? nullptr : table.find(n.op, n.domain);
    if (!impl) throw InputError(label + ": pare_rt cannot run it: " + why_unsupported(n.op, n.domain));
    const int nin = static_cast<int>(rn.inputs.size()), nout = static_cast<int>(rn.outputs.size());
    PARE_CHECK(nin >= impl->in_min && (impl->in_max < 0 || nin <= impl->in_max), label, ": ", n.op, " takes ",
               impl->in_min, (impl->in_max == impl->in_min ? "" : impl->in_max < 0 ? " or more" : " to " + std::to_string(impl->in_max)),
               " inputs, got ", nin);
    PARE_CHECK(nout >= impl->out_min && nout <= impl->out_max, label, ": ", n.op, " has ", impl->out_min,
               impl->out_max == impl->out_min ? "" : " to " + std::to_string(impl->out_max), " outputs, got ", nout);
    for (auto& name : rn.inputs) {
      if (name.empty()) {
        n.in.push_back(-1);
        continue;
      }
      auto it = g.by_name.find(name);
      PARE_CHECK(it != g.by_name.end(), label, ": input '", name, "' is not a graph input, an initializer or the "
                 "output of an earlier node");
      n.in.push_back(it->second);
    }
    for (auto& name : rn.outputs) {
      if (name.empty()) {
        n.out.push_back(-1);
        continue;
      }
      PARE_CHECK(!g.by_name.count(name) || !defined.count(g.by_name.at(name)) , label, ": output '", name,
                 "' is already defined");
      PARE_CHECK(!g.by_name.count(name) || !g.values[static_cast<size_t>(g.by_name.at(name))].constant, label,
                 ": output '", name, "' is already an initializer");
      const int v = g.value(name);
      defined.insert(v);
      n.out.push_back(v);
    }
    if (impl->check) {
      const std::string why = impl->check(n, g);
      PARE_CHECK(why.empty(), label, ": ", why);
    }
    if (n.op == "Constant" && n.domain.empty()) {
      g.values[static_cast<size_t>(n.out[0])].constant = constant_value(n);
      continue;
    }
    for (int v : n.out)
      if (v >= 0) g.values[static_cast<size_t>(v)].producer = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(n));
  }
  rep.nodes = static_cast<int>(m.nodes.size());
  for (auto& vi : m.outputs) {
    g.output_specs.push_back(spec_of(vi, "graph output"));
    auto it = g.by_name.find(vi.name);
    PARE_CHECK(it != g.by_name.end() && (defined.count(it->second) || g.values[static_cast<size_t>(it->second)].constant),
               "graph output '", vi.name, "' is never computed");
    g.outputs.push_back(it->second);
  }
  for (auto& name : opts.extra_outputs_) {
    auto it = g.by_name.find(name);
    PARE_CHECK(it != g.by_name.end() && !name.empty(), "'", m.origin, "' has no value named '", name, "'");
    ValueSpec s;
    s.name = name;
    g.output_specs.push_back(s);  // dtype and dims are known once planned
    g.outputs.push_back(it->second);
  }
  for (int v : g.outputs) g.values[static_cast<size_t>(v)].exposed = true;

  decode_matmul_nbits(g);
  bypass_identities(g);
  if (opts.int8_) {
    fuse_qdq(g, rep);
    drop_dead(g);  // the DequantizeLinear nodes the int8 nodes replaced no longer count as readers
    fuse_residuals(g, rep);
    note_saturation(g, rep);
  }
  fold_constants(g, rep);
  fold_batch_norms(g, rep);
  fuse_activations(g, rep);
  drop_dead(g);
  if (const char* e = std::getenv("PARE_RT_DUMP"); e && *e == '1') {  // the lowered graph, for debugging
    for (auto& n : g.nodes) {
      if (n.dead) continue;
      std::fprintf(stderr, "pare_rt: %s%s%s", n.domain.empty() ? "" : (n.domain + ":").c_str(), n.label().c_str(), " (");
      for (int v : n.in) std::fprintf(stderr, " %s", v < 0 ? "-" : g.values[static_cast<size_t>(v)].name.c_str());
      std::fprintf(stderr, " ) ->");
      for (int v : n.out) std::fprintf(stderr, " %s", v < 0 ? "-" : g.values[static_cast<size_t>(v)].name.c_str());
      for (auto& p : n.post) std::fprintf(stderr, " +%s", p.from.c_str());
      std::fprintf(stderr, "\n");
    }
  }
  sort_nodes(g);
  mark_inplace(g);
  for (auto& n : g.nodes)
    if (n.domain.empty() && (n.op == "Conv" || n.op == "Gemm" || n.op == "MatMul" || n.op == "MatMulInteger"))
      rep.fp32_ops += n.op == "MatMulInteger" ? 0 : 1;
  return g;
}

std::string LoweringReport::to_text() const {
  std::ostringstream os;
  os << nodes << " nodes: " << int8_ops << " int8, " << fp32_ops << " fp32 compute, " << folded_batch_norms
     << " BatchNorm folded, " << fused_activations << " activations fused, " << constant_nodes
     << " computed at load\n";
  for (auto& n : notes) os << "  " << n << "\n";
  return os.str();
}

}  // namespace pare::rt
