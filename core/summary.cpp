#include "core/summary.h"

#include <cstdio>
#include <optional>
#include <set>
#include <sstream>

#include "core/dtype.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "core/op_registry.h"
#include "core/ops_util.h"
#include "core/zoo.h"

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

// A layer's weight as stored: the initializer a node reads, or the one behind the value it reads
// when that value is computed from an initializer only to change its number format: integer codes
// through DequantizeLinear, a float weight through FakeQuantize (QAT), MatMulInteger's and
// MatMulNBits' integer B. Zeros are the elements whose weight value is zero: for codes, those
// equal to their zero point (a pruned weight quantizes to its zero point, 0 when symmetric).
struct StoredWeight {
  std::vector<int64_t> shape;
  int64_t elements = 0, zeros = 0;
};

int64_t zeros_of(const at::Tensor& t) { return t.numel() - t.count_nonzero().item<int64_t>(); }

const at::Tensor* initializer(const Graph& g, const Node& n, size_t i) {
  return n.has_input(i) && g.is_initializer(n.inputs[i]) ? &g.initializers.at(n.inputs[i]) : nullptr;
}

// The weight behind `value` when it is an initializer or DequantizeLinear / FakeQuantize of one.
std::optional<StoredWeight> weight_behind(const Graph& g, const std::string& value) {
  auto it = g.initializers.find(value);
  if (it != g.initializers.end()) {
    const at::Tensor& w = it->second;
    if (!at::isFloatingType(w.scalar_type())) return std::nullopt;  // indices, shapes
    return StoredWeight{w.sizes().vec(), w.numel(), zeros_of(w)};
  }
  const int p = g.producer(value);
  if (p < 0) return std::nullopt;
  const Node& q = g.nodes[static_cast<size_t>(p)];
  const at::Tensor* x = initializer(g, q, 0);
  if (!x) return std::nullopt;
  if (q.op_type == "FakeQuantize" && at::isFloatingType(x->scalar_type()))
    return StoredWeight{x->sizes().vec(), x->numel(), zeros_of(*x)};
  if (q.op_type != "DequantizeLinear" || at::isFloatingType(x->scalar_type())) return std::nullopt;
  StoredWeight w{x->sizes().vec(), x->numel(), zeros_of(*x)};
  // With its scale and zero point known, DequantizeLinear's own forward says which codes stand for
  // zero (per tensor, per axis or blocked, any zero point).
  const at::Tensor* scale = initializer(g, q, 1);
  const at::Tensor* zp = initializer(g, q, 2);
  if (scale && (zp || !q.has_input(2))) {
    const auto y = OpRegistry::global().get(q.op_type).forward(q, {*x, *scale, zp ? *zp : at::Tensor()}, RunContext{});
    w.zeros = zeros_of(y.at(0));
  }
  return w;
}

// MatMulInteger's B [K, N]: codes equal to b_zero_point (one, or one per column) are zeros.
StoredWeight matmul_integer_weight(const Graph& g, const Node& n, const at::Tensor& b) {
  StoredWeight w{b.sizes().vec(), b.numel(), zeros_of(b)};
  if (const at::Tensor* zp = initializer(g, n, 3))
    w.zeros = zeros_of(b.to(at::kInt) - (zp->numel() == 1 ? zp->reshape({}) : *zp).to(at::kInt));
  return w;
}

// MatMulNBits' W [N, K], stored as 4-bit codes B [N, blocks, block / 2] with a zero point per block
// (8 unless given, packed like B): codes equal to their block's zero point are zeros.
std::optional<StoredWeight> matmul_nbits_weight(const Graph& g, const Node& n) {
  const int64_t K = n.attr_int("K", 0), N = n.attr_int("N", 0), block = n.attr_int("block_size", 0);
  const at::Tensor* b = initializer(g, n, 1);
  if (!b || K <= 0 || N <= 0 || block <= 0 || b->numel() % N != 0) return std::nullopt;
  const int64_t blocks = (K + block - 1) / block;
  if (b->numel() != N * blocks * block / 2) return std::nullopt;
  at::Tensor codes = ops::unpack_nibbles(b->reshape({N, blocks, block / 2})).reshape({N, blocks, block});
  at::Tensor zp = at::full({N, blocks, 1}, 8.0f);
  if (const at::Tensor* z = initializer(g, n, 3); z && z->scalar_type() == at::kByte)
    zp = ops::unpack_nibbles(z->reshape({N, -1})).narrow(1, 0, blocks).reshape({N, blocks, 1});
  at::Tensor is_zero = codes.eq(zp).reshape({N, blocks * block}).narrow(1, 0, K);
  return StoredWeight{{N, K}, N * K, is_zero.sum().item<int64_t>()};
}

// Ops that only change how a value is stored; their weights belong to the layer that reads them.
bool is_quantization_op(const std::string& op) {
  return op == "QuantizeLinear" || op == "DequantizeLinear" || op == "DynamicQuantizeLinear" || op == "FakeQuantize";
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
  s.initializers = static_cast<int64_t>(g.initializers.size());
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
    if (is_quantization_op(n.op_type)) continue;
    LayerSummary layer;
    std::vector<std::optional<StoredWeight>> weights;
    if (n.op_type == "MatMulInteger") {
      if (const at::Tensor* b = initializer(g, n, 1); b && !at::isFloatingType(b->scalar_type()))
        weights.push_back(matmul_integer_weight(g, n, *b));
    } else if (n.op_type == "MatMulNBits") {
      weights.push_back(matmul_nbits_weight(g, n));
      if (n.has_input(5)) weights.push_back(weight_behind(g, n.inputs[5]));  // bias
    } else {
      for (int i : op.weight_inputs())
        if (n.has_input(static_cast<size_t>(i))) weights.push_back(weight_behind(g, n.inputs[static_cast<size_t>(i)]));
    }
    for (const auto& w : weights) {
      if (!w || w->shape.empty()) continue;
      if (layer.weight_shape.empty()) layer.weight_shape = w->shape;
      layer.params += w->elements;
      if (w->shape.size() >= 2) {  // sparsity is about weight matrices/kernels, not biases
        layer.zeros += w->zeros;
        layer.weight_elements += w->elements;
        s.weight_elements += w->elements;
        s.weight_zeros += w->zeros;
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

ModelSummary summarize_model(const std::string& path_or_spec, uint64_t seed) {
  // A zoo spec has no file; anything else that is not a file gets load_model's message.
  if (is_zoo_spec(path_or_spec) || !file_exists(path_or_spec)) return summarize(load_model(path_or_spec, seed));
  OnnxFileInfo info;
  ModelSummary s = summarize(load_onnx(path_or_spec, OnnxLoadOptions(), &info));
  s.file_bytes = info.file_bytes;
  s.sparse_initializers = info.sparse_initializers;
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
  j["file_bytes"] = s.file_bytes;
  j["initializers"] = s.initializers;
  j["sparse_initializers"] = s.sparse_initializers;
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
  os << "bytes       " << s.bytes << " (" << human(double(s.bytes), "B") << ") of initializers in memory\n";
  if (s.file_bytes) {
    os << "file        " << s.file_bytes << " (" << human(double(s.file_bytes), "B") << ") on disk";
    if (!s.sparse_initializers.empty())
      os << "; " << s.sparse_initializers.size() << " of " << s.initializers << " initializers stored sparse (COO)";
    os << "\n";
  }
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

std::vector<std::string> weight_shape_changes(const ModelSummary& before, const ModelSummary& after) {
  std::map<std::string, std::vector<int64_t>> shape_before;
  for (const auto& l : before.layers) shape_before[l.name] = l.weight_shape;
  auto str = [](const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
  };
  std::vector<std::string> lines;
  for (const auto& l : after.layers) {
    auto it = shape_before.find(l.name);
    if (it != shape_before.end() && it->second != l.weight_shape)
      lines.push_back(l.name + ": " + str(it->second) + " -> " + str(l.weight_shape));
  }
  return lines;
}

}  // namespace pare::core
