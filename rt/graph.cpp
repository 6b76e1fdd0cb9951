// Builds pare_rt's graph from a read model, then runs the table of load-time passes on it
// (passes.cpp: QDQ patterns into int8 nodes, BatchNormalization into the Conv before it, activations
// into the op before them, constant subgraphs computed once, dead nodes dropped).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "rt/internal.h"
#include "rt/passes.h"

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

// The lowered graph on stderr (PARE_RT_DUMP=1), for debugging.
void dump(const Graph& g) {
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

// Adds the file's nodes to `g`, each checked against the op table (arity, static attributes);
// Constant nodes become constants. Returns the values the nodes define, with the graph inputs.
std::set<int> add_nodes(Graph& g, const reader::Model& m) {
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
  return defined;
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
  const std::set<int> defined = add_nodes(g, m);
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

  run_passes(g, opts, rep);
  if (const char* e = std::getenv("PARE_RT_DUMP"); e && *e == '1') dump(g);
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
  if (!passes.empty()) {
    os << "  passes that changed the graph:";
    for (auto& p : passes) os << " " << p;
    os << "\n";
  }
  for (auto& f : fallbacks) os << "  fallback: " << f << "\n";
  return os.str();
}

}  // namespace pare::rt
