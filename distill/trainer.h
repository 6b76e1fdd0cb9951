// distill::Trainer: the training loop every pare job runs (supervised training now; the
// distillation losses, checkpoints and distributed hooks plug into the same loop).
//
//   core::Module student(core::load_model("mlp:784-300-100-10", 1));
//   distill::Trainer trainer(student, distill::TrainerOptions().epochs(5).lr(1e-3).seed(1));
//   auto history = trainer.fit(train_set, &test_set);
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/data.h"
#include "core/module.h"

namespace pare::distill {

struct TrainerOptions {
  TrainerOptions& epochs(int64_t v) { epochs_ = v; return *this; }
  TrainerOptions& batch_size(int64_t v) { batch_size_ = v; return *this; }
  TrainerOptions& lr(double v) { lr_ = v; return *this; }
  /// "adam", "adamw" or "sgd".
  TrainerOptions& optimizer(std::string v) { optimizer_ = std::move(v); return *this; }
  TrainerOptions& momentum(double v) { momentum_ = v; return *this; }
  TrainerOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  /// Cosine decay of the learning rate to 0 over the run (after `warmup_steps` of linear warmup).
  TrainerOptions& cosine(bool v) { cosine_ = v; return *this; }
  TrainerOptions& warmup_steps(int64_t v) { warmup_steps_ = v; return *this; }
  TrainerOptions& seed(uint64_t v) { seed_ = v; return *this; }
  /// Stop after this many optimizer steps in total (0: no limit); used by benchmarks.
  TrainerOptions& max_steps(int64_t v) { max_steps_ = v; return *this; }
  /// JSON lines written (atomically, rewritten each epoch) to this path; "" for none.
  TrainerOptions& metrics_path(std::string v) { metrics_path_ = std::move(v); return *this; }
  /// Progress bar on stderr (only drawn when stderr is a terminal; otherwise a line per epoch).
  TrainerOptions& progress(bool v) { progress_ = v; return *this; }
  TrainerOptions& eval_batch_size(int64_t v) { eval_batch_size_ = v; return *this; }

  int64_t epochs_ = 1, batch_size_ = 64, warmup_steps_ = 0, max_steps_ = 0, eval_batch_size_ = 512;
  double lr_ = 1e-3, momentum_ = 0.9, weight_decay_ = 0.0;
  std::string optimizer_ = "adam", metrics_path_;
  bool cosine_ = false, progress_ = true;
  uint64_t seed_ = 0;

  /// Throws InputError naming the option when a value is out of range.
  void validate() const;
};

/// What one epoch measured.
struct EpochStats {
  int64_t epoch = 0, steps = 0, samples = 0;
  double train_loss = 0, train_accuracy = 0, seconds = 0, samples_per_s = 0;
  double val_loss = -1, val_accuracy = -1;  ///< -1 when there was no validation set
};

/// Accuracy and mean cross-entropy of a classifier over a dataset.
struct EvalResult {
  double accuracy = 0, loss = 0, seconds = 0, samples_per_s = 0;
  int64_t samples = 0;
};

/// Evaluates `model` (in eval mode, no grad) on `ds`; restores its train/eval mode after.
/// Throws InputError when the model's output is not [N, classes] or labels are out of range.
EvalResult evaluate(core::Module& model, const core::TensorDataset& ds, int64_t batch_size = 512);

/// Runs the training loop. Callbacks run after each optimizer step and each epoch.
class Trainer {
 public:
  using StepCallback = std::function<void(int64_t step, double loss)>;
  using EpochCallback = std::function<void(const EpochStats&)>;

  Trainer(core::Module& model, TrainerOptions opts);

  void on_step(StepCallback cb) { step_cbs_.push_back(std::move(cb)); }
  void on_epoch(EpochCallback cb) { epoch_cbs_.push_back(std::move(cb)); }

  /// Trains on `train`, evaluating on `val` after each epoch when given. Returns one entry
  /// per epoch. Throws Error when the loss becomes NaN or Inf (naming the step).
  std::vector<EpochStats> fit(const core::TensorDataset& train, const core::TensorDataset* val);

 private:
  core::Module& model_;
  TrainerOptions opts_;
  std::vector<StepCallback> step_cbs_;
  std::vector<EpochCallback> epoch_cbs_;
};

}  // namespace pare::distill
