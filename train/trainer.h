// train::Trainer: the training loop every pare job runs. Supervised training uses the default
// loss (cross entropy); distillation hands in its own loss through set_loss(). Pruning and QAT
// schedules plug in through on_step / on_epoch callbacks, the distributed layer through
// on_after_backward (gradient sync), a sampler and writer(false) on ranks that must not write.
// A language model (logits [N, T, vocab] for labels [N, T], the next tokens) trains and evaluates
// token by token: the loss is the next-token cross entropy, and accuracy, samples and samples/s
// count tokens.
//
//   core::Module student(core::load_model("mlp:784-300-100-10", 1));
//   train::Trainer trainer(student, train::TrainerOptions().epochs(5).lr(1e-3).seed(1)
//                                         .checkpoint("run.ckpt"));
//   auto history = trainer.fit(train_set, &test_set);
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/data.h"
#include "core/device.h"
#include "core/module.h"

namespace torch::optim {
class Optimizer;
}
namespace pare::dist {
class ProcessGroup;
}

namespace pare::train {

struct TrainerOptions {
  TrainerOptions& epochs(int64_t v) { epochs_ = v; return *this; }
  TrainerOptions& batch_size(int64_t v) { batch_size_ = v; return *this; }
  TrainerOptions& lr(double v) { lr_ = v; return *this; }
  /// "adam", "adamw" or "sgd".
  TrainerOptions& optimizer(std::string v) { optimizer_ = std::move(v); return *this; }
  TrainerOptions& momentum(double v) { momentum_ = v; return *this; }
  TrainerOptions& nesterov(bool v) { nesterov_ = v; return *this; }
  /// Weight decay, applied to weight matrices and kernels only (never to biases and norms).
  TrainerOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  /// Learning-rate schedule: "constant", "step" (times `gamma` every `step_epochs` epochs) or
  /// "cosine" (to 0 over the run); `warmup_steps` of linear warmup come first.
  TrainerOptions& schedule(std::string v) { schedule_ = std::move(v); return *this; }
  TrainerOptions& step_epochs(int64_t v) { step_epochs_ = v; return *this; }
  TrainerOptions& gamma(double v) { gamma_ = v; return *this; }
  TrainerOptions& warmup_steps(int64_t v) { warmup_steps_ = v; return *this; }
  /// Clip the global gradient norm to this value (0: no clipping).
  TrainerOptions& clip_grad_norm(double v) { clip_grad_norm_ = v; return *this; }
  /// Accumulate gradients over this many batches per optimizer step.
  TrainerOptions& accumulate(int64_t v) { accumulate_ = v; return *this; }
  TrainerOptions& seed(uint64_t v) { seed_ = v; return *this; }
  /// Random augmentation of the training batches (core::Augment), drawn from the seed; a
  /// distillation teacher sees the same augmented batch as the student.
  TrainerOptions& augment(core::Augment v) { augment_ = std::move(v); return *this; }
  /// Data parallel training over this group's ranks (nullptr or one rank: a single process).
  /// batch_size is then the global batch: each rank trains on batch_size / ranks samples of it
  /// (dist::shard_order), rank 0's weights are broadcast at the start, gradients are averaged
  /// after backward (dist::GradientSync), the epoch metrics are summed over the ranks, and only
  /// rank 0 writes checkpoints, metrics and the progress; every rank resumes from the checkpoint.
  TrainerOptions& process_group(std::shared_ptr<dist::ProcessGroup> pg) { process_group_ = std::move(pg); return *this; }
  /// True unless this is a rank other than 0 of a process group: the process that writes files.
  bool is_writer() const;
  /// Where the model trains (core::parse_device): the trainer moves the model there, copies each
  /// batch there (prepared in pinned host memory for a GPU, copied without blocking) and maps a
  /// checkpoint written on any device onto it, so a GPU run resumes on the CPU and back.
  TrainerOptions& device(at::Device v) { device_ = v; return *this; }
  /// The forward passes' precision (teacher and student, under autocast); weights and optimizer
  /// state stay fp32. fp16 scales the loss (dynamic, as torch.cuda.amp.GradScaler) and skips a
  /// step whose gradients overflow; bf16 needs no scaling.
  TrainerOptions& precision(core::Precision v) { precision_ = v; return *this; }
  /// Stop after this many optimizer steps in total (0: no limit); used by benchmarks.
  TrainerOptions& max_steps(int64_t v) { max_steps_ = v; return *this; }
  /// JSON lines written (atomically, rewritten each epoch) to this path; "" for none.
  TrainerOptions& metrics_path(std::string v) { metrics_path_ = std::move(v); return *this; }
  /// Progress bar on stderr (only drawn when stderr is a terminal; otherwise a line per epoch).
  TrainerOptions& progress(bool v) { progress_ = v; return *this; }
  TrainerOptions& eval_batch_size(int64_t v) { eval_batch_size_ = v; return *this; }
  /// Checkpoint file (model, optimizer, RNG and data-order state), written atomically at the end
  /// of each epoch and every `checkpoint_every` steps (0: epochs only). "" for none.
  TrainerOptions& checkpoint(std::string v) { checkpoint_ = std::move(v); return *this; }
  TrainerOptions& checkpoint_every(int64_t v) { checkpoint_every_ = v; return *this; }
  /// Continue from the checkpoint file if it exists: on the CPU the result is bit-for-bit that
  /// of an uninterrupted run.
  TrainerOptions& resume(bool v) { resume_ = v; return *this; }
  /// Stop when validation accuracy has not improved for this many epochs (0: never).
  TrainerOptions& patience(int64_t v) { patience_ = v; return *this; }
  /// Write the model of the epoch with the best validation accuracy to this ONNX file.
  TrainerOptions& best_path(std::string v) { best_path_ = std::move(v); return *this; }

  int64_t epochs_ = 1, batch_size_ = 64, warmup_steps_ = 0, max_steps_ = 0, eval_batch_size_ = 512;
  int64_t step_epochs_ = 30, accumulate_ = 1, checkpoint_every_ = 0, patience_ = 0;
  double lr_ = 1e-3, momentum_ = 0.9, weight_decay_ = 0.0, gamma_ = 0.1, clip_grad_norm_ = 0;
  std::string optimizer_ = "adam", schedule_ = "constant", metrics_path_, checkpoint_, best_path_;
  bool nesterov_ = false, progress_ = true, resume_ = false;
  uint64_t seed_ = 0;
  at::Device device_ = at::kCPU;
  core::Precision precision_ = core::Precision::kFp32;
  core::Augment augment_;
  std::shared_ptr<dist::ProcessGroup> process_group_;

  /// Throws InputError naming the option when a value is out of range.
  void validate() const;
};

/// What one epoch measured.
struct EpochStats {
  int64_t epoch = 0, steps = 0, samples = 0;
  double train_loss = 0, train_accuracy = 0, seconds = 0, samples_per_s = 0;
  double val_loss = -1, val_accuracy = -1;  ///< -1 when there was no validation set
  std::map<std::string, double> loss_parts;  ///< mean of each named loss term (distillation)
};

/// Accuracy and mean cross-entropy of a classifier over a dataset.
struct EvalResult {
  double accuracy = 0, loss = 0, seconds = 0, samples_per_s = 0;
  int64_t samples = 0;
};

/// Evaluates `model` (in eval mode, no grad, on its device) on `ds`; restores its train/eval mode after.
/// Throws InputError when the model's output is not [N, classes] or labels are out of range.
EvalResult evaluate(core::Module& model, const core::TensorDataset& ds, int64_t batch_size = 512);
/// Same for any classifier given as a function from a batch to its logits (a pare_rt model, a
/// teacher); `who` names it in messages.
EvalResult evaluate(const std::function<at::Tensor(const at::Tensor&)>& logits_of, const core::TensorDataset& ds,
                    int64_t batch_size, const std::string& who);

/// One batch's loss, the student's logits (for accuracy) and named loss terms for the metrics.
struct StepOutput {
  at::Tensor loss;
  at::Tensor logits;
  std::map<std::string, double> parts;
  /// The student's predicted classes (or next tokens), of the labels' shape, for a loss that never
  /// forms the whole logits (distill::chunked_lm_kd_loss); accuracy counts these when `logits` is
  /// undefined.
  at::Tensor predictions;
  /// The labels the loss was taken against when it replaced the batch's (on-policy distillation
  /// trains on the student's own windows); accuracy counts against these when defined.
  at::Tensor targets;
};

/// Runs the training loop.
class Trainer {
 public:
  using LossFn = std::function<StepOutput(core::Module& model, const core::Batch& batch)>;
  using StepCallback = std::function<void(int64_t step, double loss)>;
  using EpochCallback = std::function<void(const EpochStats&)>;

  Trainer(core::Module& model, TrainerOptions opts);

  /// Replaces the default cross-entropy loss. `extra` are further trainable tensors (e.g. hint
  /// projections) optimised with the model and saved in checkpoints, but not part of the model.
  void set_loss(LossFn fn, std::vector<at::Tensor> extra = {});
  void on_step(StepCallback cb) { step_cbs_.push_back(std::move(cb)); }
  void on_epoch(EpochCallback cb) { epoch_cbs_.push_back(std::move(cb)); }
  /// Runs after backward and before the optimizer step (gradient all-reduce goes here).
  void on_after_backward(std::function<void()> cb) { after_backward_cbs_.push_back(std::move(cb)); }
  /// Replaces the loader's index order (distributed samplers).
  void set_sampler(std::function<std::vector<int64_t>(int64_t n, int64_t epoch)> s) { sampler_ = std::move(s); }
  /// Whether this process writes checkpoints and metrics (false on all ranks but 0).
  void writer(bool v) { writer_ = v; }

  /// Trains on `train`, evaluating on `val` after each epoch when given. Returns one entry per
  /// epoch run (after a resume: the epochs run before it too). Throws Error when the loss becomes
  /// NaN or Inf, naming the step; the last checkpoint stays as it was.
  std::vector<EpochStats> fit(const core::TensorDataset& train, const core::TensorDataset* val);

 private:
  struct State;
  struct Run;
  // fit()'s phases: set-up, one epoch of steps, the epoch's statistics over every rank, and its
  // end (report, metrics, best model, early stop, checkpoint; true to stop).
  std::unique_ptr<Run> start_run(const core::TensorDataset& train);
  void train_epoch(Run& run, State& st, const core::TensorDataset& train);
  EpochStats reduce_epoch(Run& run, const State& st) const;
  bool end_epoch(Run& run, State& st, const EpochStats& es, bool validated);
  void save_checkpoint(const State& st);
  bool load_checkpoint(State& st, int64_t batches);
  double lr_at(int64_t step, int64_t total_steps, int64_t steps_per_epoch) const;
  void make_optimizer();

  core::Module& model_;
  TrainerOptions opts_;
  LossFn loss_fn_;
  std::vector<at::Tensor> extra_;
  std::vector<StepCallback> step_cbs_;
  std::vector<EpochCallback> epoch_cbs_;
  std::vector<std::function<void()>> after_backward_cbs_;
  std::function<std::vector<int64_t>(int64_t, int64_t)> sampler_;
  bool writer_ = true;
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace pare::train
