#include "core/graph.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/module.h"
#include "core/op_registry.h"

namespace pare::core {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + s[i].str();
  return r + "]";
}

const char* attr_kind_name(AttrKind k) {
  static const char* names[] = {"int", "float", "string", "tensor", "ints", "floats", "strings"};
  return names[static_cast<int>(k)];
}

namespace {
template <class T>
const T* typed_attr(const Node& n, const std::string& key, AttrKind kind) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) return nullptr;
  const T* v = std::get_if<T>(&it->second);
  PARE_CHECK(v != nullptr, n.describe(), ": attribute '", key, "' must be of kind ",
             attr_kind_name(kind), ", got ", attr_kind_name(attr_kind(it->second)));
  return v;
}
}  // namespace

int64_t Node::attr_int(const std::string& key, int64_t def) const {
  auto v = typed_attr<int64_t>(*this, key, AttrKind::kInt);
  return v ? *v : def;
}
float Node::attr_float(const std::string& key, float def) const {
  auto v = typed_attr<float>(*this, key, AttrKind::kFloat);
  return v ? *v : def;
}
std::string Node::attr_string(const std::string& key, const std::string& def) const {
  auto v = typed_attr<std::string>(*this, key, AttrKind::kString);
  return v ? *v : def;
}
std::vector<int64_t> Node::attr_ints(const std::string& key, const std::vector<int64_t>& def) const {
  auto v = typed_attr<std::vector<int64_t>>(*this, key, AttrKind::kInts);
  return v ? *v : def;
}
std::vector<float> Node::attr_floats(const std::string& key, const std::vector<float>& def) const {
  auto v = typed_attr<std::vector<float>>(*this, key, AttrKind::kFloats);
  return v ? *v : def;
}
at::Tensor Node::attr_tensor(const std::string& key) const {
  auto v = typed_attr<at::Tensor>(*this, key, AttrKind::kTensor);
  PARE_CHECK(v != nullptr, describe(), ": required attribute '", key, "' is missing");
  return *v;
}
std::string Node::describe() const {
  return op_type + " node '" + (name.empty() ? (outputs.empty() ? "?" : outputs[0]) : name) + "'";
}

Node& Graph::add_node(const std::string& op_type, std::vector<std::string> ins,
                      std::vector<std::string> outs, std::map<std::string, AttrValue> attrs,
                      std::string node_name) {
  if (node_name.empty()) node_name = op_type + "_" + std::to_string(nodes.size());
  Node n;
  n.op_type = op_type;
  n.name = std::move(node_name);
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  n.attrs = std::move(attrs);
  nodes.push_back(std::move(n));
  return nodes.back();
}

void Graph::topo_sort() {
  std::unordered_map<std::string, int> producer_of;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (auto& o : nodes[i].outputs)
      if (!o.empty()) producer_of[o] = static_cast<int>(i);
  // Kahn's algorithm, taking ready nodes in their original order (stable for sorted graphs).
  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<int>> users(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::set<int> deps;
    for (auto& in : nodes[i].inputs) {
      auto it = producer_of.find(in);
      if (!in.empty() && it != producer_of.end() && it->second != static_cast<int>(i))
        deps.insert(it->second);
    }
    pending[i] = static_cast<int>(deps.size());
    for (int d : deps) users[d].push_back(static_cast<int>(i));
  }
  std::set<int> ready;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (pending[i] == 0) ready.insert(static_cast<int>(i));
  std::vector<int> order;
  while (!ready.empty()) {
    int i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    for (int u : users[i])
      if (--pending[u] == 0) ready.insert(u);
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i)
      PARE_CHECK(pending[i] == 0, "graph '", name, "' has a cycle through ", nodes[i].describe());
  }
  std::vector<Node> sorted;
  sorted.reserve(nodes.size());
  for (int i : order) sorted.push_back(std::move(nodes[i]));
  nodes = std::move(sorted);
}

void Graph::verify() const {
  const auto& reg = OpRegistry::global();
  std::unordered_set<std::string> defined;
  auto define = [&](const std::string& v, const std::string& by) {
    PARE_CHECK(!v.empty(), "graph '", name, "': ", by, " defines a value with an empty name");
    PARE_CHECK(defined.insert(v).second, "graph '", name, "': value '", v,
               "' is defined more than once (again by ", by, ")");
  };
  for (auto& in : inputs) define(in.name, "graph input");
  for (auto& [k, t] : initializers) {
    PARE_CHECK(t.defined(), "graph '", name, "': initializer '", k, "' holds no tensor");
    if (std::none_of(inputs.begin(), inputs.end(), [&](const ValueInfo& v) { return v.name == k; }))
      define(k, "initializer");
  }
  for (auto& n : nodes) {
    const OpDef* op = reg.find(n.op_type);
    PARE_CHECK(op != nullptr, "graph '", name, "': ", n.describe(), " uses unknown op '", n.op_type,
               "'", n.domain.empty() ? "" : " (domain '" + n.domain + "')", ", which is not among the ",
               reg.names().size(), " ops pare supports");
    int nin = static_cast<int>(n.inputs.size()), nout = static_cast<int>(n.outputs.size());
    PARE_CHECK(nin >= op->inputs_min && (op->inputs_max < 0 || nin <= op->inputs_max), n.describe(),
               " takes ", op->inputs_min, "..", op->inputs_max < 0 ? std::string("n") : std::to_string(op->inputs_max),
               " inputs, got ", nin);
    PARE_CHECK(nout >= op->outputs_min && (op->outputs_max < 0 || nout <= op->outputs_max),
               n.describe(), " has ", op->outputs_min, "..",
               op->outputs_max < 0 ? std::string("n") : std::to_string(op->outputs_max),
               " outputs, got ", nout);
    for (int i = 0; i < nin; ++i) {
      const auto& v = n.inputs[i];
      PARE_CHECK(v.empty() || defined.count(v), "graph '", name, "': ", n.describe(), " reads '", v,
                 "' (input ", i, "), which no graph input, initializer or earlier node defines");
    }
    for (auto& [k, v] : n.attrs) {
      const AttrSpec* spec = op->find_attr(k);
      PARE_CHECK(spec != nullptr, n.describe(), " has attribute '", k, "', which ", n.op_type,
                 " does not take");
      PARE_CHECK(spec->kind == attr_kind(v), n.describe(), ": attribute '", k, "' must be of kind ",
                 attr_kind_name(spec->kind), ", got ", attr_kind_name(attr_kind(v)));
    }
    for (auto& spec : op->attrs)
      PARE_CHECK(!spec.required || n.has_attr(spec.name), n.describe(), " lacks required attribute '",
                 spec.name, "'");
    for (auto& o : n.outputs)
      if (!o.empty()) define(o, n.describe());
  }
  for (auto& o : outputs)
    PARE_CHECK(defined.count(o.name), "graph '", name, "': output '", o.name, "' is never produced");
}

int Graph::producer(const std::string& value) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    for (auto& o : nodes[i].outputs)
      if (o == value) return static_cast<int>(i);
  return -1;
}

std::vector<int> Graph::consumers(const std::string& value) const {
  std::vector<int> r;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (std::find(nodes[i].inputs.begin(), nodes[i].inputs.end(), value) != nodes[i].inputs.end())
      r.push_back(static_cast<int>(i));
  return r;
}

const ValueInfo* Graph::find_input(const std::string& n) const {
  for (auto& v : inputs)
    if (v.name == n) return &v;
  return nullptr;
}

std::string Graph::unique_name(const std::string& base) const {
  std::unordered_set<std::string> used;
  for (auto& v : inputs) used.insert(v.name);
  for (auto& [k, t] : initializers) used.insert(k);
  for (auto& n : nodes) used.insert(n.outputs.begin(), n.outputs.end());
  if (!used.count(base)) return base;
  for (int i = 1;; ++i)
    if (!used.count(base + "_" + std::to_string(i))) return base + "_" + std::to_string(i);
}

std::map<std::string, std::string> Graph::tied_initializers() const {
  std::map<const void*, std::vector<std::string>> by_storage;
  for (auto& [k, t] : initializers)
    if (t.defined() && t.has_storage() && t.storage().data() != nullptr) by_storage[t.storage().data()].push_back(k);
  std::map<std::string, std::string> tied;
  for (auto& [data, names] : by_storage) {
    if (names.size() < 2) continue;
    auto whole = [&](const std::string& n) {
      const at::Tensor& t = initializers.at(n);
      return t.is_contiguous() && t.storage_offset() == 0 &&
             static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
    };
    auto base = std::find_if(names.begin(), names.end(), whole);
    if (base == names.end()) continue;
    for (auto& n : names)
      if (n != *base) tied[n] = *base;
  }
  return tied;
}

int64_t Graph::parameter_count() const {
  const auto tied = tied_initializers();
  int64_t n = 0;
  for (auto& [k, t] : initializers)
    if (at::isFloatingType(t.scalar_type()) && !tied.count(k)) n += t.numel();
  return n;
}

int64_t Graph::initializer_bytes() const {
  const auto tied = tied_initializers();
  int64_t n = 0;
  for (auto& [k, t] : initializers)
    if (!tied.count(k)) n += t.numel() * static_cast<int64_t>(t.element_size());
  return n;
}

int bypass_constant_identities(Graph& g) {
  std::vector<Node> kept;
  int removed = 0;
  for (auto& n : g.nodes) {
    if (n.op_type == "Identity" && n.has_input(0) && g.is_initializer(n.inputs[0]) &&
        !is_graph_output(g, n.outputs[0])) {
      for (auto& m : g.nodes)
        for (auto& in : m.inputs)
          if (in == n.outputs[0]) in = n.inputs[0];
      ++removed;
      continue;
    }
    kept.push_back(n);
  }
  g.nodes = std::move(kept);
  return removed;
}

bool is_graph_output(const Graph& g, const std::string& v) {
  for (auto& o : g.outputs)
    if (o.name == v) return true;
  return false;
}

int remove_unused_initializers(Graph& g) {
  std::set<std::string> used;
  for (auto& n : g.nodes) used.insert(n.inputs.begin(), n.inputs.end());
  for (auto& o : g.outputs) used.insert(o.name);
  int removed = 0;
  for (auto it = g.initializers.begin(); it != g.initializers.end();) {
    if (used.count(it->first)) {
      ++it;
    } else {
      it = g.initializers.erase(it);
      ++removed;
    }
  }
  return removed;
}

std::map<std::string, ProbedValue> probe_values(const Graph& g, int64_t dim) {
  std::vector<std::string> all;
  for (auto& n : g.nodes)
    for (auto& o : n.outputs)
      if (!o.empty()) all.push_back(o);
  Module m(g, Module::Use::kFrozen);
  m.eval();
  std::vector<at::Tensor> feeds;
  for (auto& in : g.inputs) {
    PARE_CHECK(in.has_shape, "graph input '", in.name, "' has no shape; shapes cannot be inferred");
    std::vector<int64_t> sizes;
    for (auto& d : in.shape) sizes.push_back(d.is_fixed() ? d.value : dim);
    feeds.push_back(at::zeros(sizes, at::TensorOptions().dtype(in.dtype)));
  }
  at::NoGradGuard no_grad;
  std::map<std::string, ProbedValue> r;
  for (auto& [k, t] : m.forward_values(feeds, all))
    if (t.defined()) r[k] = {t.sizes().vec(), t.scalar_type()};
  for (size_t i = 0; i < g.inputs.size(); ++i)
    r[g.inputs[i].name] = {feeds[i].sizes().vec(), feeds[i].scalar_type()};
  for (auto& [k, t] : g.initializers) r[k] = {t.sizes().vec(), t.scalar_type()};
  return r;
}

std::map<std::string, std::vector<int64_t>> probe_shapes(const Graph& g, int64_t probe_dim) {
  std::map<std::string, std::vector<int64_t>> r;
  for (auto& [k, p] : probe_values(g, probe_dim)) r[k] = p.sizes;
  return r;
}

void infer_shapes(Graph& g) {
  std::string batch = "N";
  for (auto& in : g.inputs)
    for (auto& d : in.shape)
      if (!d.is_fixed() && !d.symbol.empty() && batch == "N") batch = d.symbol;
  // Dims that differ between two probe sizes follow the batch.
  auto a = probe_values(g, 1);
  auto b = probe_values(g, 2);
  auto info = [&](const std::string& name) {
    ValueInfo v{name, a.at(name).dtype, {}, true};
    const auto& sa = a.at(name).sizes;
    const auto& sb = b.at(name).sizes;
    for (size_t i = 0; i < sa.size(); ++i)
      v.shape.push_back(i < sb.size() && sa[i] == sb[i] ? Dim(sa[i]) : Dim::sym(batch));
    return v;
  };
  g.value_info.clear();
  for (auto& n : g.nodes)
    for (auto& o : n.outputs) {
      if (o.empty() || !a.count(o) || !b.count(o) || g.find_input(o)) continue;
      bool is_output = std::any_of(g.outputs.begin(), g.outputs.end(),
                                   [&](const ValueInfo& v) { return v.name == o; });
      if (!is_output) g.value_info.push_back(info(o));
    }
  for (auto& out : g.outputs)
    if (a.count(out.name) && b.count(out.name)) out = info(out.name);
}

}  // namespace pare::core
