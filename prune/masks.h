// Unstructured and N:M pruning: masks over the weights of Conv, ConvTranspose, Gemm and MatMul.
// Which input of an op is its prunable weight, and which weight axis runs along the op's input
// (reduction) dimension, is the op's "prune.weight" facet (prune/facets.h), not a list here.
//
//   auto targets = prune::find_targets(g, {"fc3"});                  // every weight but fc3's
//   auto masks = prune::compute_masks(g, targets, prune::MaskOptions().sparsity(0.9).global(true));
//   prune::apply_masks(g, masks);                                    // zeroes the pruned weights
//
// A mask is a float tensor of the weight's shape holding 0 (pruned) or 1 (kept). Masks stay
// applied while training continues when a MaskedPruning (prune/schedule.h) re-applies them after
// every optimizer step.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/graph.h"

namespace pare::core {
class Module;
}

namespace pare::prune {

/// One prunable weight: the node that reads it, its initializer and its input (reduction) axis.
struct WeightTarget {
  std::string node, op, weight;
  int64_t in_axis = 1;
};

/// Weight initializer name -> mask (1 kept, 0 pruned), same shape as the weight.
using Masks = std::map<std::string, at::Tensor>;

/// How masks are chosen.
enum class MaskMethod { kMagnitude, kNM };

struct MaskOptions {
  MaskOptions& method(MaskMethod v) { method_ = v; return *this; }
  /// Fraction of weights set to zero, in [0, 1] (magnitude only).
  MaskOptions& sparsity(double v) { sparsity_ = v; return *this; }
  /// One magnitude threshold over all targets (true) or the same fraction in each layer (false).
  MaskOptions& global(bool v) { global_ = v; return *this; }
  /// N:M: at most `n` non-zeros in every group of `m` consecutive weights along the input axis.
  MaskOptions& n(int64_t v) { n_ = v; return *this; }
  MaskOptions& m(int64_t v) { m_ = v; return *this; }

  MaskMethod method_ = MaskMethod::kMagnitude;
  double sparsity_ = 0.5;
  bool global_ = false;
  int64_t n_ = 2, m_ = 4;

  /// Throws InputError naming the option when a value is out of range (sparsity outside [0, 1],
  /// n < 0, m < 1, n > m).
  void validate() const;
};

/// The prunable weights of `g` (float initializers in a node's "prune.weight" role), in graph
/// order, leaving out the nodes named in `exclude`. Throws InputError naming an excluded name
/// that is no node of `g`, or a node that has no prunable weight, with the names that are.
std::vector<WeightTarget> find_targets(const core::Graph& g, const std::vector<std::string>& exclude = {});

/// Looks a weight up by initializer name (a Graph's initializers or a Module's parameters).
using WeightLookup = std::function<at::Tensor(const std::string& weight)>;
WeightLookup lookup_in(const core::Graph& g);
WeightLookup lookup_in(const core::Module& m);

/// Masks for `targets` by weight magnitude (the smallest |w| go first; exactly
/// floor(sparsity * count) weights per layer, or over all targets when global) or by N:M.
/// N:M leaves out (and names in `skipped`, when given) layers whose input axis is not a multiple
/// of m. Throws InputError for invalid options.
Masks compute_masks(const WeightLookup& weights, const std::vector<WeightTarget>& targets,
                    const MaskOptions& opts, std::vector<std::string>* skipped = nullptr);

/// Multiplies each weight by its mask, in place (no gradient is recorded).
void apply_masks(core::Graph& g, const Masks& masks);
void apply_masks(core::Module& m, const Masks& masks);

/// Zeros / elements of each target weight and in total.
struct SparsityReport {
  struct Layer {
    std::string node, weight;
    int64_t elements = 0, zeros = 0;
    double sparsity() const { return elements ? double(zeros) / elements : 0; }
  };
  std::vector<Layer> layers;
  int64_t elements = 0, zeros = 0;
  double sparsity() const { return elements ? double(zeros) / elements : 0; }
};
SparsityReport measure_sparsity(const WeightLookup& weights, const std::vector<WeightTarget>& targets);

/// True when every group of `m` consecutive weights along `in_axis` of `w` holds at most `n`
/// non-zeros (the N:M pattern). A trailing partial group counts as a group.
bool satisfies_nm(const at::Tensor& w, int64_t in_axis, int64_t n, int64_t m);

}  // namespace pare::prune
