// Rewrites an fp32 graph into a fake-quant graph for QAT (FakeQuantize where quantize_static puts
// QDQ pairs) and a trained fake-quant graph into the QDQ graph quantize_static would write.
#include "quantize/qat.h"

#include <limits>

#include "core/error.h"

namespace pare::quantize {

using core::Graph;

namespace {

// The codes QuantizeLinear can produce for a zero point of this type (it saturates to them).
std::pair<int64_t, int64_t> type_range(at::ScalarType t) {
  if (t == at::kByte) return {0, 255};
  if (t == at::kChar) return {-128, 127};
  return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
}

// Adds value -> FakeQuantize -> value_fq and points every earlier reader of `value` at it.
std::string insert_fake_quant(Graph& g, const std::string& value, const std::string& scale,
                              const std::string& zero_point, int64_t axis, std::pair<int64_t, int64_t> range,
                              bool learnable, bool rewire) {
  std::vector<int> users = g.consumers(value);
  const std::string out = g.unique_name(value + "_fq");
  std::map<std::string, core::AttrValue> attrs = {{"qmin", range.first}, {"qmax", range.second}};
  if (axis >= 0) attrs["axis"] = axis;
  if (learnable) attrs["learnable"] = int64_t{1};
  core::Node& n = g.add_node(kFakeQuantOp, {value, scale, zero_point}, {out}, attrs);
  n.domain = kFakeQuantDomain;
  if (rewire)
    for (int u : users)
      for (auto& in : g.nodes[static_cast<size_t>(u)].inputs)
        if (in == value) in = out;
  return out;
}

// A learnable per-tensor scale is stored as [1]: core::Module trains only tensors of rank >= 1.
at::Tensor scale_tensor(const at::Tensor& s, bool learnable) {
  return learnable && s.dim() == 0 ? s.reshape({1}).clone() : s.clone();
}

}  // namespace

QatModel prepare_qat(const Graph& fp32, const at::Tensor& calib_x, const QatOptions& opts) {
  const PtqOptions& po = opts.ptq_;
  check_static_inputs(fp32, calib_x, po);
  QatModel m;
  m.opts = opts;
  m.prepared = fp32;
  m.plan = plan_quantization(m.prepared, po);
  PARE_CHECK(!m.plan.layers.empty(), "model '", fp32.name,
             "' has nothing to quantize-aware train: no Conv, Gemm or MatMul with a constant weight is "
             "selected");
  m.calibration = calibrate(m.prepared, m.plan, calib_x, po);
  m.weights = weight_quant_params(m.prepared, m.plan, m.calibration, po);
  const bool learn = opts.learn_scales_;

  Graph& g = m.graph;
  g = m.prepared;
  // Activations: one scale and zero point per root, shared by the values that alias it.
  std::map<std::string, std::string> act_zp;
  for (auto& v : m.plan.activations) {
    const std::string& r = m.plan.root.at(v);
    const QuantParams& p = m.calibration.params.at(r);
    if (!m.activation_scale.count(r)) {
      const std::string s = g.unique_name(r + "_qat_scale");
      g.initializers[s] = scale_tensor(p.scale, learn);
      m.activation_scale[r] = s;
      const std::string z = g.unique_name(r + "_qat_zero_point");
      g.initializers[z] = p.zero_point.clone();
      act_zp[r] = z;
    }
    insert_fake_quant(g, v, m.activation_scale[r], act_zp[r], -1, type_range(p.zero_point.scalar_type()),
                      learn, true);
  }
  // Weights (a tied weight once) and int32 biases with scale s_x * s_w, computed in the graph so
  // that learned scales carry over.
  std::map<WeightKey, std::string> weight_fq;
  for (auto& c : m.plan.layers) {
    const WeightKey key{c.weight, c.axis};
    const QuantParams& wp = m.weights.at(key);
    if (!weight_fq.count(key)) {
      const std::string s = g.unique_name(c.weight + "_qat_scale");
      g.initializers[s] = scale_tensor(wp.scale, learn);
      m.weight_scale[key] = s;
      const std::string z = g.unique_name(c.weight + "_qat_zero_point");
      g.initializers[z] = wp.zero_point.clone();
      weight_fq[key] = insert_fake_quant(g, c.weight, s, z, c.axis, {wp.qmin, wp.qmax}, learn, false);
    }
    core::Node& n = g.nodes[c.node];
    const QuantPolicy& p = policy_of(n.op_type);
    n.inputs[static_cast<size_t>(p.weight_input)] = weight_fq.at(key);
    if (c.bias.empty()) continue;
    const std::string bs = g.unique_name(c.bias + "_qat_scale");
    g.add_node("Mul", {m.activation_scale.at(c.input_root), m.weight_scale.at(key)}, {bs});
    const std::string bz = g.unique_name(c.bias + "_qat_zero_point");
    // The product's shape: per channel [C]; per tensor one value.
    g.initializers[bz] = at::zeros(c.axis >= 0 ? std::vector<int64_t>{wp.scale.numel()} : std::vector<int64_t>{},
                                   at::kInt);
    const std::string bfq =
        insert_fake_quant(g, c.bias, bs, bz, c.axis >= 0 ? 0 : -1, type_range(at::kInt), false, false);
    g.nodes[c.node].inputs[static_cast<size_t>(p.bias_input)] = bfq;
  }
  g.topo_sort();
  g.verify();
  g.metadata["pare.quantization"] = "QAT fake-quant graph (pare FakeQuantize); convert with pare quantize --qat";
  return m;
}

PtqResult convert_qat(const QatModel& m, const Graph& trained, const at::Tensor& calib_x) {
  auto get = [&](const std::string& name) -> at::Tensor {
    auto it = trained.initializers.find(name);
    PARE_CHECK(it != trained.initializers.end(), "the trained QAT graph '", trained.name,
               "' has no initializer '", name, "' (it is not the graph prepare_qat made)");
    return it->second.detach().to(at::kFloat);
  };
  // The trained fp32 weights (names are kept through the fake-quant graph).
  Graph g = m.prepared;
  for (auto& [name, t] : g.initializers)
    if (at::isFloatingType(t.scalar_type())) t = get(name).reshape(t.sizes()).to(t.scalar_type());
  // The trained (or calibrated) parameters, in the shapes quantize_static uses.
  Calibration cal = m.calibration;
  for (auto& [root, p] : cal.params) p.scale = get(m.activation_scale.at(root)).reshape(p.scale.sizes()).clone();
  std::map<WeightKey, QuantParams> weights = m.weights;
  for (auto& [key, p] : weights) p.scale = get(m.weight_scale.at(key)).reshape(p.scale.sizes()).clone();
  for (auto& [root, p] : cal.params)
    if (!p.scale.gt(0).all().item<bool>())
      throw InputError("QAT made the scale of activation '" + root + "' non-positive; train with a lower lr or " +
                       "without learn_scales").about("lr").about("learn_scales");
  for (auto& [key, p] : weights)
    if (!p.scale.gt(0).all().item<bool>())
      throw InputError("QAT made a scale of weight '" + key.first + "' non-positive; train with a lower lr or " +
                       "without learn_scales").about("lr").about("learn_scales");
  PtqResult r = write_qdq(g, m.plan, cal, weights, calib_x, m.opts.ptq_);
  r.report.method += m.opts.learn_scales_ ? " + QAT with learned scales" : " + QAT";
  r.graph.metadata["pare.quantization"] = "static QDQ from quantization-aware training; weights " +
                                          r.report.weights + "; activations " + r.report.activations +
                                          "; scales " + r.report.method;
  return r;
}

}  // namespace pare::quantize
