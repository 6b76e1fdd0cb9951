#include "lm/generate.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>

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

}  // namespace pare::lm
