#include "compress/prune_recovery.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/file_util.h"
#include "core/module.h"
#include "prune/masks.h"
#include "prune/schedule.h"

namespace pare::compress {

namespace {

InputError option_error(const std::string& msg, std::initializer_list<const char*> options) {
  InputError e(msg);
  for (const char* o : options) e.about(o);
  return e;
}

std::string pruned_tag(const PruneOptions& o) {
  if (o.method == "channel") return "channel " + std::to_string(o.sparsity) + " " + prune::importance_name(o.importance);
  if (o.method == "nm") return "nm " + std::to_string(o.n) + ":" + std::to_string(o.m);
  return "magnitude " + std::string(o.global ? "global " : "") + std::to_string(o.sparsity);
}

void say(const PruneOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

// method channel: removes channels once, then recovers.
core::Graph prune_channels(const core::Graph& model, const PruneOptions& o, const core::TensorDataset* train,
                           const core::TensorDataset* val, PruneResult& r) {
  prune::TaylorScores taylor;
  prune::ChannelOptions copts =
      prune::ChannelOptions().sparsity(o.sparsity).importance(o.importance).exclude(o.exclude);
  if (o.importance == prune::Importance::kTaylor) {
    core::Module m(model);
    taylor = prune::taylor_scores(m, *train, o.trainer.batch_size_, o.taylor_batches);
    copts.taylor(&taylor);
  }
  prune::ChannelPruneResult res = prune::prune_channels(model, copts);
  say(o, "channel groups:\n" + res.report());
  if (o.trainer.epochs_ == 0) return res.graph;
  r.accuracy_pruned = accuracy(res.graph, val, o.trainer.eval_batch_size_);
  core::Module student(res.graph);
  distill::fine_tune(student, o.teachers, o.trainer, *train, val);
  return student.to_graph();
}

// The schedule's length in optimizer steps.
int64_t total_steps(const PruneOptions& o, const core::TensorDataset* train) {
  if (o.trainer.epochs_ == 0) return 0;
  const auto& t = o.trainer;
  const int64_t batches = (train->size() + t.batch_size_ - 1) / t.batch_size_;
  const int64_t total = (batches + t.accumulate_ - 1) / t.accumulate_ * t.epochs_;
  return t.max_steps_ > 0 ? std::min(total, t.max_steps_) : total;
}

// method magnitude / nm: masks that follow the schedule while recovery trains.
core::Graph prune_weights(const core::Graph& model, const PruneOptions& o, const core::TensorDataset* train,
                          const core::TensorDataset* val, PruneResult& r) {
  const std::vector<prune::WeightTarget> targets = prune::find_targets(model, o.exclude);
  PARE_CHECK(!targets.empty(), "the model has no prunable weights left (Conv, Gemm or MatMul with a weight initializer)");
  const prune::MaskOptions masks = prune::MaskOptions()
                                       .method(o.method == "nm" ? prune::MaskMethod::kNM : prune::MaskMethod::kMagnitude)
                                       .sparsity(o.sparsity)
                                       .global(o.global)
                                       .n(o.n)
                                       .m(o.m);
  core::Module student(model);
  prune::MaskedPruning pruning(student, targets, masks,
                               prune::SparsitySchedule::over_training(o.schedule, o.sparsity, total_steps(o, train),
                                                                      o.prune_end, o.prune_every, o.iterations));
  pruning.start();
  const int64_t epochs = o.trainer.epochs_;
  if (epochs > 0 && o.schedule == "oneshot") r.accuracy_pruned = accuracy(student.to_graph(), val, o.trainer.eval_batch_size_);
  say(o, "pruning " + std::to_string(targets.size()) + " layers (" + o.method +
             (o.method == "nm" ? " " + std::to_string(o.n) + ":" + std::to_string(o.m)
                               : (o.global ? ", global" : ", per layer")) +
             "): " + pruning.schedule().describe());
  for (auto& s : pruning.skipped())
    say(o, "  " + s + " left dense: its input dimension is not a multiple of " + std::to_string(o.m));
  if (epochs == 0) return student.to_graph();
  distill::fine_tune(student, o.teachers, o.trainer, *train, val, [&](train::Trainer& t) {
    if (o.trainer.resume_ && file_exists(o.trainer.checkpoint_)) pruning.resume_from_weights();
    t.on_after_backward([&pruning] { pruning.before_step(); });
    t.on_step([&pruning](int64_t step, double) { pruning.after_step(step); });
    t.on_epoch([&](const train::EpochStats& es) {
      const double s = prune::measure_sparsity(prune::lookup_in(student), targets).sparsity();
      r.curve.push_back({es.epoch, s, es.val_accuracy});
      char line[96];
      std::snprintf(line, sizeof line, "  sparsity after epoch %lld: %.2f%%", static_cast<long long>(es.epoch), s * 100);
      say(o, line);
    });
  });
  return student.to_graph();
}

}  // namespace

void PruneOptions::validate(bool have_data) const {
  PARE_CHECK_OPTION(method == "magnitude" || method == "nm" || method == "channel", "method",
                    "must be magnitude, nm or channel, got '", method, "'");
  PARE_CHECK_OPTION(schedule == "oneshot" || schedule == "iterative" || schedule == "gradual", "schedule",
                    "must be oneshot, iterative or gradual, got '", schedule, "'");
  PARE_CHECK_OPTION(std::isfinite(sparsity) && sparsity >= 0 && sparsity <= 1, "sparsity",
                    "must lie in [0, 1] (0.9 = 90% of the weights removed), got ", sparsity);
  const int64_t epochs = trainer.epochs_;
  PARE_CHECK_OPTION(epochs >= 0, "epochs", "must be >= 0, got ", epochs);
  if (schedule != "oneshot" && epochs == 0)
    throw option_error("schedule " + schedule + " prunes during training: give epochs N (N >= 1)", {"schedule", "epochs"});
  if (method != "magnitude" && schedule != "oneshot")
    throw option_error("method " + method + " prunes once: use schedule oneshot (with epochs N to recover)",
                       {"method", "schedule", "epochs"});
  if (!teachers.specs.empty() && epochs == 0)
    throw option_error("teachers distil during recovery training: give epochs N (N >= 1)", {"teachers", "epochs"});
  PARE_CHECK_OPTION(prune_end > 0 && prune_end <= 1, "prune_end", "must lie in (0, 1], got ", prune_end);
  if (!have_data && epochs > 0)
    throw option_error("epochs " + std::to_string(epochs) + " trains after pruning: give data", {"epochs", "data"});
  if (!have_data && importance == prune::Importance::kTaylor)
    throw option_error("importance taylor needs gradients: give data", {"importance", "data"});
  if (method != "channel")
    prune::MaskOptions()
        .method(method == "nm" ? prune::MaskMethod::kNM : prune::MaskMethod::kMagnitude)
        .sparsity(sparsity)
        .n(n)
        .m(m)
        .validate();
  if (epochs > 0) trainer.validate();
}

double accuracy(const core::Graph& g, const core::TensorDataset* val, int64_t batch) {
  if (!val) return -1;
  core::Module m(g);
  return train::evaluate(m, *val, batch).accuracy;
}

PruneResult prune_with_recovery(const core::Graph& model, const PruneOptions& opts, const core::TensorDataset* train,
                                const core::TensorDataset* val) {
  opts.validate(train != nullptr);
  PruneResult r;
  const int64_t batch = opts.trainer.eval_batch_size_;
  r.accuracy_before = accuracy(model, val, batch);
  if (val) {
    char line[64];
    std::snprintf(line, sizeof line, "accuracy before pruning: %.2f%%", r.accuracy_before * 100);
    say(opts, line);
  }
  r.graph = opts.method == "channel" ? prune_channels(model, opts, train, val, r) : prune_weights(model, opts, train, val, r);
  r.graph.metadata["pare.pruned"] = pruned_tag(opts);
  r.accuracy_after = accuracy(r.graph, val, batch);
  return r;
}

}  // namespace pare::compress
