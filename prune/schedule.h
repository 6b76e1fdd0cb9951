// Pruning schedules and the object that keeps masks applied while training continues. prune/
// does not know the trainer: cli/ hooks MaskedPruning into train::Trainer's on_step callback.
//
//   prune::MaskedPruning pruning(student, targets, prune::MaskOptions().global(true),
//                                prune::SparsitySchedule::gradual(0.9, 0.0, 0, 20, 100));
//   pruning.start();                                                  // sparsity at step 0
//   trainer.on_step([&](int64_t step, double) { pruning.after_step(step); });
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prune/masks.h"

namespace pare::prune {

/// Target sparsity as a function of the optimizer step.
class SparsitySchedule {
 public:
  /// The final sparsity from step 0 on.
  static SparsitySchedule one_shot(double final_sparsity);
  /// `iterations` equal increments, at steps begin, begin + (end-begin)/iterations, ...
  static SparsitySchedule iterative(double final_sparsity, int64_t iterations, int64_t begin, int64_t end);
  /// Zhu & Gupta (2017): s_t = s_f + (s_i - s_f) (1 - (t - t0) / (n dt))^3, updated every dt
  /// steps from t0 to t0 + n dt.
  static SparsitySchedule gradual(double final_sparsity, double initial_sparsity, int64_t t0,
                                  int64_t n, int64_t dt);
  /// A schedule named by `kind` ("oneshot", "iterative" or "gradual") over a run of
  /// `total_steps` optimizer steps that reaches `final_sparsity` after the fraction `end` of them
  /// (in (0, 1]): iterative in `iterations` equal increments; gradual updated every `every` steps
  /// (0: 20 updates). Throws InputError naming the option that is out of range.
  static SparsitySchedule over_training(const std::string& kind, double final_sparsity, int64_t total_steps,
                                        double end = 0.75, int64_t every = 0, int64_t iterations = 4);

  /// Sparsity the masks should have after `step` optimizer steps.
  double at(int64_t step) const;
  /// Whether masks are recomputed after `step` (step 0: before training).
  bool updates_at(int64_t step) const;
  /// Last step at which the masks change.
  int64_t last_update() const;
  /// "gradual 0 -> 0.9 over steps 0..2000 every 100"
  std::string describe() const;

 private:
  enum class Kind { kOneShot, kIterative, kGradual };
  SparsitySchedule(Kind kind, double final_sparsity, double initial_sparsity, int64_t begin, int64_t end,
                   int64_t every, int64_t n);

  Kind kind_ = Kind::kOneShot;
  double final_ = 0, initial_ = 0;
  int64_t begin_ = 0, end_ = 0, every_ = 1, n_ = 1;
};

/// Masks that follow a schedule and stay applied: after each optimizer step the pruned weights
/// are set back to zero (an optimizer with momentum would otherwise revive them). A weight once
/// pruned stays pruned: masks are chosen by magnitude and pruned weights are zero.
class MaskedPruning {
 public:
  /// `opts` chooses the method (magnitude per layer or global, or N:M); its sparsity is replaced
  /// by the schedule's. The module must outlive this object.
  MaskedPruning(core::Module& model, std::vector<WeightTarget> targets, MaskOptions opts,
                SparsitySchedule schedule);

  const SparsitySchedule& schedule() const { return schedule_; }
  /// Prunes to the schedule's sparsity at step 0 (nothing for a gradual schedule starting at 0).
  void start();
  /// Call after every optimizer step: recomputes the masks when the schedule says so, then
  /// re-applies them.
  void after_step(int64_t step);
  /// For a run resumed from a checkpoint: the weights the trainer restores already carry the
  /// masks, so the next before_step() takes the masks from their zeros (as an uninterrupted run
  /// has them at that step).
  void resume_from_weights() { resync_ = true; }
  /// Call after backward, before the optimizer step (Trainer::on_after_backward).
  void before_step();

  const Masks& masks() const { return masks_; }
  double target() const { return target_; }
  /// Layers N:M left out (input dim not a multiple of m).
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  void update(double sparsity);

  core::Module& model_;
  std::vector<WeightTarget> targets_;
  MaskOptions opts_;
  SparsitySchedule schedule_;
  Masks masks_;
  double target_ = 0;
  bool resync_ = false;
  std::vector<std::string> skipped_;
};

}  // namespace pare::prune
