// Structured (channel) pruning: removes whole Conv output channels, Gemm/MatMul hidden units and
// attention heads, and every slice of every tensor that depends on them, so the result is an
// ordinary, smaller ONNX-shaped graph. Which dims shrink together comes from the channel analysis
// (prune/facets.h); which channels go, from an importance criterion.
//
//   auto r = prune::prune_channels(g, prune::ChannelOptions().sparsity(0.5)
//                                         .importance(prune::Importance::kL1));
//   core::save_onnx(r.graph, "pruned.onnx");
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/data.h"
#include "core/graph.h"

namespace pare::core {
class Module;
}

namespace pare::prune {

/// How channels are ranked (the lowest go first).
enum class Importance {
  kL1,       ///< L1 norm of the weights that compute the channel
  kL2,       ///< L2 norm of the same
  kBnScale,  ///< |gamma| of the BatchNorm on the channel (L1 for groups without BatchNorm)
  kTaylor,   ///< first-order Taylor: (sum of gradient x weight over the channel)^2, from data
};
/// "l1", "l2", "bn-scale", "taylor"; throws InputError otherwise.
Importance parse_importance(const std::string& s);
const char* importance_name(Importance i);

/// Weight name -> gradient x weight summed over batches (for Importance::kTaylor).
using TaylorScores = std::map<std::string, at::Tensor>;

struct ChannelOptions {
  /// Fraction of each prunable group's channels to remove, in [0, 1].
  ChannelOptions& sparsity(double v) { sparsity_ = v; return *this; }
  ChannelOptions& importance(Importance v) { importance_ = v; return *this; }
  /// Nodes whose output channels are kept (and every group they share).
  ChannelOptions& exclude(std::vector<std::string> v) { exclude_ = std::move(v); return *this; }
  /// Gradient x weight products for kTaylor (see taylor_scores).
  ChannelOptions& taylor(const TaylorScores* v) { taylor_ = v; return *this; }

  double sparsity_ = 0.5;
  Importance importance_ = Importance::kL1;
  std::vector<std::string> exclude_;
  const TaylorScores* taylor_ = nullptr;
};

/// What happened to one group of dims that shrink together.
struct GroupResult {
  std::vector<std::string> sources;  ///< nodes that create its channels
  int64_t before = 0, after = 0;     ///< channels
  std::vector<int64_t> kept;         ///< kept channel indices, ascending
  bool blocked = false;
  std::string reason;                ///< why it was not pruned
  std::string criterion;             ///< importance actually used
};

struct ChannelPruneResult {
  core::Graph graph;
  std::vector<GroupResult> groups;
  /// Shared constants (one tensor read by several nodes, directly or through Identity) that
  /// pruning had to split because their readers kept different channels.
  std::vector<std::string> notes;
  /// One line per group, then the notes.
  std::string report() const;
};

/// Prunes channels of every unblocked group of `g`. Throws InputError when the sparsity is
/// outside [0, 1], when an excluded name is no node of `g`, when no group can be pruned, or when
/// a group would lose every channel (naming it); Error naming an op without a channel facet.
ChannelPruneResult prune_channels(const core::Graph& g, const ChannelOptions& opts);

/// Sums gradient x weight of every parameter of `m` over `batches` calls of `loss` (each returns
/// the loss of one batch, computed with m in training or eval mode as the caller chooses).
TaylorScores taylor_scores(core::Module& m, const std::function<at::Tensor()>& loss, int64_t batches);
/// The same with the cross-entropy loss of `m` (in training mode) on `batches` consecutive
/// batches of `batch_size` rows of the labelled `data`, wrapping around. Throws InputError when
/// `batches` < 1 or `data` has no labels.
TaylorScores taylor_scores(core::Module& m, const core::TensorDataset& data, int64_t batch_size, int64_t batches);

}  // namespace pare::prune
