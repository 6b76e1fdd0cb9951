// Pruning with recovery: prune/ decides what goes (weights by magnitude, N:M, or whole channels),
// train/ and distill/ win the accuracy back. Masked pruning follows its schedule inside the
// Trainer's steps; with teachers, recovery is distillation. `pare prune` is this call.
//
//   compress::PruneOptions opts;
//   opts.method = "channel", opts.sparsity = 0.5, opts.trainer.epochs(2);
//   opts.teachers.specs = {"teacher.onnx"};                      // recover by distillation
//   compress::PruneResult r = compress::prune_with_recovery(model, opts, &train_set, &val_set);
//   core::save_onnx(r.graph, "pruned.onnx");
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/data.h"
#include "core/graph.h"
#include "distill/distiller.h"
#include "prune/structured.h"
#include "train/trainer.h"

namespace pare::compress {

struct PruneOptions {
  std::string method = "magnitude";   ///< magnitude (unstructured), nm (N:M) or channel
  std::string schedule = "oneshot";   ///< oneshot, iterative or gradual (magnitude only past oneshot)
  double sparsity = 0.5;              ///< fraction of the weights, or of each channel group, removed
  bool global = false;                ///< magnitude: one threshold over all layers
  int64_t n = 2, m = 4;               ///< nm: n non-zeros in every m along the input dimension
  std::vector<std::string> exclude;   ///< nodes left unpruned
  prune::Importance importance = prune::Importance::kL1;  ///< channel: how channels are ranked
  int64_t taylor_batches = 8;         ///< channel, taylor: training batches the gradients are summed over
  double prune_end = 0.75;            ///< iterative/gradual: fraction of the steps by which `sparsity` is reached
  int64_t prune_every = 0;            ///< gradual: steps between mask updates (0: 20 updates)
  int64_t iterations = 4;             ///< iterative: equal sparsity increments
  train::TrainerOptions trainer = train::TrainerOptions().epochs(0);  ///< epochs 0: no recovery
  distill::TeacherSource teachers;    ///< recovery distils from these when it names any
  /// Progress lines (the layers pruned, the channel groups, the sparsity after each epoch).
  std::function<void(const std::string&)> log;

  /// Throws InputError naming the options whose values or combination cannot run; `have_data`:
  /// whether a training set is given.
  void validate(bool have_data) const;
};

/// Sparsity and validation accuracy after one epoch of recovery (masked pruning).
struct CurvePoint {
  int64_t epoch = 0;
  double sparsity = 0, val_accuracy = -1;
};

struct PruneResult {
  core::Graph graph;            ///< the pruned (and recovered) model, "pare.pruned" in its metadata
  double accuracy_before = -1;  ///< on `val`, -1 without one
  double accuracy_pruned = -1;  ///< right after a one-shot prune, before recovery (when recovering)
  double accuracy_after = -1;
  std::vector<CurvePoint> curve;
};

/// Prunes `model` as `opts` says and, for epochs > 0, trains it on `train` (masks kept applied).
/// `train` may be null when no training is asked for (epochs 0, importance other than taylor).
PruneResult prune_with_recovery(const core::Graph& model, const PruneOptions& opts, const core::TensorDataset* train,
                                const core::TensorDataset* val);

/// The accuracy of `g` on `val` (batches of `batch`), -1 when `val` is null.
double accuracy(const core::Graph& g, const core::TensorDataset* val, int64_t batch);

}  // namespace pare::compress
