// Rewrites Gemm/MatMul with a constant weight into DynamicQuantizeLinear -> MatMulInteger -> Cast
// -> Mul (-> Add): int8 weights, activation scales computed at run time.
#include "quantize/dynamic.h"

#include <map>

#include "core/error.h"
#include "core/op_registry.h"
#include "quantize/fold_bn.h"
#include "quantize/observer.h"
#include "quantize/ptq.h"

namespace pare::quantize {
namespace {

// Why `n` is left in fp32, or "" when it can be rewritten.
std::string why_not(const core::Graph& g, const core::Node& n) {
  if (n.op_type != "MatMul" && n.op_type != "Gemm")
    return "dynamic quantization covers Gemm and MatMul; it runs in fp32";
  const std::string& w = n.inputs.size() > 1 ? n.inputs[1] : "";
  if (!g.is_initializer(w) || g.initializers.at(w).dim() != 2 ||
      !at::isFloatingType(g.initializers.at(w).scalar_type()))
    return "weight '" + w + "' is not a constant 2-D float tensor";
  if (g.is_initializer(n.inputs[0])) return "input '" + n.inputs[0] + "' is a constant";
  if (n.op_type == "Gemm" && (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.0f) != 1.0f ||
                              n.attr_float("beta", 1.0f) != 1.0f))
    return "Gemm with transA, alpha or beta other than 0, 1, 1";
  return "";
}

}  // namespace

DynamicResult quantize_dynamic(const core::Graph& fp32, const DynamicOptions& opts) {
  check_not_quantized(fp32, "model '" + fp32.name + "'");
  PARE_CHECK(fp32.opset >= 13, "model '", fp32.name, "' uses opset ", fp32.opset,
             "; per-axis quantization needs opset 13 or later (re-export it)");
  check_names(fp32, opts.exclude_, "exclude");
  DynamicResult res;
  core::Graph g = fp32;
  g.topo_sort();
  bypass_constant_identities(g);
  // One DynamicQuantizeLinear per activation, however many nodes read it.
  struct Dq {
    std::string q, scale, zero_point;
  };
  std::map<std::string, Dq> dq_of;
  std::vector<bool> replaced(g.nodes.size(), false);
  const size_t original = g.nodes.size();
  for (size_t i = 0; i < original; ++i) {
    const core::Node n = g.nodes[i];  // a copy: add_node below may move the nodes
    const std::string why = why_not(g, n);
    if (!why.empty() || matches(n, opts.exclude_)) {
      if (policy_of(n.op_type).kind == QuantPolicy::Kind::kCompute)
        res.skipped.push_back(n.describe() + ": " + (why.empty() ? "excluded" : why));
      continue;
    }
    replaced[i] = true;
    const std::string& x = n.inputs[0];
    const std::string& w = n.inputs[1];
    at::Tensor wt = g.initializers.at(w).to(at::kFloat);
    if (core::weight_axes(n, 1, 2).out == 0) wt = wt.t();  // Gemm with transB
    wt = wt.contiguous();  // [K, N]: output channels along axis 1
    const int64_t K = wt.size(0), N = wt.size(1);
    QuantParams wp = weight_params(wt, opts.per_channel_ ? 1 : -1);
    const at::Tensor wq = quantize_tensor(wt, wp);
    res.layers.push_back({n.name, n.op_type, w, K, N, sqnr_db(wt, dequantize_tensor(wq, wp))});

    auto it = dq_of.find(x);
    if (it == dq_of.end()) {
      Dq d;
      d.q = g.unique_name(x + "_quantized");
      g.add_node("DynamicQuantizeLinear", {x}, {d.q, "", ""});
      d.scale = g.unique_name(x + "_scale");
      g.nodes.back().outputs[1] = d.scale;
      d.zero_point = g.unique_name(x + "_zero_point");
      g.nodes.back().outputs[2] = d.zero_point;
      it = dq_of.emplace(x, d).first;
    }
    const Dq d = it->second;
    const std::string wqn = g.unique_name(w + "_quantized");
    g.initializers[wqn] = wq;
    const std::string wsn = g.unique_name(w + "_scale");
    g.initializers[wsn] = wp.scale;
    g.add_node("MatMulInteger", {d.q, wqn, d.zero_point}, {g.unique_name(n.outputs[0] + "_int32")});
    const std::string acc = g.nodes.back().outputs[0];
    g.add_node("Cast", {acc}, {g.unique_name(n.outputs[0] + "_float")}, {{"to", int64_t{1}}});  // FLOAT
    const std::string accf = g.nodes.back().outputs[0];
    g.add_node("Mul", {d.scale, wsn}, {g.unique_name(n.outputs[0] + "_scale")});
    const std::string scale = g.nodes.back().outputs[0];
    const bool bias = n.op_type == "Gemm" && n.has_input(2);
    // The original node still defines outputs[0] until it is removed below.
    const std::string y = bias ? g.unique_name(n.outputs[0] + "_matmul") : n.outputs[0];
    g.add_node("Mul", {accf, scale}, {y});
    if (bias) g.add_node("Add", {y, n.inputs[2]}, {n.outputs[0]});
  }
  std::vector<core::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (i >= original || !replaced[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  remove_unused_initializers(g);
  g.topo_sort();
  g.verify();
  g.metadata["pare.quantization"] = std::string("dynamic: int8 symmetric ") +
                                    (opts.per_channel_ ? "per-channel" : "per-tensor") +
                                    " weights, uint8 activations quantized at run time";
  res.fp32_bytes = fp32.initializer_bytes();
  res.quantized_bytes = g.initializer_bytes();
  res.done = "dynamically quantized";
  res.graph = std::move(g);
  return res;
}

}  // namespace pare::quantize
