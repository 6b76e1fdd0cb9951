// Rewrites an fp32 graph into a QDQ graph: BatchNorm folded, activation ranges calibrated,
// QuantizeLinear/DequantizeLinear pairs inserted, weights stored as int8 and biases as int32.
#include "quantize/ptq.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/module.h"
#include "quantize/fold_bn.h"

namespace pare::quantize {

using core::Graph;
using core::Node;
using Kind = QuantPolicy::Kind;

namespace {

// The compute policy of `op`: input 0 is the activation; the weight, the bias and the weight's
// output-channel axis come from the op's weight declaration in core.
QuantPolicy compute_policy(const core::OpDef& op) {
  QuantPolicy p;
  p.kind = Kind::kCompute;
  p.activation_inputs = {0};
  for (const core::WeightInput& w : op.weights) {
    if (w.role == core::WeightRole::kWeight && w.input != 0 && p.weight_input < 0) p.weight_input = w.input;
    if (w.role == core::WeightRole::kBias && p.bias_input < 0) p.bias_input = w.input;
  }
  PARE_ASSERT(p.weight_input > 0, "op '", op.name, "' is quantized as a compute op but declares no weight");
  const core::WeightInput weight = *op.weight(p.weight_input);
  p.weight_axis = [weight](const Node& n, int64_t rank) { return weight.axes_on(n, rank).out; };
  return p;
}

}  // namespace

void attach_quantize_policy(core::OpDef& op) {
  // The ops with an int8 form in a QDQ graph; which input is their weight is core's to say.
  static const std::set<std::string> compute = {"Conv", "Gemm", "MatMul"};
  static const std::map<std::string, QuantPolicy> known = [] {
    std::map<std::string, QuantPolicy> m;
    for (const char* name : {"Relu", "Clip"}) m[name].kind = Kind::kFusable;
    for (const char* name : {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
      m[name].kind = Kind::kPassthrough;
    return m;
  }();
  QuantPolicy p;
  if (compute.count(op.name)) {
    p = compute_policy(op);
  } else if (auto it = known.find(op.name); it != known.end()) {
    p = it->second;
  } else if (op.name == "QuantizeLinear" || op.name == "DequantizeLinear") {
    p.why_not = "it is itself a quantization op";
  } else {
    p.why_not = "pare quantizes only Conv, Gemm and MatMul with a constant weight (" + op.name +
                " runs in fp32 on dequantized inputs)";
  }
  op.set_facet(kPolicyFacet, p);
}

const QuantPolicy& policy_of(const std::string& op_type) {
  static std::once_flag once;
  std::call_once(once, [] { core::OpRegistry::global().add_facet_provider(attach_quantize_policy); });
  return core::OpRegistry::global().get(op_type).facet<QuantPolicy>(kPolicyFacet);
}

void check_not_quantized(const Graph& g, const std::string& origin) {
  for (const auto& n : g.nodes)
    PARE_CHECK(n.op_type != "QuantizeLinear" && n.op_type != "DequantizeLinear", origin,
               " is already quantized: it holds ", n.describe(), "; quantize its fp32 original");
  for (const auto& [name, t] : g.initializers)
    PARE_CHECK(t.scalar_type() != at::kChar && t.scalar_type() != at::kByte, origin,
               " is already quantized: initializer '", name, "' is ", core::dtype_name(t.scalar_type()),
               "; quantize its fp32 original");
}

void check_calibration_data(const Graph& g, const at::Tensor& x, const std::string& calib_name) {
  PARE_CHECK(g.inputs.size() == 1, "static quantization calibrates models with one input; model '",
             g.name, "' has ", g.inputs.size());
  const core::ValueInfo& in = g.inputs[0];
  PARE_CHECK(x.defined() && x.dim() >= 1 && x.size(0) > 0, calib_name, " holds no samples");
  std::ostringstream got;
  got << x.sizes();
  if (in.has_shape) {
    PARE_CHECK(x.dim() == static_cast<int64_t>(in.shape.size()), calib_name, " has shape ", got.str(),
               " but the model input '", in.name, "' is ", core::shape_str(in.shape));
    for (size_t d = 1; d < in.shape.size(); ++d)
      PARE_CHECK(!in.shape[d].is_fixed() || in.shape[d].value == x.size(static_cast<int64_t>(d)),
                 calib_name, " has shape ", got.str(), " but the model input '", in.name, "' is ",
                 core::shape_str(in.shape), " (dim ", d, ")");
  }
  PARE_CHECK(at::isFloatingType(x.scalar_type()) == at::isFloatingType(in.dtype), calib_name, " is ",
             core::dtype_name(x.scalar_type()), " but the model input '", in.name, "' is ",
             core::dtype_name(in.dtype));
}

bool matches(const Node& n, const std::vector<std::string>& list) {
  for (auto& e : list)
    if (n.name == e || n.op_type == e) return true;
  return false;
}

void check_names(const Graph& g, const std::vector<std::string>& list, const std::string& option) {
  for (auto& e : list) {
    const bool any = std::any_of(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return matches(n, {e}); });
    PARE_CHECK_OPTION(any, option, e, ": no node has this name or op type (node names are listed by "
                      "'pare inspect MODEL')");
  }
}

namespace {

// Every entry of --include / --exclude must name something; --include entries must be
// quantizable.
void check_lists(const Graph& g, const PtqOptions& o) {
  check_names(g, o.include_, "include");
  check_names(g, o.exclude_, "exclude");
  for (auto& e : o.include_)
    for (auto& n : g.nodes) {
      if (!matches(n, {e})) continue;
      const QuantPolicy& p = policy_of(n.op_type);
      PARE_CHECK_OPTION(p.kind == Kind::kCompute, "include", e, ": ", n.describe(), " cannot be quantized: ",
                        p.why_not.empty() ? "it has no weight of its own" : p.why_not);
      PARE_CHECK_OPTION(g.is_initializer(n.inputs[static_cast<size_t>(p.weight_input)]), "include", e, ": ",
                        n.describe(), " cannot be quantized: its weight '",
                        n.inputs[static_cast<size_t>(p.weight_input)], "' is not a constant");
    }
}

// Inserts value -> QuantizeLinear -> DequantizeLinear and points every earlier consumer of
// `value` at the dequantized copy. Returns the copy's name.
std::string insert_qdq(Graph& g, const std::string& value, const QuantParams& p) {
  std::vector<int> users = g.consumers(value);
  const std::string scale = g.unique_name(value + "_scale");
  g.initializers[scale] = p.scale;
  const std::string zp = g.unique_name(value + "_zero_point");
  g.initializers[zp] = p.zero_point;
  const std::string q = g.unique_name(value + "_quantized");
  g.add_node("QuantizeLinear", {value, scale, zp}, {q});
  const std::string dq = g.unique_name(value + "_dequantized");
  g.add_node("DequantizeLinear", {q, scale, zp}, {dq});
  for (int u : users)
    for (auto& in : g.nodes[static_cast<size_t>(u)].inputs)
      if (in == value) in = dq;
  return dq;
}

// Stores `q` with its parameters as initializers read through a DequantizeLinear; returns the
// dequantized value's name.
std::string add_dequantized_constant(Graph& g, const std::string& base, const at::Tensor& q,
                                     const QuantParams& p, bool with_zero_point) {
  const std::string qn = g.unique_name(base + "_quantized");
  g.initializers[qn] = q;
  const std::string sn = g.unique_name(base + "_scale");
  g.initializers[sn] = p.scale;
  std::vector<std::string> ins = {qn, sn};
  if (with_zero_point) {
    const std::string zn = g.unique_name(base + "_zero_point");
    g.initializers[zn] = p.zero_point;
    ins.push_back(zn);
  }
  const std::string dq = g.unique_name(base + "_dequantized");
  std::map<std::string, core::AttrValue> attrs;
  if (p.per_channel()) attrs["axis"] = p.axis;
  g.add_node("DequantizeLinear", ins, {dq}, attrs);
  return dq;
}

std::vector<at::Tensor> batches_of(const at::Tensor& x, int64_t batch) {
  std::vector<at::Tensor> r;
  for (int64_t i = 0; i < x.size(0); i += batch) r.push_back(x.narrow(0, i, std::min(batch, x.size(0) - i)));
  return r;
}

double scalar(const at::Tensor& t) { return t.to(at::kDouble).reshape({-1})[0].item<double>(); }

}  // namespace

void check_options(const PtqOptions& opts) {
  PARE_CHECK(opts.batch_size_ >= 1, "calibration batch size must be at least 1, got ", opts.batch_size_);
  PARE_CHECK(opts.weight_bits_ >= 2 && opts.weight_bits_ <= 8, "weight bits must be in 2..8, got ",
             opts.weight_bits_);
}

std::vector<std::string> QuantPlan::roots() const {
  std::vector<std::string> r;
  for (auto& v : activations)
    if (root.at(v) == v) r.push_back(v);
  return r;
}

QuantPlan plan_quantization(Graph& g, const PtqOptions& opts) {
  QuantPlan plan;
  g.topo_sort();
  plan.folded_batch_norms = opts.fold_bn_ ? fold_batch_norm(g) : 0;
  bypass_constant_identities(g);
  check_lists(g, opts);

  // 1. The compute nodes to quantize.
  std::vector<size_t> chosen;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const QuantPolicy& p = policy_of(n.op_type);
    if (p.kind != Kind::kCompute) continue;
    const std::string& w = n.inputs[static_cast<size_t>(p.weight_input)];
    if (!g.is_initializer(w) || !at::isFloatingType(g.initializers.at(w).scalar_type())) {
      plan.skipped.push_back(n.describe() + ": weight '" + w + "' is not a constant");
      continue;
    }
    chosen.push_back(i);
  }
  auto drop = [&](size_t at, const std::string& why) {
    plan.skipped.push_back(g.nodes[chosen[at]].describe() + ": " + why);
    chosen.erase(chosen.begin() + static_cast<long>(at));
  };
  if (opts.keep_first_ && !chosen.empty()) drop(0, "first layer kept in fp32");
  if (opts.keep_last_ && !chosen.empty()) drop(chosen.size() - 1, "last layer kept in fp32");
  for (size_t k = chosen.size(); k-- > 0;) {
    const Node& n = g.nodes[chosen[k]];
    if (matches(n, opts.exclude_)) drop(k, "excluded");
    else if (!opts.include_.empty() && !matches(n, opts.include_)) drop(k, "not included");
  }

  // 2. The activations to quantize: the compute nodes' inputs and (fused) outputs. A value made by
  // a passthrough op shares the scale of its input, which is quantized too.
  std::map<std::string, std::string>& root = plan.root;
  std::function<std::string(const std::string&)> mark = [&](const std::string& v) -> std::string {
    auto it = root.find(v);
    if (it != root.end()) return it->second;
    const int pi = g.producer(v);
    std::string r = v;
    if (pi >= 0) {
      const Node& p = g.nodes[static_cast<size_t>(pi)];
      if (policy_of(p.op_type).kind == Kind::kPassthrough && p.outputs[0] == v && p.has_input(0) &&
          !g.is_initializer(p.inputs[0]))
        r = mark(p.inputs[0]);
    }
    root[v] = r;
    plan.activations.push_back(v);
    return r;
  };
  for (size_t i : chosen) {
    const Node& n = g.nodes[i];
    const QuantPolicy& p = policy_of(n.op_type);
    QuantPlan::Layer c;
    c.node = i;
    for (int a : p.activation_inputs)
      if (n.has_input(static_cast<size_t>(a)) && !g.is_initializer(n.inputs[static_cast<size_t>(a)])) {
        const std::string r = mark(n.inputs[static_cast<size_t>(a)]);
        if (c.input_root.empty()) c.input_root = r;
      }
    std::string out = n.outputs[0];
    std::vector<int> users = g.consumers(out);
    if (opts.requantize_outputs_ && users.size() == 1 && !is_graph_output(g, out)) {
      const Node& u = g.nodes[static_cast<size_t>(users[0])];
      if (policy_of(u.op_type).kind == Kind::kFusable && u.inputs[0] == out && !matches(u, opts.exclude_)) {
        out = u.outputs[0];
        c.fused = u.op_type;
      }
    }
    if (opts.requantize_outputs_ && !is_graph_output(g, out) && !g.consumers(out).empty())
      c.output = mark(out) == out ? out : "";
    // The weight, and the bias when it is 1-D per output channel (it becomes int32 with scale
    // s_x * s_w).
    c.weight = n.inputs[static_cast<size_t>(p.weight_input)];
    const at::Tensor& w = g.initializers.at(c.weight);
    c.axis = opts.per_channel_ ? p.weight_axis(n, w.dim()) : -1;
    if (p.bias_input >= 0 && n.has_input(static_cast<size_t>(p.bias_input)) && !c.input_root.empty()) {
      const std::string& bname = n.inputs[static_cast<size_t>(p.bias_input)];
      const int64_t channels = c.axis >= 0 ? w.size(c.axis) : -1;
      if (g.is_initializer(bname)) {
        const at::Tensor& b = g.initializers.at(bname);
        if (at::isFloatingType(b.scalar_type()) && b.dim() == 1 && (channels < 0 || b.size(0) == channels))
          c.bias = bname;
      }
    }
    plan.layers.push_back(c);
  }
  return plan;
}

Calibration calibrate(const Graph& g, const QuantPlan& plan, const at::Tensor& calib_x, const PtqOptions& opts) {
  at::NoGradGuard no_grad;
  const std::string method = calib_method_name(opts.method_);
  const std::vector<std::string> roots = plan.roots();
  const auto batches = batches_of(calib_x, opts.batch_size_);
  core::Module model(g, core::Module::Use::kFrozen);  // reads g's weights, copies none
  Calibration cal;
  for (auto& r : roots) cal.observers.emplace(r, Observer(opts.method_, opts.activations_, opts.percentile_));
  const int passes = opts.method_ == CalibMethod::kMinMax ? 1 : 2;
  for (int pass = 0; pass < passes; ++pass) {
    if (opts.progress_)
      opts.progress_("calibrating " + std::to_string(roots.size()) + " activations on " +
                     std::to_string(calib_x.size(0)) + " samples (" + method + ", pass " +
                     std::to_string(pass + 1) + "/" + std::to_string(passes) + ")");
    for (auto& b : batches) {
      auto vals = model.forward_until({b}, roots);  // no further than the last root: not a LM's logits
      for (auto& r : roots) {
        const at::Tensor& v = vals.at(r);
        PARE_CHECK(v.is_floating_point(), "cannot quantize value '", r, "': it is ",
                   core::dtype_name(v.scalar_type()), ", not floating point");
        if (pass == 0) cal.observers.at(r).observe_range(v);
        else cal.observers.at(r).observe_histogram(v);
      }
    }
  }
  for (auto& r : roots) cal.params[r] = params_from_range(cal.observers.at(r).range(), opts.activations_);
  return cal;
}

std::map<WeightKey, QuantParams> weight_quant_params(const Graph& g, const QuantPlan& plan, const Calibration& cal,
                                                     const PtqOptions& opts) {
  std::map<WeightKey, QuantParams> r;
  for (auto& c : plan.layers) {
    const WeightKey key{c.weight, c.axis};
    // A weight read by several nodes (tied weights) is quantized once, as its first reader needs.
    if (r.count(key)) continue;
    const at::Tensor w = g.initializers.at(c.weight).to(at::kFloat);
    QuantParams wp = weight_params(w, c.axis, opts.weight_bits_);
    if (!c.bias.empty()) {
      // Keep |b| / (s_x * s_w) within int32 (2^30 leaves room): widen s_w where it is not.
      const at::Tensor b = g.initializers.at(c.bias).to(at::kFloat);
      const at::Tensor& sx = cal.params.at(c.input_root).scale;
      at::Tensor need = (c.axis >= 0 ? b.abs() : b.abs().max()) / (sx * 1073741824.0);
      wp.scale = at::maximum(wp.scale, need.to(at::kFloat));
    }
    r[key] = wp;
  }
  return r;
}

namespace {

// The report's description of the scheme: calibration method, weight and activation encodings.
void describe_scheme(QuantReport& rep, const QuantPlan& plan, const at::Tensor& calib_x, const PtqOptions& opts) {
  rep.method = calib_method_name(opts.method_);
  if (opts.method_ == CalibMethod::kPercentile) {
    std::ostringstream os;
    os << rep.method << " " << opts.percentile_;
    rep.method = os.str();
  }
  rep.weights = (opts.weight_bits_ == 8 ? std::string("int8") : std::to_string(opts.weight_bits_) + "-bit (int8 storage)") +
                " symmetric " + (opts.per_channel_ ? "per-channel" : "per-tensor");
  rep.activations = opts.activations_ == QScheme::kAsymmetricUInt8 ? "uint8 asymmetric" : "int8 symmetric";
  rep.calib_samples = calib_x.size(0);
  rep.folded_batch_norms = plan.folded_batch_norms;
  rep.skipped = plan.skipped;
}

// Rewrites `q` in place: a QDQ pair after each planned activation, int8 weights and int32 biases
// behind DequantizeLinear for each layer; fills the report's activation and layer rows. Returns
// the DequantizeLinear output of each quantized activation.
std::map<std::string, std::string> insert_qdq_nodes(Graph& q, const QuantPlan& plan, const Calibration& cal,
                                                    const std::map<WeightKey, QuantParams>& weights,
                                                    QuantReport& rep) {
  const std::map<std::string, QuantParams>& act = cal.params;
  std::map<std::string, std::string> dq_of;
  for (auto& v : plan.activations) {
    const std::string& r = plan.root.at(v);
    dq_of[v] = insert_qdq(q, v, act.at(r));
    const Observer& o = cal.observers.at(r);
    const QuantParams& p = act.at(r);
    auto range = o.range();
    rep.activations_quantized.push_back({v, o.min(), o.max(), range.first, range.second, scalar(p.scale),
                                         static_cast<int64_t>(scalar(p.zero_point)), r == v ? "" : r});
  }
  // A weight read by several nodes (tied weights) is stored once.
  std::map<WeightKey, std::string> stored;
  for (auto& c : plan.layers) {
    const WeightKey key{c.weight, c.axis};
    const QuantParams& wp = weights.at(key);
    const at::Tensor w = q.initializers.at(c.weight).to(at::kFloat);
    // Codes beyond the parameters' range (a trained weight that outgrew its QAT scale) saturate
    // as the fake-quant op saturated them.
    const at::Tensor wq = at::clamp(quantize_tensor(w, wp), wp.qmin, wp.qmax);
    LayerReport lr;
    lr.node = q.nodes[c.node].name;
    lr.op = q.nodes[c.node].op_type;
    lr.weight = c.weight;
    lr.per_channel = wp.per_channel();
    lr.weight_scale_min = wp.scale.min().item<double>();
    lr.weight_scale_max = wp.scale.max().item<double>();
    lr.weight_sqnr_db = sqnr_db(w, dequantize_tensor(wq, wp));
    lr.output = c.output;
    lr.fused = c.fused;
    if (!c.output.empty()) {
      lr.output_scale = scalar(act.at(c.output).scale);
      lr.output_zero_point = static_cast<int64_t>(scalar(act.at(c.output).zero_point));
    }
    auto cached = stored.find(key);
    const std::string wdq =
        cached != stored.end() ? cached->second : add_dequantized_constant(q, c.weight, wq, wp, true);
    stored[key] = wdq;
    const QuantPolicy& p = policy_of(q.nodes[c.node].op_type);
    q.nodes[c.node].inputs[static_cast<size_t>(p.weight_input)] = wdq;
    if (!c.bias.empty()) {
      QuantParams bp;
      bp.scale = (act.at(c.input_root).scale * wp.scale).to(at::kFloat);
      bp.axis = c.axis >= 0 ? 0 : -1;
      bp.zero_point = at::zeros(bp.scale.sizes(), at::kInt);
      const at::Tensor b = q.initializers.at(c.bias).to(at::kFloat);
      const std::string bdq = add_dequantized_constant(q, c.bias, quantize_tensor(b, bp), bp, false);
      q.nodes[c.node].inputs[static_cast<size_t>(p.bias_input)] = bdq;
    }
    rep.layers.push_back(lr);
  }
  remove_unused_initializers(q);
  q.topo_sort();
  q.verify();
  q.metadata["pare.quantization"] = "static QDQ; weights " + rep.weights + "; activations " +
                                    rep.activations + "; calibration " + rep.method + " on " +
                                    std::to_string(rep.calib_samples) + " samples";
  return dq_of;
}

// SQNR of each requantized output and of the model output, fp32 `g` against quantized `q`, and
// how often their argmax agrees, on the calibration inputs.
void measure_sqnr(const Graph& g, const Graph& q, const std::map<std::string, std::string>& dq_of,
                  const at::Tensor& calib_x, int64_t batch_size, QuantReport& rep) {
  core::Module model(g, core::Module::Use::kFrozen);
  core::Module qmodel(q, core::Module::Use::kFrozen);
  std::vector<std::string> fp_names, q_names;
  for (auto& l : rep.layers)
    if (!l.output.empty()) {
      fp_names.push_back(l.output);
      q_names.push_back(dq_of.at(l.output));
    }
  std::vector<SqnrAccumulator> acc(fp_names.size());
  SqnrAccumulator out_acc;
  int64_t agree = 0, rows = 0;
  for (auto& b : batches_of(calib_x, batch_size)) {
    auto fv = model.forward_values({b}, fp_names);
    auto qv = qmodel.forward_values({b}, q_names);
    for (size_t k = 0; k < fp_names.size(); ++k) acc[k].add(fv.at(fp_names[k]), qv.at(q_names[k]));
    const std::string& o = g.outputs[0].name;
    const at::Tensor &fo = fv.at(o), &qo = qv.at(o);
    out_acc.add(fo, qo);
    if (fo.dim() >= 2 && fo.numel() > 0) {
      const int64_t axis = class_axis(fo.dim());
      agree += fo.argmax(axis).eq(qo.argmax(axis)).sum().item<int64_t>();
      rows += fo.numel() / fo.size(axis);
    }
  }
  for (size_t k = 0, j = 0; k < rep.layers.size(); ++k)
    if (!rep.layers[k].output.empty()) rep.layers[k].output_sqnr_db = acc[j++].db();
  rep.output_sqnr_db = out_acc.db();
  rep.argmax_rows = rows;
  rep.argmax_agreement = rows ? static_cast<double>(agree) / static_cast<double>(rows) : 0.0;
}

}  // namespace

PtqResult write_qdq(const Graph& g, const QuantPlan& plan, const Calibration& cal,
                    const std::map<WeightKey, QuantParams>& weights, const at::Tensor& calib_x,
                    const PtqOptions& opts) {
  auto say = [&](const std::string& s) {
    if (opts.progress_) opts.progress_(s);
  };
  at::NoGradGuard no_grad;
  PtqResult res;
  QuantReport& rep = res.report;
  describe_scheme(rep, plan, calib_x, opts);
  say("inserting QuantizeLinear/DequantizeLinear pairs");
  Graph q = g;
  const std::map<std::string, std::string> dq_of = insert_qdq_nodes(q, plan, cal, weights, rep);
  say("measuring SQNR against fp32");
  measure_sqnr(g, q, dq_of, calib_x, opts.batch_size_, rep);
  rep.fp32_bytes = g.initializer_bytes();
  rep.quantized_bytes = q.initializer_bytes();
  res.graph = std::move(q);
  return res;
}

void check_static_inputs(const Graph& fp32, const at::Tensor& calib_x, const PtqOptions& opts) {
  check_not_quantized(fp32, "model '" + fp32.name + "'");
  PARE_CHECK(fp32.opset >= 13, "model '", fp32.name, "' uses opset ", fp32.opset,
             "; per-channel QuantizeLinear/DequantizeLinear need opset 13 or later (re-export it)");
  check_calibration_data(fp32, calib_x, opts.calib_name_);
  check_options(opts);
}

PtqResult quantize_static(const Graph& fp32, const at::Tensor& calib_x, const PtqOptions& opts) {
  check_static_inputs(fp32, calib_x, opts);
  Graph g = fp32;
  const QuantPlan plan = plan_quantization(g, opts);
  const Calibration cal = calibrate(g, plan, calib_x, opts);
  PtqResult res = write_qdq(g, plan, cal, weight_quant_params(g, plan, cal, opts), calib_x, opts);
  res.report.fp32_bytes = fp32.initializer_bytes();
  return res;
}

namespace {

// JSON has no infinity: an exact match is reported as null.
nlohmann::json db_json(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

std::string QuantReport::to_json(int indent) const {
  nlohmann::json j;
  j["method"] = method;
  j["weights"] = weights;
  j["activations"] = activations;
  j["calib_samples"] = calib_samples;
  j["folded_batch_norms"] = folded_batch_norms;
  j["output_sqnr_db"] = db_json(output_sqnr_db);
  j["argmax_agreement"] = argmax_rows ? nlohmann::json(argmax_agreement) : nlohmann::json();
  j["argmax_rows"] = argmax_rows;
  j["fp32_bytes"] = fp32_bytes;
  j["quantized_bytes"] = quantized_bytes;
  j["skipped"] = skipped;
  j["layers"] = nlohmann::json::array();
  for (auto& l : layers)
    j["layers"].push_back({{"node", l.node}, {"op", l.op}, {"weight", l.weight},
                           {"per_channel", l.per_channel}, {"weight_scale_min", l.weight_scale_min},
                           {"weight_scale_max", l.weight_scale_max},
                           {"weight_sqnr_db", db_json(l.weight_sqnr_db)}, {"fused", l.fused},
                           {"output", l.output}, {"output_scale", l.output_scale},
                           {"output_zero_point", l.output_zero_point},
                           {"output_sqnr_db", l.output.empty() ? nlohmann::json() : db_json(l.output_sqnr_db)}});
  j["activations_quantized"] = nlohmann::json::array();
  for (auto& a : activations_quantized)
    j["activations_quantized"].push_back({{"value", a.value}, {"min", a.min}, {"max", a.max},
                                          {"lo", a.lo}, {"hi", a.hi}, {"scale", a.scale},
                                          {"zero_point", a.zero_point}, {"alias_of", a.alias_of}});
  return j.dump(indent);
}

std::string QuantReport::to_text() const {
  std::ostringstream os;
  os << "weights " << weights << ", activations " << activations << ", calibration " << method
     << " on " << calib_samples << " samples, " << folded_batch_norms << " BatchNorm folded\n";
  size_t width = 24;  // the node column: as wide as the longest name ("model.layers.11.mlp.down_proj")
  for (auto& l : layers) width = std::max(width, l.node.size() + (l.fused.empty() ? 0 : l.fused.size() + 1) + 2);
  const int w = static_cast<int>(width);
  os << std::left << std::setw(w) << "node" << std::setw(8) << "op" << std::setw(22)
     << "weight scale" << std::setw(10) << "W SQNR" << std::setw(12) << "out scale" << std::setw(6)
     << "zp" << "out SQNR\n";
  auto db = [](double v) {
    std::ostringstream s;
    if (std::isfinite(v)) s << std::fixed << std::setprecision(1) << v << " dB";
    else s << "exact";
    return s.str();
  };
  for (auto& l : layers) {
    std::ostringstream ws, name;
    ws << std::setprecision(3) << l.weight_scale_min;
    if (l.per_channel) ws << ".." << std::setprecision(3) << l.weight_scale_max;
    name << l.node << (l.fused.empty() ? "" : "+" + l.fused);
    os << std::left << std::setw(w) << name.str() << std::setw(8) << l.op << std::setw(22) << ws.str()
       << std::setw(10) << db(l.weight_sqnr_db);
    if (l.output.empty()) {
      os << "(output kept fp32)\n";
    } else {
      std::ostringstream sc;
      sc << std::setprecision(4) << l.output_scale;
      os << std::setw(12) << sc.str() << std::setw(6) << l.output_zero_point << db(l.output_sqnr_db) << "\n";
    }
  }
  for (auto& s : skipped) os << "kept fp32: " << s << "\n";
  os << "model output SQNR " << db(output_sqnr_db) << ", argmax agreement ";
  if (argmax_rows)
    os << std::fixed << std::setprecision(2) << argmax_agreement * 100 << "% of " << argmax_rows;
  else
    os << "n/a (output of rank < 2)";
  os << ", initializers " << fp32_bytes << " -> " << quantized_bytes << " bytes\n";
  return os.str();
}

}  // namespace pare::quantize
