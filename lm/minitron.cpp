#include "lm/minitron.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <map>

#include "core/dtype.h"
#include "core/error.h"
#include "core/module.h"
#include "lm/hf_export.h"

namespace pare::lm {

namespace {

// The node the builder names `name` (a weight's Hugging Face name without ".weight").
const core::Node& node_named(const core::Graph& g, const std::string& name) {
  for (const core::Node& n : g.nodes)
    if (n.name == name) return n;
  throw InputError("the language model has no node '" + name + "' (a pass rewrote it?)");
}

// The values importance() reads in each layer.
struct LayerValues {
  std::string input, output;        // the residual stream before and after the layer
  std::string attention, neurons;   // o_proj's and down_proj's inputs
  std::vector<std::string> normed;  // the layer's norm outputs
};

std::vector<LayerValues> layer_values(const LmModel& m, std::string& final_normed) {
  const TensorNames& n = m.config.family->names;
  std::vector<LayerValues> out(m.config.layers);
  for (int64_t i = 0; i < m.config.layers; ++i) {
    const core::Node& attn_norm = node_named(m.graph, layer_name(n.attn_norm, i));
    out[i].input = attn_norm.inputs[0];
    if (i > 0) out[i - 1].output = out[i].input;
    out[i].attention = node_named(m.graph, layer_name(n.o, i)).inputs[0];
    out[i].neurons = node_named(m.graph, layer_name(n.down, i)).inputs[0];
    out[i].normed = {attn_norm.outputs[0], node_named(m.graph, layer_name(n.mlp_norm, i)).outputs[0]};
  }
  const core::Node& final_norm = node_named(m.graph, n.final_norm);
  out.back().output = final_norm.inputs[0];
  final_normed = final_norm.outputs[0];
  return out;
}

// Adds the square of a window's mean over the sequence: the paper's (L2 over the batch, mean over the sequence).
void add_squared_mean(at::Tensor& acc, const at::Tensor& per_token) {
  const at::Tensor m = per_token.to(at::kDouble).mean(0).square();
  if (acc.defined())
    acc.add_(m);
  else
    acc = m;
}

// The ascending indices of the `k` largest of `score`.
std::vector<int64_t> top(const at::Tensor& score, int64_t k) {
  const at::Tensor idx = std::get<0>(std::get<1>(score.topk(k)).sort()).contiguous();
  return {idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + k};
}

at::Tensor index_of(const std::vector<int64_t>& v) { return at::tensor(v, at::kLong); }

// The rows of heads `heads` (each head_dim rows) of a [heads x head_dim, ...] projection.
std::vector<int64_t> head_rows(const std::vector<int64_t>& heads, int64_t head_dim) {
  std::vector<int64_t> rows;
  for (int64_t h : heads)
    for (int64_t d = 0; d < head_dim; ++d) rows.push_back(h * head_dim + d);
  return rows;
}

}  // namespace

Importance importance(const LmModel& m, const at::Tensor& windows,
                      const std::function<void(int64_t, int64_t)>& progress) {
  PARE_CHECK(windows.dim() == 2 && windows.size(0) > 0, "importance needs calibration windows [N, seq]");
  const LmConfig& c = m.config;
  std::string final_normed;
  const std::vector<LayerValues> values = layer_values(m, final_normed);
  std::vector<std::string> wanted = {final_normed};
  for (const LayerValues& v : values) {
    wanted.insert(wanted.end(), {v.input, v.output, v.attention, v.neurons});
    wanted.insert(wanted.end(), v.normed.begin(), v.normed.end());
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  core::Module model(m.graph, core::Module::Use::kFrozen);
  Importance imp;
  imp.layers.assign(c.layers, 0.0);
  imp.heads.resize(c.layers), imp.neurons.resize(c.layers);
  at::NoGradGuard no_grad;
  const int64_t n = windows.size(0);
  for (int64_t w = 0; w < n; ++w) {
    auto got = model.forward_until({windows.narrow(0, w, 1)}, wanted);
    auto row = [&](const std::string& name) {
      const at::Tensor& t = got.at(name);
      return t.reshape({-1, t.size(-1)});
    };
    for (int64_t i = 0; i < c.layers; ++i) {
      const LayerValues& v = values[i];
      const at::Tensor x = row(v.input).to(at::kDouble), y = row(v.output).to(at::kDouble);
      imp.layers[i] += at::cosine_similarity(x, y, 1).mean().item<double>();
      const at::Tensor a = row(v.attention);
      add_squared_mean(imp.heads[i], a.reshape({a.size(0), c.heads, -1}).to(at::kDouble).norm(2, -1));
      add_squared_mean(imp.neurons[i], row(v.neurons).abs());
      for (const std::string& name : v.normed) add_squared_mean(imp.hidden, row(name).abs());
    }
    add_squared_mean(imp.hidden, row(final_normed).abs());
    imp.tokens += windows.size(1);
    if (progress) progress(w + 1, n);
  }
  for (double& l : imp.layers) l = 1.0 - l / static_cast<double>(n);
  for (at::Tensor& t : imp.heads) t.sqrt_();
  for (at::Tensor& t : imp.neurons) t.sqrt_();
  imp.hidden.sqrt_();
  return imp;
}

void PruneTargets::validate(const LmConfig& c, const std::string& what) const {
  auto check = [&](int64_t want, int64_t have, const char* option, const char* axis) {
    PARE_CHECK_OPTION(want >= 0 && want <= have, option, want, " is not between 1 and the ", have, " ", axis, " of ",
                      what, " (0 keeps them all)");
  };
  check(layers, c.layers, "layers", "decoder layers");
  check(hidden, c.hidden, "hidden", "hidden channels");
  check(heads, c.heads, "heads", "attention heads");
  check(intermediate, c.intermediate, "intermediate", "MLP neurons per layer");
  const int64_t group = c.heads / c.kv_heads;
  PARE_CHECK_OPTION(heads % group == 0, "heads", heads, " must keep whole query groups (a multiple of ", group,
                    "): ", what, " has ", c.heads, " query heads in ", c.kv_heads, " groups sharing a KV head");
  const bool fused = *c.family->names.qkv != '\0';
  if (fused && ((hidden && hidden != c.hidden) || (heads && heads != c.heads)))
    throw InputError(detail::concat("hidden and heads stay in ", what, ": ", c.family->architecture,
                                    " ties the "
                                    "head size to the hidden size and keeps q/k/v in one weight, so pare prunes its "
                                    "decoder layers and MLP width only"))
        .about("hidden")
        .about("heads");
}

Keep choose(const LmConfig& c, const Importance& imp, const PruneTargets& t, const std::string& what) {
  t.validate(c, what);
  const int64_t group = c.heads / c.kv_heads;
  Keep k;
  const int64_t layers = t.layers ? t.layers : c.layers;
  k.layers = top(at::tensor(imp.layers, at::kDouble), layers);
  if (t.hidden && t.hidden < c.hidden) k.hidden = top(imp.hidden, t.hidden);
  for (int64_t i : k.layers) {
    if (t.heads && t.heads < c.heads)
      k.kv_groups.push_back(top(imp.heads[i].reshape({c.kv_heads, group}).sum(1), t.heads / group));
    if (t.intermediate && t.intermediate < c.intermediate) k.neurons.push_back(top(imp.neurons[i], t.intermediate));
  }
  return k;
}

namespace {

// Which of a tensor's axes (of its checkpoint layout) keep which indices; undefined keeps all.
struct Cut {
  at::Tensor out, in;
};

at::Tensor cut(at::Tensor t, const Cut& k, bool in_out) {
  if (t.dim() == 1) return k.out.defined() ? t.index_select(0, k.out) : t;
  const int64_t out_axis = in_out ? 1 : 0;
  if (k.out.defined()) t = t.index_select(out_axis, k.out);
  if (k.in.defined()) t = t.index_select(1 - out_axis, k.in);
  return t;
}

// How a role's tensor is cut in a layer: outputs and inputs by head rows, neurons or hidden channels.
Cut cut_of(Role r, const at::Tensor& hidden, const at::Tensor& q, const at::Tensor& kv, const at::Tensor& neurons) {
  if (r == &TensorNames::q) return {q, hidden};
  if (r == &TensorNames::k || r == &TensorNames::v) return {kv, hidden};
  if (r == &TensorNames::o) return {hidden, q};
  if (r == &TensorNames::gate || r == &TensorNames::up) return {neurons, hidden};
  if (r == &TensorNames::down) return {hidden, neurons};
  if (r == &TensorNames::qkv) return {at::Tensor(), hidden};  // GPT-2: choose() keeps its heads and hidden whole
  if (r == &TensorNames::q_norm || r == &TensorNames::k_norm) return {};
  if (r == &TensorNames::embed || r == &TensorNames::positions || r == &TensorNames::lm_head)
    return {at::Tensor(), hidden};
  return {hidden, at::Tensor()};  // the norms' weights and biases
}

}  // namespace

LmModel slice(const LmModel& m, const Keep& k, const std::string& what, const BuildOptions& opts) {
  LmConfig c = m.config;
  const Family& f = *c.family;
  std::vector<int64_t> layers = k.layers;
  if (layers.empty())
    for (int64_t i = 0; i < c.layers; ++i) layers.push_back(i);
  PARE_CHECK(k.kv_groups.empty() || k.kv_groups.size() == layers.size(), what, ": KV groups for ", k.kv_groups.size(),
             " layers, not ", layers.size());
  PARE_CHECK(k.neurons.empty() || k.neurons.size() == layers.size(), what, ": neurons for ", k.neurons.size(),
             " layers, not ", layers.size());
  auto ascending = [&](const std::vector<int64_t>& v, int64_t n, const char* axis) {
    for (size_t i = 0; i < v.size(); ++i)
      PARE_CHECK(v[i] >= 0 && v[i] < n && (i == 0 || v[i] > v[i - 1]), what, " has ", n, " ", axis, " (0 to ", n - 1,
                 "): it has no ", axis == std::string("layers") ? "layer " : "index ", v[i],
                 i > 0 && v[i] <= v[i - 1] ? " after the ones before it (list each once, ascending)" : "");
  };
  ascending(layers, c.layers, "layers");
  ascending(k.hidden, c.hidden, "hidden channels");
  for (const auto& g : k.kv_groups) ascending(g, c.kv_heads, "KV heads");
  for (const auto& g : k.neurons) ascending(g, c.intermediate, "MLP neurons");
  const std::map<std::string, at::Tensor> weights = hf_tensors(m, c);
  // Layer tensors are named <prefix><i>.<rest> ("model.layers.3.mlp.up_proj.weight").
  const std::string pattern = f.names.attn_norm;
  const std::string prefix = pattern.substr(0, pattern.find("{i}"));
  const at::Tensor hidden = k.hidden.empty() ? at::Tensor() : index_of(k.hidden);
  const int64_t group = c.heads / c.kv_heads;
  std::map<std::string, at::Tensor> kept;
  for (const auto& [name, t] : weights) {
    int64_t slot = -1;  // the layer's place among the kept, or -1 outside the layers
    std::string renamed = name;
    if (name.rfind(prefix, 0) == 0) {
      const size_t dot = name.find('.', prefix.size());
      const auto it =
          std::find(layers.begin(), layers.end(), std::stoll(name.substr(prefix.size(), dot - prefix.size())));
      if (it == layers.end()) continue;
      slot = it - layers.begin();
      renamed = prefix + std::to_string(slot) + name.substr(dot);
    }
    at::Tensor q, kv, neurons;
    if (slot >= 0 && !k.kv_groups.empty()) {
      std::vector<int64_t> heads;
      for (int64_t g : k.kv_groups[slot])
        for (int64_t h = 0; h < group; ++h) heads.push_back(g * group + h);
      q = index_of(head_rows(heads, c.head_dim));
      kv = index_of(head_rows(k.kv_groups[slot], c.head_dim));
    }
    if (slot >= 0 && !k.neurons.empty()) neurons = index_of(k.neurons[slot]);
    const Role r = role_of(f, name);
    PARE_ASSERT(r != nullptr);
    const bool in_out = f.linear_in_out && is_linear_role(r) && r != &TensorNames::lm_head;  // GPT-2's Conv1D
    kept[renamed] = cut(t, cut_of(r, hidden, q, kv, neurons), in_out).contiguous();
  }
  c.layers = static_cast<int64_t>(layers.size());
  if (!k.hidden.empty()) c.hidden = static_cast<int64_t>(k.hidden.size());
  if (!k.kv_groups.empty()) c.kv_heads = static_cast<int64_t>(k.kv_groups[0].size()), c.heads = c.kv_heads * group;
  if (!k.neurons.empty()) c.intermediate = static_cast<int64_t>(k.neurons[0].size());
  for (const auto& g : k.kv_groups)
    PARE_CHECK(static_cast<int64_t>(g.size()) == c.kv_heads, what, ": every layer keeps the same number of KV heads");
  for (const auto& g : k.neurons)
    PARE_CHECK(static_cast<int64_t>(g.size()) == c.intermediate, what,
               ": every layer keeps the same number of neurons");
  c.validate(what);
  LmModel r;
  r.graph = build_graph(c, kept, opts, what);
  if (opts.dtype) c.dtype = core::dtype_name(*opts.dtype);
  r.config = c;
  r.tokenizer = m.tokenizer;
  r.tok = m.tok;
  return r;
}

nlohmann::json to_json(const LmConfig& before, const Importance& imp, const Keep& k) {
  auto list = [](const at::Tensor& t) {
    const at::Tensor d = t.to(at::kDouble).contiguous();
    return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  };
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t i = 0; i < before.layers; ++i)
    layers.push_back({{"layer", i},
                      {"block_importance", imp.layers[i]},
                      {"kept", k.layers.empty() || std::count(k.layers.begin(), k.layers.end(), i) > 0},
                      {"head_importance", list(imp.heads[i])}});
  return {{"calibration_tokens", imp.tokens}, {"layers", layers},
          {"kept_layers", k.layers},          {"kept_kv_heads", k.kv_groups},
          {"kept_hidden", k.hidden.size()},   {"hidden_importance", list(imp.hidden)}};
}

}  // namespace pare::lm
