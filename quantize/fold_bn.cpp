// Rewrites Conv/Gemm -> BatchNormalization into one Conv/Gemm with folded weights and bias.
#include "quantize/fold_bn.h"

#include <set>

#include "core/error.h"
#include "core/op_registry.h"

namespace pare::quantize {
namespace {

bool all_initializers(const core::Graph& g, const core::Node& n, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i)
    if (!n.has_input(i) || !g.is_initializer(n.inputs[i])) return false;
  return true;
}

// Stores `t` under a new name (the old one may be shared with other nodes) and returns the name.
std::string put(core::Graph& g, const std::string& base, at::Tensor t) {
  std::string name = g.unique_name(base);
  g.initializers[name] = std::move(t);
  return name;
}

}  // namespace

int fold_batch_norm(core::Graph& g) {
  int folded = 0;
  std::set<size_t> dead;
  for (size_t bi = 0; bi < g.nodes.size(); ++bi) {
    const core::Node& bn = g.nodes[bi];
    if (bn.op_type != "BatchNormalization" || bn.attr_int("training_mode", 0) != 0) continue;
    if (bn.outputs.size() > 1) {
      bool extra = false;
      for (size_t i = 1; i < bn.outputs.size(); ++i) extra |= !bn.outputs[i].empty();
      if (extra) continue;
    }
    if (!all_initializers(g, bn, 1, 5)) continue;
    const int pi = g.producer(bn.inputs[0]);
    if (pi < 0) continue;
    core::Node& prod = g.nodes[static_cast<size_t>(pi)];
    const bool conv = prod.op_type == "Conv", gemm = prod.op_type == "Gemm";
    if (!conv && !gemm) continue;
    if (g.consumers(prod.outputs[0]).size() != 1 || is_graph_output(g, prod.outputs[0])) continue;
    if (!all_initializers(g, prod, 1, 2) || (prod.has_input(2) && !g.is_initializer(prod.inputs[2])))
      continue;
    at::Tensor w = g.initializers.at(prod.inputs[1]).to(at::kFloat);
    if (gemm && prod.attr_int("transA", 0) != 0 && w.dim() != 2) continue;
    // The output channel axis of the weight, as the op declares it.
    const int64_t axis = core::weight_axes(prod, 1, w.dim()).out;
    const int64_t channels = w.size(axis);
    auto param = [&](size_t i) { return g.initializers.at(bn.inputs[i]).to(at::kFloat).reshape({-1}); };
    at::Tensor scale = param(1), shift = param(2), mean = param(3), var = param(4);
    if (scale.numel() != channels || shift.numel() != channels || mean.numel() != channels ||
        var.numel() != channels)
      continue;
    at::Tensor bias = at::zeros({channels});
    if (prod.has_input(2)) {
      at::Tensor b = g.initializers.at(prod.inputs[2]).to(at::kFloat);
      if (gemm) b = b * prod.attr_float("beta", 1.0f);
      if (b.numel() == 1) b = b.reshape({1}).expand({channels});
      if (b.numel() != channels) continue;  // a 2-D Gemm C cannot take a per-channel shift
      bias = b.reshape({-1});
    }
    const double eps = bn.attr_float("epsilon", 1e-5f);
    at::Tensor k = scale / at::sqrt(var + eps);
    std::vector<int64_t> kshape(static_cast<size_t>(w.dim()), 1);
    kshape[static_cast<size_t>(axis)] = channels;
    at::Tensor w2 = w * k.reshape(kshape);
    at::Tensor b2 = (bias - mean) * k + shift;
    const std::string wname = put(g, prod.inputs[1] + "_bnfold", w2);
    const std::string bname = put(g, (prod.name.empty() ? prod.outputs[0] : prod.name) + "_bias_bnfold", b2);
    core::Node& p = g.nodes[static_cast<size_t>(pi)];  // `put` did not touch nodes
    p.inputs[1] = wname;
    if (p.inputs.size() < 3) p.inputs.resize(3);
    p.inputs[2] = bname;
    if (gemm) p.attrs["beta"] = 1.0f;
    const std::string gone = p.outputs[0];
    p.outputs[0] = g.nodes[bi].outputs[0];
    for (auto it = g.value_info.begin(); it != g.value_info.end();)
      it = it->name == gone ? g.value_info.erase(it) : it + 1;
    dead.insert(bi);
    ++folded;
  }
  if (!dead.empty()) {
    std::vector<core::Node> kept;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (!dead.count(i)) kept.push_back(std::move(g.nodes[i]));
    g.nodes = std::move(kept);
    remove_unused_initializers(g);
  }
  return folded;
}

}  // namespace pare::quantize
