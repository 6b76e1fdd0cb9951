// Decoding with a KV cache: the prompt runs once (prefill), then one token per step, each step
// feeding back the layers' present keys and values as the next step's past. Greedy at temperature
// 0; otherwise sampling with temperature, top-k and top-p as transformers' generate() applies them.
//
//   lm::LmModel m = lm::load_lm("hf:ckpt", lm::BuildOptions{true});
//   lm::Generator gen(m.graph);
//   gen.generate(prompt_ids, lm::SamplingOptions{}, [](int64_t id) { print(id); return true; });
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/data.h"
#include "core/graph.h"
#include "core/module.h"
#include "lm/model.h"

namespace pare::lm {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double temperature = 1.0;   ///< 0: greedy
  int64_t top_k = 0;          ///< 0: no top-k filter
  double top_p = 1.0;         ///< 1: no nucleus filter
  uint64_t seed = 0;
  std::vector<int64_t> stop;  ///< token ids that end the generation (EOS); the stop token is reported

  /// Throws InputError naming the option when a value is out of range.
  void validate() const;
};

struct GenerateStats {
  int64_t prompt_tokens = 0, new_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;  ///< decode: every step after the first token
  double decode_tokens_per_second() const;
};

class Generator {
 public:
  /// `kv_graph` is a language model built with BuildOptions::kv_cache.
  explicit Generator(core::Graph kv_graph);

  /// Decodes after `prompt` (batch 1). `on_token` gets each new token as it is chosen and may
  /// return false to stop.
  GenerateStats generate(const std::vector<int64_t>& prompt, const SamplingOptions& opts,
                         const std::function<bool(int64_t)>& on_token);

  /// Decodes opts.max_new_tokens after each row of `prompts` (int64 [B, P], all of one length, so
  /// they share positions and need no padding), row b's draws from `rngs[b]`; stop tokens do not end
  /// a row here (the caller cuts after them). Returns the new tokens, int64 [B, max_new_tokens].
  at::Tensor generate_batch(const at::Tensor& prompts, const SamplingOptions& opts, std::vector<at::Generator>& rngs);

  /// The next-token choice on logits [vocab]: argmax at temperature 0, else a draw after the
  /// temperature, top-k and top-p filters.
  static int64_t choose(const at::Tensor& logits, const SamplingOptions& opts, at::Generator& rng);

 private:
  core::Module module_;
  int64_t layers_ = 0;
  std::vector<int64_t> cache_shape_;  ///< [1, kv_heads, 0, head_dim]
  at::ScalarType cache_type_ = at::kFloat;
};

/// Sequence-level KD's data (Kim and Rush 2016), and on-policy distillation's: each window of
/// `windows` (x [N, S]) cut to its first `prompt` tokens, and continued by `gen` with opts
/// (opts.max_new_tokens is set here to S - prompt + 1; window w's draws are seeded opts.seed + w,
/// so they do not depend on `batch`, the windows decoded together), S tokens in all: x [N, S] and y
/// its next tokens, -100 where the next token is the prompt's or follows a stop token (x there
/// repeats the stop token). `progress` gets the windows done. Throws InputError for a prompt
/// outside [1, S - 1].
core::TensorDataset continue_windows(Generator& gen, const core::TensorDataset& windows, int64_t prompt,
                                     SamplingOptions opts, int64_t batch = 16,
                                     const std::function<void(int64_t)>& progress = {});

/// On-policy distillation's windows (GKD, Agarwal et al. 2024; distill::LmDistillOptions::
/// student_windows): a function of the student as it is now (a Module of `m`'s graph, training)
/// and windows x [B, S] (any device) that continues each window's first `prompt` tokens with the
/// student's current weights (a KV-cache build of `m`'s config with them, continue_windows with
/// `opts`, the seed moving on by B each call) and returns {x, y} on x's device, y -100 before the
/// continuation. Throws InputError for a prompt outside [1, S - 1].
std::function<std::pair<at::Tensor, at::Tensor>(const core::Module&, const at::Tensor&)> student_windows(
    const LmModel& m, int64_t prompt, SamplingOptions opts);

}  // namespace pare::lm
