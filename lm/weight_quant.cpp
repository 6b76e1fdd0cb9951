#include "lm/weight_quant.h"

#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "core/module.h"
#include "quantize/awq.h"

namespace pare::lm {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The decoder layers' linear weights by the value they multiply (MatMul's first input), in graph order.
std::vector<std::pair<std::string, std::vector<std::string>>> linears_by_input(const LmModel& m) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const core::Node& n : m.graph.nodes) {
    if (n.op_type != "MatMul" || n.inputs.size() != 2 || !m.graph.initializers.count(n.inputs[1])) continue;
    const Role role = role_of(*m.config.family, n.inputs[1]);
    if (!role || !is_linear_role(role) || role == &TensorNames::lm_head) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == n.inputs[0]; });
    if (it == out.end()) it = out.insert(out.end(), {n.inputs[0], {}});
    it->second.push_back(n.inputs[1]);
  }
  return out;
}

// The decoder layer a weight belongs to: the first number in its name ("model.layers.12.mlp..." -> 12).
int64_t layer_of(const std::string& name) {
  const size_t at = name.find_first_of("0123456789");
  return at == std::string::npos ? -1 : std::stoll(name.substr(at, name.find_first_not_of("0123456789", at) - at));
}

// What AWQ and GPTQ know of a group's input over the calibration windows.
struct InputStats {
  at::Tensor h;         // X^T X [in, in]
  at::Tensor abs_mean;  // mean |x| per channel [in]
  at::Tensor abs_max;   // max |x| per channel [in] (SmoothQuant's statistic)
};

// The statistics of each input value over the windows, from one pass of `model` (which reads m's weights);
// without `hessian`, only mean and max |x| (SmoothQuant needs no X^T X).
std::map<std::string, InputStats> input_stats(core::Module& model, const at::Tensor& windows,
                                              const std::vector<std::string>& inputs, bool hessian = true) {
  std::map<std::string, InputStats> stats;
  at::NoGradGuard no_grad;
  for (int64_t i = 0; i < windows.size(0); ++i) {
    auto values = model.forward_until({windows.narrow(0, i, 1)}, inputs);
    for (const std::string& name : inputs) {
      const at::Tensor x = values.at(name).reshape({-1, values.at(name).size(-1)}).abs();
      InputStats one{hessian ? quantize::hessian(values.at(name)) : at::Tensor(), x.sum(0, false, at::kDouble),
                     x.amax(0).to(at::kFloat)};
      auto [it, fresh] = stats.emplace(name, one);
      if (fresh) continue;
      InputStats& s = it->second;
      if (hessian) s.h.add_(one.h);
      s.abs_mean.add_(one.abs_mean);
      at::max_out(s.abs_max, s.abs_max, one.abs_max);
    }
  }
  for (auto& [name, s] : stats) s.abs_mean = (s.abs_mean / static_cast<double>(windows.numel())).to(at::kFloat);
  return stats;
}

// Each weight of a group as float [out, in] (the graph holds [in, out]).
std::vector<at::Tensor> rows_of(const LmModel& m, const std::vector<std::string>& names) {
  std::vector<at::Tensor> parts;
  for (const std::string& name : names) parts.push_back(m.graph.initializers.at(name).t().to(at::kFloat));
  return parts;
}

bool is_query_or_key(const Family& f, const std::string& weight) {
  const Role role = role_of(f, weight);
  return role == &TensorNames::q || role == &TensorNames::k || role == &TensorNames::qkv;
}

// The tensors that make a group's input, whose output channels take AWQ's 1/s: the norm before q/k/v
// and before the MLP (weight and bias), up before SwiGLU's down, v before o when every query head
// has its own KV head (`offset`: v's first column in a fused qkv). None where the input comes
// through a nonlinearity (GELU before GPT-2's MLP c_proj) or feeds several heads (grouped KV heads).
struct Fold {
  std::vector<std::string> tensors;
  int64_t offset = 0;
};

Fold fold_of(const LmModel& m, const std::string& weight) {
  const Family& f = *m.config.family;
  const LmConfig& c = m.config;
  const Role role = role_of(f, weight);
  const int64_t layer = layer_of(weight);
  auto fold = [&](const char* pattern, int64_t offset) {
    Fold out{{}, offset};
    for (const char* suffix : {".weight", ".bias"}) {
      const std::string name = layer_name(pattern, layer) + suffix;
      if (m.graph.initializers.count(name)) out.tensors.push_back(name);
    }
    return out;
  };
  if (role == &TensorNames::q || role == &TensorNames::k || role == &TensorNames::v || role == &TensorNames::qkv)
    return fold(f.names.attn_norm, 0);
  if (role == &TensorNames::gate || role == &TensorNames::up) return fold(f.names.mlp_norm, 0);
  if (role == &TensorNames::down && f.mlp == Mlp::kSwiGlu) return fold(f.names.up, 0);
  if (role == &TensorNames::o && c.kv_heads == c.heads)
    return *f.names.qkv ? fold(f.names.qkv, (c.heads + c.kv_heads) * c.head_dim) : fold(f.names.v, 0);
  return {};
}

// Scales a group's input channels by s: its weights' columns times s, the folded tensors' outputs
// divided by s, its input statistics those of the input divided by s. The model keeps its function.
void apply_scales(LmModel& m, const std::vector<std::string>& names, const Fold& fold, const at::Tensor& s,
                  InputStats& stats) {
  for (const std::string& name : names) {
    at::Tensor w = m.graph.initializers.at(name);  // [in, out]
    w.mul_(s.to(w.scalar_type()).unsqueeze(1));
  }
  for (const std::string& name : fold.tensors) {
    at::Tensor t = m.graph.initializers.at(name);  // a norm's [hidden], a linear's [in, out] or its bias [out]
    t.narrow(t.dim() - 1, fold.offset, s.size(0)).div_(s.to(t.scalar_type()));
  }
  if (stats.h.defined()) stats.h.div_(s.unsqueeze(1) * s.unsqueeze(0));
  stats.abs_mean.div_(s);
  stats.abs_max.div_(s);
}

// AWQ's scales for one group, applied. Returns the search's choice (none without a fold).
quantize::AwqScale scale_group(LmModel& m, const std::vector<std::string>& names, InputStats& stats,
                               const LmQuantOptions& opts) {
  const Fold fold = fold_of(m, names.front());
  if (fold.tensors.empty()) return {};
  const quantize::AwqScale a =
      quantize::awq_scale(at::cat(rows_of(m, names), 0), stats.abs_mean, stats.h, opts.bits, opts.group);
  apply_scales(m, names, fold, a.scales, stats);
  return a;
}

// One group of weights sharing an input: RTN, GPTQ or AWQ's clipped RTN (awq+gptq: GPTQ on AWQ's scaled
// weights, unclipped) on their rows stacked, written back.
void quantize_group(LmModel& m, const std::vector<std::string>& names, const InputStats& stats,
                    const quantize::AwqScale& awq, const LmQuantOptions& opts, LmQuantResult& r) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<at::Tensor> parts = rows_of(m, names);
  const at::Tensor w = at::cat(parts, 0), &h = stats.h;
  PARE_CHECK(opts.group != 32 || w.size(1) % 32 == 0, names.front(), ": ", w.size(1), " input columns are not a multiple "
             "of 32, the block of Q4_0 and Q8_0 (give another --group and an --out folder)");
  at::Tensor shrink;  // AWQ clips every group's range but q's and k's (their error shows after the softmax)
  const bool gptq_rounds = opts.method == "gptq" || opts.method == "awq+gptq";
  if (opts.method == "awq") {
    shrink = quantize::awq_clip(w, h, opts.bits, opts.group);
    for (int64_t i = 0, row = 0; i < static_cast<int64_t>(names.size()); row += parts[i].size(0), ++i)
      if (is_query_or_key(*m.config.family, names[i])) shrink.narrow(0, row, parts[i].size(0)).fill_(1.0);
  }
  // Q4_K's grid is read off ggml's blocks of the original weights (a super-block's scales are chosen
  // together, so it is fixed); the blocks then take GPTQ's codes.
  const bool q4_k = opts.q4_k && w.size(1) % 256 == 0;
  const std::string k_blocks = q4_k ? ggml_quantize(w, static_cast<uint32_t>(GgmlType::kQ4_K), names.front()) : "";
  quantize::Grid grid = q4_k ? q4_k_grid(k_blocks, w.size(0), w.size(1))
                             : quantize::symmetric_grid(w, opts.bits, opts.group, shrink);
  quantize::GptqOptions gptq = opts.gptq;
  if (!opts.static_groups && !q4_k)
    gptq.regrid = [bits = opts.bits](const at::Tensor& cols) {
      return quantize::symmetric_grid(cols, bits, cols.size(1));
    };
  const at::Tensor codes = gptq_rounds ? quantize::gptq(w, h, grid, gptq) : quantize::rtn(w, grid);
  const at::Tensor q = quantize::grid_values(codes, grid);
  const double seconds = seconds_since(t0);
  int64_t row = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t rows = parts[i].size(0);
    const at::Tensor wi = parts[i], qi = q.narrow(0, row, rows).contiguous();
    LmQuantLayer l;
    l.name = names[i];
    l.rows = rows, l.cols = w.size(1);
    l.weight_error = ((wi - qi).pow(2).sum() / wi.pow(2).sum()).item<double>();
    l.sqnr_db = quantize::output_sqnr_db(wi, qi, h);
    l.awq_alpha = awq.alpha;
    l.awq_duo = awq.duo;
    l.seconds = seconds;
    r.layers.push_back(l);
    if (q4_k) {
      const int64_t row_bytes = w.size(1) / 256 * 144;
      r.blocks[names[i]] = {GgmlType::kQ4_K, ggml_pack_q4_k(codes.narrow(0, row, rows),
                                                            k_blocks.substr(row * row_bytes, rows * row_bytes))};
    } else if (opts.group == 32) {
      const GgmlType type = opts.bits == 4 ? GgmlType::kQ4_0 : GgmlType::kQ8_0;
      r.blocks[names[i]] = {type, ggml_pack(codes.narrow(0, row, rows), grid.scale.narrow(0, row, rows),
                                            static_cast<uint32_t>(type))};
    }
    m.graph.initializers.at(names[i]).copy_(qi.t());  // in place: a module running m's graph sees it
    row += rows;
  }
}

}  // namespace

LmQuantResult quantize_weights(LmModel& m, const at::Tensor& windows, const LmQuantOptions& opts,
                               const std::function<void(int, int, const std::string&)>& progress) {
  PARE_CHECK_OPTION(opts.bits == 4 || opts.bits == 8, "bits", "must be 4 or 8 for a language model, got ", opts.bits);
  PARE_CHECK_OPTION(opts.method == "rtn" || opts.method == "gptq" || opts.method == "awq" ||
                        opts.method == "awq+gptq",
                    "method", "of a language model's weights is rtn, gptq, awq or awq+gptq, not '", opts.method, "'");
  PARE_CHECK_OPTION(opts.group > 0, "group", "must be positive, got ", opts.group);
  PARE_CHECK(windows.defined() && windows.dim() == 2 && windows.size(0) > 0, "no calibration windows");
  LmQuantResult r;
  r.options = opts;
  PARE_CHECK_OPTION(!opts.q4_k || (opts.bits == 4 && opts.group == 32), "q4_k", "is a 4-bit grid of groups of 32, "
                    "not ", opts.bits, " bits in groups of ", opts.group);
  if (opts.group == 32) r.type = opts.q4_k ? GgmlType::kQ4_K : opts.bits == 4 ? GgmlType::kQ4_0 : GgmlType::kQ8_0;
  const auto groups = linears_by_input(m);
  PARE_CHECK(!groups.empty(), "the model has no linear layers to quantize");
  // The module reads the graph's tensors themselves (frozen: no copy), so a layer written back in
  // place is what later passes run. Sequential: each decoder layer's Hessians from the model whose
  // earlier layers are quantized already (one partial pass per layer); else all from one pass.
  core::Module model(m.graph, core::Module::Use::kFrozen);
  double quant_seconds = 0;
  int done = 0;
  for (size_t first = 0; first < groups.size();) {
    size_t last = first + 1;
    if (opts.sequential)
      while (last < groups.size() && layer_of(groups[last].second.front()) == layer_of(groups[first].second.front())) ++last;
    else
      last = groups.size();
    std::vector<std::string> inputs;
    for (size_t g = first; g < last; ++g) inputs.push_back(groups[g].first);
    auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, InputStats> stats = input_stats(model, windows, inputs);
    r.calib_seconds += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    // AWQ scales every group before any is rounded: a fold may reach into another group (down's into up).
    std::vector<quantize::AwqScale> awq(last - first);
    if (opts.method.rfind("awq", 0) == 0)
      for (size_t g = first; g < last; ++g)
        awq[g - first] = scale_group(m, groups[g].second, stats.at(groups[g].first), opts);
    for (size_t g = first; g < last; ++g) {
      quantize_group(m, groups[g].second, stats.at(groups[g].first), awq[g - first], opts, r);
      if (progress) progress(++done, static_cast<int>(groups.size()), groups[g].second.front());
    }
    quant_seconds += seconds_since(t0);
    first = last;
  }
  r.calib_tokens = windows.numel();
  r.quant_seconds = quant_seconds;
  return r;
}

LmSmoothResult smooth_activations(LmModel& m, const at::Tensor& windows, double alpha) {
  PARE_CHECK_OPTION(alpha >= 0 && alpha <= 1, "smoothquant", "takes an alpha in [0, 1], got ", alpha);
  PARE_CHECK(windows.defined() && windows.dim() == 2 && windows.size(0) > 0, "no calibration windows");
  const auto t0 = std::chrono::steady_clock::now();
  const auto groups = linears_by_input(m);
  std::vector<std::string> inputs;
  for (const auto& g : groups) inputs.push_back(g.first);
  core::Module model(m.graph, core::Module::Use::kFrozen);
  std::map<std::string, InputStats> stats = input_stats(model, windows, inputs, /*hessian=*/false);
  LmSmoothResult r;
  r.alpha = alpha;
  for (const auto& [input, names] : groups) {
    InputStats& st = stats.at(input);
    LmSmoothGroup g{names, st.abs_max.max().item<double>(), 0, 1, 1};
    const Fold fold = fold_of(m, names.front());
    if (!fold.tensors.empty()) {
      // SmoothQuant's s = max|x|^alpha / max|w|^(1 - alpha), 1 where a channel is all zeros.
      const at::Tensor w_max = at::cat(rows_of(m, names), 0).abs().amax(0);
      const at::Tensor live = (st.abs_max > 0) & (w_max > 0);
      const at::Tensor s = at::where(live, (st.abs_max.pow(alpha) / w_max.pow(1 - alpha)).clamp_min(1e-5),
                                     at::ones_like(w_max));
      apply_scales(m, names, fold, s, st);
      g.scale_min = s.min().item<double>(), g.scale_max = s.max().item<double>();
    }
    g.input_max_after = st.abs_max.max().item<double>();
    r.groups.push_back(std::move(g));
  }
  r.calib_tokens = windows.numel();
  r.seconds = seconds_since(t0);
  return r;
}

quantize::PtqResult quantize_w8a8(const LmModel& m, const at::Tensor& windows, quantize::PtqOptions opts) {
  PARE_CHECK(windows.defined() && windows.dim() == 2 && windows.size(0) > 0, "no calibration windows");
  std::vector<std::string> nodes;
  for (const auto& g : linears_by_input(m))
    for (const std::string& w : g.second) nodes.push_back(w.substr(0, w.size() - std::string(".weight").size()));
  PARE_CHECK(!nodes.empty(), "the model has no linear layers to quantize");
  if (!opts.include_.empty() || !opts.exclude_.empty() || opts.keep_first_ || opts.keep_last_)
    throw InputError("a language model's W8A8 quantizes the decoder layers' linear layers (not the embedding and "
                     "the head): the options include, exclude, keep_first and keep_last do not apply")
        .about("include").about("exclude").about("keep_first").about("keep_last");
  opts.include(nodes).requantize_outputs(false).fold_bn(false);
  quantize::PtqResult r = quantize::quantize_static(m.graph, windows, opts);
  for (auto& [key, value] : onnx_metadata(m)) r.graph.metadata[key] = value;
  return r;
}

nlohmann::json to_json(const LmSmoothResult& r) {
  nlohmann::json groups = nlohmann::json::array();
  for (const LmSmoothGroup& g : r.groups)
    groups.push_back({{"weights", g.weights},
                      {"input_max", g.input_max_before},
                      {"input_max_smoothed", g.input_max_after},
                      {"scale_min", g.scale_min},
                      {"scale_max", g.scale_max}});
  return {{"alpha", r.alpha}, {"calib_tokens", r.calib_tokens}, {"seconds", r.seconds}, {"groups", groups}};
}

std::string to_text(const LmSmoothResult& r) {
  char line[256];
  std::snprintf(line, sizeof(line), "%-48s %12s %12s %19s\n", "input of", "max |x|", "smoothed", "scales");
  std::string out = line;
  for (const LmSmoothGroup& g : r.groups) {
    std::string names;  // model.layers.0.self_attn.q_proj,k_proj,v_proj
    for (const std::string& w : g.weights) {
      const std::string base = w.substr(0, w.rfind(".weight"));
      names += names.empty() ? base : "," + base.substr(base.rfind('.') + 1);
    }
    std::snprintf(line, sizeof(line), "%-48s %12.3g %12.3g %9.3g-%-9.3g\n", names.c_str(), g.input_max_before,
                  g.input_max_after, g.scale_min, g.scale_max);
    out += line;
  }
  std::snprintf(line, sizeof(line), "SmoothQuant alpha %g: %zu inputs, %lld calibration tokens, %.1f s\n", r.alpha,
                r.groups.size(), static_cast<long long>(r.calib_tokens), r.seconds);
  return out + line;
}

nlohmann::json to_json(const LmQuantResult& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LmQuantLayer& l : r.layers)
    layers.push_back({{"name", l.name}, {"rows", l.rows}, {"cols", l.cols}, {"weight_error", l.weight_error},
                      {"sqnr_db", l.sqnr_db}, {"awq_alpha", l.awq_alpha}, {"awq_duo", l.awq_duo},
                      {"seconds", l.seconds}});
  return {{"bits", r.options.bits}, {"group", r.options.group}, {"method", r.options.method},
          {"ggml_type", r.blocks.empty() ? "" : ggml_type_name(static_cast<uint32_t>(r.type))},
          {"calib_tokens", r.calib_tokens}, {"calib_seconds", r.calib_seconds}, {"quant_seconds", r.quant_seconds},
          {"layers", layers}};
}

std::string to_text(const LmQuantResult& r) {
  char line[256];
  std::string out;
  std::snprintf(line, sizeof(line), "%-48s %12s %12s %9s %7s\n", "weight", "shape", "weight err", "SQNR dB", "s");
  out += line;
  double mean_sqnr = 0;
  for (const LmQuantLayer& l : r.layers) {
    const std::string shape = std::to_string(l.rows) + "x" + std::to_string(l.cols);
    std::snprintf(line, sizeof(line), "%-48s %12s %12.3e %9.2f %7.2f\n", l.name.c_str(), shape.c_str(), l.weight_error,
                  l.sqnr_db, l.seconds);
    out += line;
    mean_sqnr += l.sqnr_db / static_cast<double>(r.layers.size());
  }
  std::snprintf(line, sizeof(line), "%s int%d, groups of %lld: %zu weights, mean output SQNR %.2f dB; calibration %lld "
                "tokens in %.1f s, quantization %.1f s\n", r.options.method.c_str(), r.options.bits,
                static_cast<long long>(r.options.group), r.layers.size(), mean_sqnr,
                static_cast<long long>(r.calib_tokens), r.calib_seconds, r.quant_seconds);
  return out + line;
}

}  // namespace pare::lm
