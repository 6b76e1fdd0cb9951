#include "core/summary.h"

#include <cstdio>
#include <set>
#include <sstream>

#include "core/dtype.h"
#include "core/op_registry.h"

namespace pare::core {

std::vector<int64_t> node_flops(const Graph& g, const std::map<std::string, std::vector<int64_t>>& shapes) {
  const auto& reg = OpRegistry::global();
  auto sizes_of = [&](const std::vector<std::string>& names) {
    std::vector<std::vector<int64_t>> r;
    for (auto& v : names) {
      auto it = v.empty() ? shapes.end() : shapes.find(v);
      r.push_back(it == shapes.end() ? std::vector<int64_t>{} : it->second);
    }
    return r;
  };
  std::vector<int64_t> r;
  for (auto& n : g.nodes) {
    const OpDef& op = reg.get(n.op_type);
    r.push_back(op.flops ? op.flops(n, sizes_of(n.inputs), sizes_of(n.outputs)) : 0);
  }
  return r;
}

namespace {
// A quantized graph's parameters: its integer weights (what DequantizeLinear reads, the weight of
// MatMulInteger, MatMulNBits' K x N 4-bit values packed in bytes) replace the float ones; the
// scales of QuantizeLinear, DequantizeLinear and MatMulNBits are not parameters. Returns the
// integer weight elements and the float elements to leave out, each initializer counted once.
std::pair<int64_t, int64_t> quantized_weight_count(const Graph& g) {
  std::set<std::string> seen;
  int64_t integers = 0, scales = 0;
  auto once = [&](const Node& node, size_t i) -> const at::Tensor* {
    if (!node.has_input(i) || !g.is_initializer(node.inputs[i]) || !seen.insert(node.inputs[i]).second) return nullptr;
    return &g.initializers.at(node.inputs[i]);
  };
  for (auto& node : g.nodes) {
    const std::string& op = node.op_type;
    const bool qdq = op == "QuantizeLinear" || op == "DequantizeLinear";
    if (!qdq && op != "MatMulInteger" && op != "MatMulNBits") continue;
    const size_t weight = op == "DequantizeLinear" ? 0 : 1;
    if (op != "QuantizeLinear")
      if (const at::Tensor* t = once(node, weight); t && !at::isFloatingType(t->scalar_type()))
        integers += op == "MatMulNBits" ? node.attr_int("K", 0) * node.attr_int("N", 0) : t->numel();
    if (qdq || op == "MatMulNBits")
      if (const at::Tensor* t = once(node, qdq ? 1 : 2); t && at::isFloatingType(t->scalar_type())) scales += t->numel();
  }
  return {integers, scales};
}
}  // namespace

ModelSummary summarize(const Graph& g) {
  ModelSummary s;
  s.inputs = g.inputs;
  s.outputs = g.outputs;
  const auto [integers, scales] = quantized_weight_count(g);
  s.quantized_params = integers;
  s.params = g.parameter_count() - scales + integers;
  s.bytes = g.initializer_bytes();
  s.opset = g.opset;
  s.nodes = static_cast<int64_t>(g.nodes.size());
  s.metadata = g.metadata;
  auto shapes = probe_shapes(g, 1);
  const auto flops_of = node_flops(g, shapes);
  const auto& reg = OpRegistry::global();
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    s.op_histogram[n.op_type]++;
    const OpDef& op = reg.get(n.op_type);
    const int64_t flops = flops_of[ni];
    s.flops_per_sample += flops;
    LayerSummary layer;
    for (int i : op.weight_inputs) {
      if (!n.has_input(i) || !g.is_initializer(n.inputs[i])) continue;
      const at::Tensor& w = g.initializers.at(n.inputs[i]);
      if (!at::isFloatingType(w.scalar_type()) || w.dim() == 0) continue;
      if (layer.weight_shape.empty()) layer.weight_shape = w.sizes().vec();
      layer.params += w.numel();
      int64_t z = w.numel() - w.count_nonzero().item<int64_t>();
      if (w.dim() >= 2) {  // sparsity is about weight matrices/kernels, not biases
        layer.zeros += z;
        layer.weight_elements += w.numel();
        s.weight_elements += w.numel();
        s.weight_zeros += z;
      }
    }
    if (layer.params == 0) continue;
    layer.name = n.name;
    layer.op = n.op_type;
    layer.flops = flops;
    if (!n.outputs.empty() && shapes.count(n.outputs[0])) layer.output_shape = shapes.at(n.outputs[0]);
    s.layers.push_back(layer);
  }
  return s;
}

namespace {
nlohmann::json value_json(const ValueInfo& v) {
  nlohmann::json shape = nlohmann::json::array();
  for (auto& d : v.shape) {
    if (d.is_fixed()) shape.push_back(d.value);
    else shape.push_back(d.symbol.empty() ? "?" : d.symbol);
  }
  return {{"name", v.name}, {"dtype", dtype_name(v.dtype)}, {"shape", shape}};
}

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T"};
  int i = 0;
  while (v >= 1000 && i < 4) v /= 1000, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, i ? "%.2f %s%s" : "%.0f %s%s", v, prefixes[i], unit);
  return buf;
}

std::string dims(const std::vector<int64_t>& v) {
  std::string r = "[";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + std::to_string(v[i]);
  return r + "]";
}
}  // namespace

nlohmann::json to_json(const ModelSummary& s) {
  nlohmann::json j;
  j["inputs"] = nlohmann::json::array();
  for (auto& v : s.inputs) j["inputs"].push_back(value_json(v));
  j["outputs"] = nlohmann::json::array();
  for (auto& v : s.outputs) j["outputs"].push_back(value_json(v));
  j["parameters"] = s.params;
  j["quantized_parameters"] = s.quantized_params;
  j["bytes"] = s.bytes;
  j["flops_per_sample"] = s.flops_per_sample;
  j["opset"] = s.opset;
  j["nodes"] = s.nodes;
  j["sparsity"] = s.sparsity();
  j["op_histogram"] = s.op_histogram;
  j["metadata"] = s.metadata;
  j["layers"] = nlohmann::json::array();
  for (auto& l : s.layers)
    j["layers"].push_back({{"name", l.name}, {"op", l.op}, {"weight_shape", l.weight_shape},
                           {"output_shape", l.output_shape}, {"parameters", l.params},
                           {"flops", l.flops},
                           {"sparsity", l.sparsity()}});
  return j;
}

std::string to_text(const ModelSummary& s) {
  std::ostringstream os;
  for (auto& v : s.inputs)
    os << "input   " << v.name << " " << dtype_name(v.dtype) << " " << shape_str(v.shape) << "\n";
  for (auto& v : s.outputs)
    os << "output  " << v.name << " " << dtype_name(v.dtype) << " " << shape_str(v.shape) << "\n";
  os << "parameters  " << s.params << " (" << human(double(s.params), "");
  if (s.quantized_params) os << "; " << s.quantized_params << " of them quantized integers";
  os << ")\n";
  os << "bytes       " << s.bytes << " (" << human(double(s.bytes), "B") << ")\n";
  os << "FLOPs       " << human(double(s.flops_per_sample), "FLOP") << " per sample\n";
  char sp[32];
  std::snprintf(sp, sizeof sp, "%.2f%%", s.sparsity() * 100);
  os << "sparsity    " << sp << " of weight elements are zero\n";
  os << "opset       " << s.opset << ", " << s.nodes << " nodes\n";
  os << "ops        ";
  for (auto& [op, n] : s.op_histogram) os << " " << op << " x" << n;
  os << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %-20s %-18s %-16s %12s %14s %9s\n", "layer", "op",
                "weight", "output (N=1)", "params", "FLOPs", "sparsity");
  os << line;
  for (auto& l : s.layers) {
    std::snprintf(line, sizeof line, "%-28s %-20s %-18s %-16s %12lld %14s %8.2f%%\n",
                  l.name.substr(0, 28).c_str(), l.op.c_str(), dims(l.weight_shape).c_str(),
                  dims(l.output_shape).c_str(), (long long)l.params,
                  human(double(l.flops), "").c_str(), 100.0 * l.sparsity());
    os << line;
  }
  return os.str();
}

}  // namespace pare::core
