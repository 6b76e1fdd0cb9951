#include "lm/eval.h"

#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cmath>

#include "core/error.h"

namespace pare::lm {

double PerplexityResult::perplexity() const { return tokens > 0 ? std::exp(nll / static_cast<double>(tokens)) : 0; }

double PerplexityResult::tokens_per_second() const {
  return seconds > 0 ? static_cast<double>(windows * seq_len) / seconds : 0;
}

std::vector<int64_t> token_stream(const Tokenizer& tok, const std::vector<std::string>& docs) {
  std::string text;
  for (const std::string& d : docs) text += (text.empty() ? "" : "\n\n") + d;
  const std::vector<int32_t> ids = tok.encode(text, /*add_special_tokens=*/true);
  return {ids.begin(), ids.end()};
}

PerplexityResult perplexity(core::Module& model, const std::vector<int64_t>& stream, const PerplexityOptions& opts) {
  PARE_CHECK_OPTION(opts.seq_len >= 2, "seq_len", "must be at least 2, got ", opts.seq_len);
  PARE_CHECK_OPTION(opts.batch_size >= 1, "batch_size", "must be at least 1, got ", opts.batch_size);
  PARE_CHECK(stream.size() >= 2, "the text has ", stream.size(), " token(s); perplexity needs at least 2");
  const int64_t n = static_cast<int64_t>(stream.size());
  // Full windows; a shorter last one when the stream does not fill one window.
  const int64_t seq = std::min(opts.seq_len, n);
  int64_t windows = n / seq;
  if (opts.max_windows > 0) windows = std::min(windows, opts.max_windows);
  const at::Tensor ids = at::tensor(stream, at::kLong).slice(0, 0, windows * seq).view({windows, seq});
  PerplexityResult r;
  r.windows = windows;
  r.seq_len = seq;
  at::NoGradGuard no_grad;
  model.eval();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t w = 0; w < windows; w += opts.batch_size) {
    const at::Tensor x = ids.slice(0, w, std::min(windows, w + opts.batch_size));
    const at::Tensor logits = model.forward({x})[0].to(at::kFloat);
    const at::Tensor logp = logits.slice(1, 0, seq - 1).log_softmax(-1);
    const at::Tensor target = x.slice(1, 1, seq).unsqueeze(-1);
    r.nll -= logp.gather(-1, target).sum().item<double>();
    r.tokens += target.numel();
    if (opts.progress) opts.progress(std::min(windows, w + opts.batch_size), windows);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace pare::lm
