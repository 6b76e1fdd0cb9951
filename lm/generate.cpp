#include "lm/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>

#include "core/error.h"

namespace pare::lm {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void SamplingOptions::validate() const {
  PARE_CHECK_OPTION(max_new_tokens >= 0, "max_new_tokens", "must be >= 0, got ", max_new_tokens);
  PARE_CHECK_OPTION(std::isfinite(temperature) && temperature >= 0, "temperature", "must be >= 0 (0: greedy), got ",
                    temperature);
  PARE_CHECK_OPTION(top_k >= 0, "top_k", "must be >= 0 (0: off), got ", top_k);
  PARE_CHECK_OPTION(top_p > 0 && top_p <= 1, "top_p", "must lie in (0, 1], got ", top_p);
}

double GenerateStats::decode_tokens_per_second() const {
  return decode_seconds > 0 ? static_cast<double>(new_tokens - 1) / decode_seconds : 0;
}

Generator::Generator(core::Graph kv_graph) : module_(std::move(kv_graph), core::Module::Use::kFrozen) {
  module_.eval();
  const core::Graph& g = module_.graph();
  PARE_CHECK(g.inputs.size() >= 3 && g.inputs[1].name == "past_key.0", "graph '", g.name,
             "' has no KV cache inputs (build it with kv_cache)");
  layers_ = static_cast<int64_t>(g.inputs.size() - 1) / 2;
  const core::Shape& s = g.inputs[1].shape;
  cache_shape_ = {1, s[1].value, 0, s[3].value};
  cache_type_ = g.inputs[1].dtype;
}

int64_t Generator::choose(const at::Tensor& logits, const SamplingOptions& opts, at::Generator& rng) {
  at::Tensor l = logits.to(at::kFloat);
  if (opts.temperature == 0) return l.argmax().item<int64_t>();
  l = l / opts.temperature;
  const double inf = std::numeric_limits<double>::infinity();
  if (opts.top_k > 0 && opts.top_k < l.size(0)) {
    const at::Tensor kth = std::get<0>(l.topk(opts.top_k)).select(0, opts.top_k - 1);
    l = l.masked_fill(l < kth, -inf);
  }
  if (opts.top_p < 1) {
    // As transformers' TopPLogitsWarper: drop the least likely tokens whose cumulative probability
    // stays within 1 - top_p, keeping at least one.
    auto [sorted, order] = l.sort(/*dim=*/0, /*descending=*/false);
    const at::Tensor cum = sorted.softmax(0).cumsum(0);
    at::Tensor drop = cum <= (1 - opts.top_p);
    drop.index_put_({-1}, false);
    l = l.masked_fill(at::zeros_like(drop).scatter(0, order, drop), -inf);
  }
  return at::multinomial(l.softmax(0), 1, false, rng).item<int64_t>();
}

GenerateStats Generator::generate(const std::vector<int64_t>& prompt, const SamplingOptions& opts,
                                  const std::function<bool(int64_t)>& on_token) {
  opts.validate();
  PARE_CHECK(!prompt.empty(), "the prompt has no tokens");
  at::Generator rng = at::make_generator<at::CPUGeneratorImpl>(opts.seed);
  GenerateStats stats;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<at::Tensor> inputs = {at::tensor(prompt, at::kLong).unsqueeze(0)};
  for (int64_t i = 0; i < 2 * layers_; ++i) inputs.push_back(at::zeros(cache_shape_, cache_type_));
  at::NoGradGuard no_grad;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < opts.max_new_tokens; ++step) {
    std::vector<at::Tensor> out = module_.forward(inputs);
    const int64_t next = choose(out[0][0][-1], opts, rng);
    if (step == 0) {
      stats.prefill_seconds = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
    }
    ++stats.new_tokens;
    const bool stop = !on_token(next) ||
                      std::find(opts.stop.begin(), opts.stop.end(), next) != opts.stop.end();
    if (stop) break;
    inputs[0] = at::full({1, 1}, next, at::kLong);
    for (size_t i = 1; i < out.size(); ++i) inputs[i] = out[i];
  }
  if (stats.new_tokens > 1) stats.decode_seconds = seconds_since(t0);
  return stats;
}

at::Tensor Generator::generate_batch(const at::Tensor& prompts, const SamplingOptions& opts,
                                     std::vector<at::Generator>& rngs) {
  opts.validate();
  PARE_CHECK(prompts.dim() == 2 && prompts.size(1) > 0 && static_cast<int64_t>(rngs.size()) == prompts.size(0),
             "generate_batch takes prompts [B, P] with P > 0 and one generator a row; got ", prompts.sizes(), " and ",
             rngs.size());
  const int64_t b = prompts.size(0);
  std::vector<int64_t> shape = cache_shape_;
  shape[0] = b;
  std::vector<at::Tensor> inputs = {prompts.to(at::kLong)};
  for (int64_t i = 0; i < 2 * layers_; ++i) inputs.push_back(at::zeros(shape, cache_type_));
  at::Tensor out_ids = at::empty({b, opts.max_new_tokens}, at::kLong);
  at::NoGradGuard no_grad;
  for (int64_t step = 0; step < opts.max_new_tokens; ++step) {
    std::vector<at::Tensor> out = module_.forward(inputs);
    const at::Tensor last = out[0].select(1, out[0].size(1) - 1);  // [B, vocab]
    if (opts.temperature == 0) {  // greedy: one argmax over the batch
      out_ids.select(1, step).copy_(last.to(at::kFloat).argmax(-1));
    } else {
      int64_t* ids = out_ids.data_ptr<int64_t>();
      for (int64_t r = 0; r < b; ++r) ids[r * opts.max_new_tokens + step] = choose(last[r], opts, rngs[r]);
    }
    inputs[0] = out_ids.narrow(1, step, 1).clone();
    for (size_t i = 1; i < out.size(); ++i) inputs[i] = out[i];
  }
  return out_ids;
}

core::TensorDataset continue_windows(Generator& gen, const core::TensorDataset& windows, int64_t prompt,
                                     SamplingOptions opts, int64_t batch,
                                     const std::function<void(int64_t)>& progress) {
  PARE_CHECK(windows.x.dim() == 2 && windows.size() > 0, "no windows of tokens to continue");
  const int64_t n = windows.size(), seq = windows.x.size(1);
  PARE_CHECK_OPTION(prompt >= 1 && prompt < seq, "max_new_tokens", "must leave a prompt of 1 to ", seq - 1,
                    " tokens of the ", seq, " a window holds; the prompt would be ", prompt);
  PARE_CHECK(batch >= 1, "continue_windows decodes at least one window at a time, not ", batch);
  opts.max_new_tokens = seq - prompt + 1;
  at::Tensor x = at::empty({n, seq}, at::kLong), y = at::full({n, seq}, -100, at::kLong);
  const at::Tensor src = windows.x.to(at::kLong).contiguous();
  for (int64_t w0 = 0; w0 < n; w0 += batch) {
    const int64_t b = std::min(batch, n - w0);
    std::vector<at::Generator> rngs;
    for (int64_t r = 0; r < b; ++r)
      rngs.push_back(at::make_generator<at::CPUGeneratorImpl>(opts.seed + static_cast<uint64_t>(w0 + r)));
    const at::Tensor made =
        gen.generate_batch(src.narrow(0, w0, b).narrow(1, 0, prompt), opts, rngs).to(at::kLong).contiguous();
    for (int64_t r = 0; r < b; ++r) {
      const int64_t* row = src.data_ptr<int64_t>() + (w0 + r) * seq;
      const int64_t* next = made.data_ptr<int64_t>() + r * made.size(1);
      std::vector<int64_t> full(row, row + prompt);
      for (int64_t i = 0; i < made.size(1); ++i) {
        full.push_back(next[i]);
        if (std::find(opts.stop.begin(), opts.stop.end(), full.back()) != opts.stop.end()) break;
      }
      const int64_t len = static_cast<int64_t>(full.size());  // seq + 1 unless a stop token came first
      int64_t* xr = x.data_ptr<int64_t>() + (w0 + r) * seq;
      int64_t* yr = y.data_ptr<int64_t>() + (w0 + r) * seq;
      for (int64_t i = 0; i < seq; ++i) xr[i] = full[std::min(i, len - 1)];
      for (int64_t i = prompt - 1; i + 1 < len && i < seq; ++i) yr[i] = full[i + 1];
    }
    if (progress) progress(w0 + b);
  }
  return {x, y, windows.name + " continued"};
}

std::function<std::pair<at::Tensor, at::Tensor>(const core::Module&, const at::Tensor&)> student_windows(
    const LmModel& m, int64_t prompt, SamplingOptions opts) {
  LmModel shape = m;  // the config, family and tokenizer; the weights come from the Module each call
  shape.graph.initializers.clear();
  auto calls = std::make_shared<uint64_t>(0);
  return [shape = std::move(shape), prompt, opts, calls](const core::Module& student, const at::Tensor& x) {
    at::NoGradGuard no_grad;
    LmModel now = shape;
    now.graph = student.to_graph();
    BuildOptions kv;
    kv.kv_cache = true;
    Generator gen(rebuild(now, kv, "the student").graph);
    SamplingOptions o = opts;
    o.seed += (*calls)++ * static_cast<uint64_t>(x.size(0));
    const at::Tensor cpu = x.to(at::kCPU);
    const core::TensorDataset made = continue_windows(gen, {cpu, cpu, "the student's windows"}, prompt, o, x.size(0));
    return std::make_pair(made.x.to(x.device()), made.y.to(x.device()));
  };
}

}  // namespace pare::lm
