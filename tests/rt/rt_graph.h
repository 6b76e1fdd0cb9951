// A tiny pare_rt graph built by value names, for the tests of its passes and kernels (tests/rt).
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "rt/internal.h"
#include "rt/passes.h"

namespace pare::rt {

inline HTensor f32(std::vector<int64_t> dims, std::vector<float> v) {
  HTensor t = HTensor::zeros(DType::kFloat32, std::move(dims));
  std::copy(v.begin(), v.end(), t.ptr<float>());
  return t;
}
template <class T>
inline HTensor ints(DType type, std::vector<int64_t> dims, std::vector<T> v) {
  HTensor t = HTensor::zeros(type, std::move(dims));
  std::copy(v.begin(), v.end(), t.ptr<T>());
  return t;
}
inline HTensor u8(uint8_t v) { return ints<uint8_t>(DType::kUInt8, {}, {v}); }

// A graph under construction, by value names.
struct Before {
  Graph g;
  LoweringReport rep;

  int v(const std::string& name) { return g.value(name); }
  Before& input(const std::string& name, DType type = DType::kFloat32) {
    g.inputs.push_back(v(name));
    ValueSpec spec;
    spec.name = name;
    spec.dtype = type;
    g.input_specs.push_back(spec);
    return *this;
  }
  Before& output(const std::string& name) {
    g.outputs.push_back(v(name));
    g.values[static_cast<size_t>(v(name))].exposed = true;
    return *this;
  }
  Before& constant(const std::string& name, HTensor t) {
    g.values[static_cast<size_t>(v(name))].constant = std::move(t);
    return *this;
  }
  Node& node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
             std::vector<std::pair<std::string, reader::AttrValue>> attrs = {}, const std::string& domain = "") {
    Node n;
    n.op = op;
    n.domain = domain;
    n.name = out.at(0) + "_node";
    n.index = static_cast<int>(g.nodes.size());
    n.attrs = Attrs(std::move(attrs), n.label());
    for (auto& s : in) n.in.push_back(s.empty() ? -1 : v(s));
    for (auto& s : out) {
      const int id = v(s);
      g.values[static_cast<size_t>(id)].producer = static_cast<int>(g.nodes.size());
      n.out.push_back(id);
    }
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  }
  /// x (float input) -> QuantizeLinear (scale 0.1, zero 128) -> `q`: an activation quantized at run time.
  Before& quantized_input(const std::string& x, const std::string& q) {
    input(x).constant("s_" + q, f32({}, {0.1f})).constant("z_" + q, u8(128));
    node("QuantizeLinear", {x, "s_" + q, "z_" + q}, {q});
    return *this;
  }
  /// DequantizeLinear of `q` with the parameters quantized_input gave it.
  Before& dequantize(const std::string& q, const std::string& out) {
    node("DequantizeLinear", {q, "s_" + q, "z_" + q}, {out});
    return *this;
  }
  bool run(const std::string& pass) { return find_pass(pass).run(g, rep); }

  /// The live nodes' op types, in order.
  std::vector<std::string> ops() const {
    std::vector<std::string> r;
    for (auto& n : g.nodes)
      if (!n.dead) r.push_back(n.op);
    return r;
  }
  const Node* live(const std::string& op) const {
    for (auto& n : g.nodes)
      if (!n.dead && n.op == op) return &n;
    return nullptr;
  }
  const std::string& name(int value) const { return g.values[static_cast<size_t>(value)].name; }
};

}  // namespace pare::rt
