// Perplexity of a language model on a token stream, as Hugging Face's perplexity guide computes it
// with non-overlapping windows: the stream is cut into windows of `seq_len` tokens, each window
// predicts its tokens 1..seq_len-1 from those before, and the perplexity is exp(mean NLL).
//
//   lm::PerplexityResult r = lm::perplexity(module, ids, lm::PerplexityOptions{});
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/module.h"
#include "lm/tokenizer.h"

namespace pare::lm {

struct PerplexityOptions {
  int64_t seq_len = 256;     ///< window length (at most the model's context)
  int64_t batch_size = 1;    ///< windows per forward
  int64_t max_windows = 0;   ///< 0: every window
  /// Called after each forward with the windows done and their total.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct PerplexityResult {
  int64_t tokens = 0;        ///< predicted tokens
  double nll = 0;            ///< their summed negative log-likelihood (nats)
  double seconds = 0;
  double perplexity() const;
  double tokens_per_second() const;  ///< tokens through the model (windows x seq_len) per second
  int64_t windows = 0;
  int64_t seq_len = 0;
};

/// The documents as one token stream, as Hugging Face's perplexity guide makes it: joined by a
/// blank line, encoded once with the tokenizer's special tokens (its BOS, if it adds one).
std::vector<int64_t> token_stream(const Tokenizer& tok, const std::vector<std::string>& docs);

/// `model` maps input_ids [batch, seq] to logits [batch, seq, vocab]. Throws InputError when the
/// stream is shorter than two tokens.
PerplexityResult perplexity(core::Module& model, const std::vector<int64_t>& stream, const PerplexityOptions& opts);

}  // namespace pare::lm
