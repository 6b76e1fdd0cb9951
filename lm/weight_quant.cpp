#include "lm/weight_quant.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "core/module.h"

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

// X^T X of each input value over the windows, from one pass of `model` (which reads m's weights).
std::map<std::string, at::Tensor> hessians(core::Module& model, const at::Tensor& windows,
                                           const std::vector<std::string>& inputs) {
  std::map<std::string, at::Tensor> h;
  at::NoGradGuard no_grad;
  for (int64_t i = 0; i < windows.size(0); ++i) {
    auto values = model.forward_until({windows.narrow(0, i, 1)}, inputs);
    for (const std::string& name : inputs) {
      at::Tensor x = quantize::hessian(values.at(name));
      auto [it, fresh] = h.emplace(name, x);
      if (!fresh) it->second.add_(x);
    }
  }
  return h;
}

// One group of weights sharing an input: RTN or GPTQ on their rows stacked, written back.
void quantize_group(LmModel& m, const std::vector<std::string>& names, const at::Tensor& h,
                    const LmQuantOptions& opts, LmQuantResult& r) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<at::Tensor> parts;
  for (const std::string& name : names) parts.push_back(m.graph.initializers.at(name).t().to(at::kFloat));  // [out, in]
  const at::Tensor w = at::cat(parts, 0);
  PARE_CHECK(opts.group != 32 || w.size(1) % 32 == 0, names.front(), ": ", w.size(1), " input columns are not a multiple "
             "of 32, the block of Q4_0 and Q8_0 (give another --group and an --out folder)");
  const quantize::Grid grid = quantize::symmetric_grid(w, opts.bits, opts.group);
  const at::Tensor codes = opts.method == "gptq" ? quantize::gptq(w, h, grid, opts.gptq) : quantize::rtn(w, grid);
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
    l.seconds = seconds;
    r.layers.push_back(l);
    if (opts.group == 32)
      r.blocks[names[i]] = ggml_pack(codes.narrow(0, row, rows), grid.scale.narrow(0, row, rows),
                                     static_cast<uint32_t>(r.type));
    m.graph.initializers.at(names[i]).copy_(qi.t());  // in place: a module running m's graph sees it
    row += rows;
  }
}

}  // namespace

LmQuantResult quantize_weights(LmModel& m, const at::Tensor& windows, const LmQuantOptions& opts,
                               const std::function<void(int, int, const std::string&)>& progress) {
  PARE_CHECK(opts.bits == 4 || opts.bits == 8, "--weight-only takes int4 or int8 for a language model");
  PARE_CHECK(opts.method == "rtn" || opts.method == "gptq", "--method for a language model's weights is rtn or gptq, not '",
             opts.method, "'");
  PARE_CHECK(opts.group > 0, "--group must be positive");
  PARE_CHECK(windows.defined() && windows.dim() == 2 && windows.size(0) > 0, "no calibration windows");
  LmQuantResult r;
  r.options = opts;
  if (opts.group == 32) r.type = opts.bits == 4 ? GgmlType::kQ4_0 : GgmlType::kQ8_0;
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
    const std::map<std::string, at::Tensor> h = hessians(model, windows, inputs);
    r.calib_seconds += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (size_t g = first; g < last; ++g) {
      quantize_group(m, groups[g].second, h.at(groups[g].first), opts, r);
      if (progress) progress(++done, static_cast<int>(groups.size()), groups[g].second.front());
    }
    quant_seconds += seconds_since(t0);
    first = last;
  }
  r.calib_tokens = windows.numel();
  r.quant_seconds = quant_seconds;
  return r;
}

nlohmann::json to_json(const LmQuantResult& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LmQuantLayer& l : r.layers)
    layers.push_back({{"name", l.name}, {"rows", l.rows}, {"cols", l.cols}, {"weight_error", l.weight_error},
                      {"sqnr_db", l.sqnr_db}, {"seconds", l.seconds}});
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
