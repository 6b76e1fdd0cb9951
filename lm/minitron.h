// Minitron-style structured pruning of a language model (Muralidharan et al. 2024, "Compact
// Language Models via Pruning and Knowledge Distillation"): the importance of each attention head,
// MLP neuron, hidden channel and decoder layer from activations on calibration text, then a
// physically smaller model of the same family that keeps the most important of each.
//
//   lm::LmModel m = lm::load_lm("hf:teacher");
//   lm::Importance imp = lm::importance(m, windows);                 // one pass, no gradients
//   lm::Keep keep = lm::choose(m.config, imp, {3, 192, 3, 512}, "hf:teacher");  // layers, hidden, heads, MLP
//   lm::LmModel student = lm::slice(m, keep, "hf:teacher");          // lm::save_hf writes it
//
// Importance, aggregated as the paper's best setting (mean over the sequence, L2 norm over the
// windows): a head's by the L2 norm of its attention output per token (before o_proj); a neuron's
// by |its activation| (down_proj's input); a hidden channel's by |its value| after every norm of the
// model (the inputs of q/k/v, of the MLP and of the head), summed; a layer's as 1 - the mean cosine
// similarity of its input and output (Block Importance; Men et al. 2024, ShortGPT). Heads go in
// query groups: a group's importance is the sum of its query heads', and it is kept or removed with
// its KV head. Every layer keeps the same number of heads and neurons (its own most important ones),
// as the checkpoint's config can only say one number; head_dim does not change.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lm/model.h"

namespace pare::lm {

/// Each unit's importance; larger is more important.
struct Importance {
  std::vector<double> layers;       ///< 1 - mean cos(layer input, layer output), per layer
  std::vector<at::Tensor> heads;    ///< per layer, per query head [heads] (double)
  std::vector<at::Tensor> neurons;  ///< per layer, per MLP neuron [intermediate] (double)
  at::Tensor hidden;                ///< per hidden channel [hidden] (double)
  int64_t tokens = 0;               ///< calibration tokens the statistics come from
};

/// One pass of `m` over `windows` (int64 [N, seq]), a window at a time. `progress(done, total)`
/// after each window.
Importance importance(const LmModel& m, const at::Tensor& windows,
                      const std::function<void(int64_t, int64_t)>& progress = {});

/// The sizes to prune to; 0 keeps an axis whole.
struct PruneTargets {
  int64_t layers = 0, hidden = 0, heads = 0, intermediate = 0;

  /// Throws InputError about the target (Error::about) when it is larger than the model's, heads
  /// are not whole query groups, or the family cannot say the result in its config (GPT-2's fused
  /// c_attn and head size tied to the hidden size: only layers and MLP width).
  void validate(const LmConfig& c, const std::string& what) const;
};

/// What a smaller model keeps, as ascending indices into `m`'s; an empty list keeps everything.
struct Keep {
  std::vector<int64_t> layers;
  std::vector<std::vector<int64_t>> kv_groups;  ///< per kept layer (in `layers`' order): the KV heads kept
  std::vector<std::vector<int64_t>> neurons;    ///< per kept layer: the MLP neurons kept
  std::vector<int64_t> hidden;
};

/// The most important units up to `t` (validated first).
Keep choose(const LmConfig& c, const Importance& imp, const PruneTargets& t, const std::string& what);

/// `m` with only what `k` keeps, rebuilt with `opts` (the tokenizer shared): a physically smaller
/// model of the same family. Throws InputError naming `what` and the index for an index `m` has not.
LmModel slice(const LmModel& m, const Keep& k, const std::string& what, const BuildOptions& opts = {});

/// The importance and what was kept, as `pare prune --json` prints it.
nlohmann::json to_json(const LmConfig& before, const Importance& imp, const Keep& k);

}  // namespace pare::lm
