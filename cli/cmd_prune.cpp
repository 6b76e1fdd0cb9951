// pare prune MODEL [--data D] --method magnitude|nm|channel --sparsity X [--global] [--n 2 --m 4]
// [--exclude NAME,...] [--schedule oneshot|iterative|gradual --epochs N [--teacher T]] [--analyze]
// --out pruned.onnx
//
// Composes prune/ with distill/: the pruning schedule's MaskedPruning runs in the Trainer's
// on_step callback, and recovery training distils from --teacher when one is given.
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/module.h"
#include "core/onnx_io.h"
#include "core/summary.h"
#include "distill/distiller.h"
#include "prune/masks.h"
#include "prune/schedule.h"
#include "prune/sensitivity.h"
#include "prune/structured.h"

namespace pare::cli {

namespace {

struct PruneCli {
  std::string model, out, method = "magnitude", schedule = "oneshot", importance = "l1", analyze_json;
  double sparsity = 0.5, prune_end = 0.75;
  bool global = false, analyze = false;
  int64_t n = 2, m = 4, prune_every = 0, iterations = 4, taylor_batches = 8;
  std::vector<std::string> exclude, teachers;
  std::vector<double> teacher_weights, ratios = {0.25, 0.5, 0.75, 0.9};
  TrainingRun run;
  distill::DistillLossOptions loss;
};

double accuracy(const core::Graph& g, const core::TensorDataset* val, int64_t batch) {
  if (!val) return -1;
  core::Module m(g);
  return train::evaluate(m, *val, batch).accuracy;
}

// Fine-tunes or distils `student` for the trainer's epochs; `configure` adds callbacks.
void recover(PruneCli& o, core::Module& student, const train::TrainerOptions& topts,
             const core::TensorDataset& train, const core::TensorDataset* val,
             const std::function<void(train::Trainer&)>& configure) {
  distill::TeacherSource source{o.teachers, o.teacher_weights, o.loss, nullptr};
  if (!o.run.quiet)
    source.on_start = [](const distill::Teacher& t, const distill::DistillLossOptions& l) {
      std::fprintf(stderr, "recovering by distillation from %s: T=%g alpha=%g\n", t.describe().c_str(),
                   l.temperature_, l.alpha_);
    };
  distill::fine_tune(student, source, topts, train, val, configure);
}

// The combinations of flags a prune run refuses before loading anything.
void check_flags(const PruneCli& o) {
  PARE_CHECK(o.method == "magnitude" || o.method == "nm" || o.method == "channel",
             "--method must be magnitude, nm or channel, got '", o.method, "'");
  PARE_CHECK(o.schedule == "oneshot" || o.schedule == "iterative" || o.schedule == "gradual",
             "--schedule must be oneshot, iterative or gradual, got '", o.schedule, "'");
  PARE_CHECK(std::isfinite(o.sparsity) && o.sparsity >= 0 && o.sparsity <= 1,
             "--sparsity must lie in [0, 1] (0.9 = 90% of the weights removed), got ", o.sparsity);
  PARE_CHECK(!o.out.empty() || o.analyze, "--out FILE is required (unless --analyze)");
  const int64_t epochs = o.run.trainer.epochs_;
  PARE_CHECK(epochs >= 0, "--epochs must be >= 0, got ", epochs);
  PARE_CHECK(o.schedule == "oneshot" || epochs > 0, "--schedule ", o.schedule,
             " prunes during training: give --epochs N (N >= 1)");
  PARE_CHECK(o.method == "magnitude" || o.schedule == "oneshot", "--method ", o.method,
             " prunes once: use --schedule oneshot (with --epochs N to recover)");
  PARE_CHECK(o.teachers.empty() || epochs > 0, "--teacher distils during recovery training: give --epochs N (N >= 1)");
  PARE_CHECK(o.prune_end > 0 && o.prune_end <= 1, "--prune-end must lie in (0, 1], got ", o.prune_end);
  const bool data = !o.run.data.empty();
  PARE_CHECK(data || epochs == 0, "--epochs ", epochs, " trains after pruning: give --data");
  PARE_CHECK(data || !o.analyze, "--analyze scores each pruned variant: give --data");
  PARE_CHECK(data || o.importance != "taylor", "--importance taylor needs gradients: give --data");
}

// What one prune run works on, and what it measured along the way.
struct PruneJob {
  core::Graph model;
  core::TensorDataset train, val;
  const core::TensorDataset* val_ptr = nullptr;
  train::TrainerOptions topts;
  prune::MaskOptions masks;  // magnitude / nm
  int64_t epochs = 0;
  double acc_pruned = -1;                          // right after a one-shot prune, before recovery
  nlohmann::json curve = nlohmann::json::array();  // per epoch: sparsity and validation accuracy
  double accuracy(const core::Graph& g) const { return cli::accuracy(g, val_ptr, topts.eval_batch_size_); }
};

// --analyze: the accuracy of each pruned variant, as a table (and JSON).
void analyze(const PruneCli& o, const PruneJob& job, prune::Importance importance, double baseline) {
  PARE_CHECK(job.val_ptr != nullptr, "--analyze evaluates each pruned variant: drop --no-val");
  auto rows = prune::sensitivity_scan(
      job.model,
      prune::ScanOptions().ratios(o.ratios).channels(o.method == "channel").importance(importance).exclude(o.exclude),
      [&](const core::Graph& p) { return job.accuracy(p); });
  std::cout << prune::to_text(rows, o.run.val_split + " accuracy");
  if (o.analyze_json.empty()) return;
  nlohmann::json j = {{"model", o.model}, {"method", o.method}, {"baseline", baseline}, {"rows", prune::to_json(rows)}};
  write_file_atomic(o.analyze_json, j.dump(2) + "\n");
}

// --method channel: removes channels once, then recovers.
core::Graph prune_channels(PruneCli& o, PruneJob& job, prune::Importance importance) {
  prune::TaylorScores taylor;
  prune::ChannelOptions copts = prune::ChannelOptions().sparsity(o.sparsity).importance(importance).exclude(o.exclude);
  if (importance == prune::Importance::kTaylor) {
    core::Module m(job.model);
    taylor = prune::taylor_scores(m, job.train, job.topts.batch_size_, o.taylor_batches);
    copts.taylor(&taylor);
  }
  prune::ChannelPruneResult res = prune::prune_channels(job.model, copts);
  if (!o.run.quiet) std::fprintf(stderr, "channel groups:\n%s", res.report().c_str());
  if (job.epochs == 0) return res.graph;
  job.acc_pruned = job.accuracy(res.graph);
  core::Module student(res.graph);
  recover(o, student, job.topts, job.train, job.val_ptr, nullptr);
  return student.to_graph();
}

// --method magnitude / nm: masks that follow the schedule while recovery trains.
core::Graph prune_weights(PruneCli& o, PruneJob& job, const std::vector<prune::WeightTarget>& targets) {
  const auto& topts = job.topts;
  const int64_t batches = (job.train.size() + topts.batch_size_ - 1) / topts.batch_size_;
  int64_t total = (batches + topts.accumulate_ - 1) / topts.accumulate_ * job.epochs;
  if (topts.max_steps_ > 0) total = std::min(total, topts.max_steps_);
  core::Module student(job.model);
  prune::MaskedPruning pruning(student, targets, job.masks,
                               prune::SparsitySchedule::over_training(o.schedule, o.sparsity, total, o.prune_end,
                                                                      o.prune_every, o.iterations));
  pruning.start();
  if (job.epochs > 0 && o.schedule == "oneshot") job.acc_pruned = job.accuracy(student.to_graph());
  if (!o.run.quiet) {
    std::fprintf(stderr, "pruning %zu layers (%s%s): %s\n", targets.size(), o.method.c_str(),
                 o.method == "nm" ? (" " + std::to_string(o.n) + ":" + std::to_string(o.m)).c_str()
                                  : (o.global ? ", global" : ", per layer"),
                 pruning.schedule().describe().c_str());
    for (auto& s : pruning.skipped())
      std::fprintf(stderr, "  %s left dense: its input dimension is not a multiple of %lld\n", s.c_str(), (long long)o.m);
  }
  if (job.epochs > 0)
    recover(o, student, topts, job.train, job.val_ptr, [&](train::Trainer& t) {
      if (topts.resume_ && file_exists(topts.checkpoint_)) pruning.resume_from_weights();
      t.on_after_backward([&pruning] { pruning.before_step(); });
      t.on_step([&pruning](int64_t step, double) { pruning.after_step(step); });
      t.on_epoch([&](const train::EpochStats& es) {
        const double s = prune::measure_sparsity(prune::lookup_in(student), targets).sparsity();
        job.curve.push_back({{"epoch", es.epoch}, {"sparsity", s}, {"val_accuracy", es.val_accuracy}});
        if (!o.run.quiet) std::fprintf(stderr, "  sparsity after epoch %lld: %.2f%%\n", (long long)es.epoch, s * 100);
      });
    });
  return student.to_graph();
}

void report(const PruneCli& o, const PruneJob& job, const core::ModelSummary& before, const core::ModelSummary& after,
            double acc_before, double acc_after) {
  const TrainingRun& run = o.run;
  nlohmann::json j = {{"model", o.model}, {"out", o.out}, {"method", o.method}, {"sparsity", o.sparsity},
                      {"schedule", o.schedule}, {"epochs", job.epochs},
                      {"params_before", before.params}, {"params_after", after.params},
                      {"flops_before", before.flops_per_sample}, {"flops_after", after.flops_per_sample},
                      {"weight_sparsity", after.sparsity()}, {"curve", job.curve}};
  if (job.val_ptr) {
    j["accuracy_before"] = acc_before;
    j["accuracy_after"] = acc_after;
    if (job.acc_pruned >= 0) j["accuracy_pruned"] = job.acc_pruned;
  }
  if (!run.quiet && o.method == "channel")
    for (const std::string& line : core::weight_shape_changes(before, after)) std::fprintf(stderr, "  %s\n", line.c_str());
  if (!run.quiet) {
    std::fprintf(stderr, "parameters %lld -> %lld, FLOPs/sample %lld -> %lld, weight sparsity %.2f%%\n",
                 (long long)before.params, (long long)after.params, (long long)before.flops_per_sample,
                 (long long)after.flops_per_sample, after.sparsity() * 100);
    if (job.val_ptr && job.acc_pruned >= 0)
      std::fprintf(stderr, "%s accuracy: %.2f%% -> %.2f%% pruned -> %.2f%% after recovery\n", run.val_split.c_str(),
                   acc_before * 100, job.acc_pruned * 100, acc_after * 100);
    else if (job.val_ptr)
      std::fprintf(stderr, "%s accuracy: %.2f%% -> %.2f%%\n", run.val_split.c_str(), acc_before * 100, acc_after * 100);
  }
  if (run.json) std::cout << j.dump() << "\n";
  else if (!run.quiet) std::fprintf(stderr, "wrote %s\n", o.out.c_str());
}

void run_prune(PruneCli& o) {
  TrainingRun& run = o.run;
  train::set_threads(run.threads);
  check_flags(o);
  PruneJob job;
  job.masks = prune::MaskOptions()
                  .method(o.method == "nm" ? prune::MaskMethod::kNM : prune::MaskMethod::kMagnitude)
                  .sparsity(o.sparsity)
                  .global(o.global)
                  .n(o.n)
                  .m(o.m);
  job.masks.validate();
  const prune::Importance importance = prune::parse_importance(o.importance);
  job.model = core::load_model(o.model, run.trainer.seed_);
  job.epochs = run.trainer.epochs_;
  std::vector<prune::WeightTarget> targets;
  if (o.method != "channel") {
    targets = prune::find_targets(job.model, o.exclude);
    PARE_CHECK(!targets.empty(), "model '", o.model, "' has no prunable weights left (Conv, Gemm or MatMul with a weight initializer)");
  }
  job.topts = run.trainer;
  job.topts.progress(!run.quiet);
  job.topts.device(resolve_device(run.device)).precision(core::parse_precision(run.precision));
  if (job.epochs > 0) job.topts.validate();
  if (!run.data.empty()) job.val_ptr = run.load_data(job.train, job.val, job.model, job.topts);
  const core::ModelSummary before = core::summarize(job.model);
  const double acc_before = job.accuracy(job.model);
  if (!run.quiet && job.val_ptr)
    std::fprintf(stderr, "%s: %lld parameters, %s accuracy %.2f%%\n", o.model.c_str(), (long long)before.params,
                 run.val_split.c_str(), acc_before * 100);
  if (o.analyze) {
    analyze(o, job, importance, acc_before);
    if (o.out.empty()) return;
  }

  core::Graph pruned = o.method == "channel" ? prune_channels(o, job, importance) : prune_weights(o, job, targets);
  pruned.metadata["pare.pruned"] =
      o.method == "channel" ? "channel " + std::to_string(o.sparsity) + " " + prune::importance_name(importance)
      : o.method == "nm"    ? "nm " + std::to_string(o.n) + ":" + std::to_string(o.m)
                            : "magnitude " + std::string(o.global ? "global " : "") + std::to_string(o.sparsity);
  const core::ModelSummary after = core::summarize(pruned);
  const double acc_after = job.accuracy(pruned);
  if (!o.out.empty()) core::save_onnx(pruned, o.out);
  report(o, job, before, after, acc_before, acc_after);
}

}  // namespace

void add_prune(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("prune", "Prune a model (magnitude, N:M or whole channels) and recover its accuracy");
  auto o = std::make_shared<PruneCli>();
  o->run.trainer.epochs(0);
  cmd->add_option("model", o->model, "ONNX file or zoo spec")->required();
  cmd->add_option("--out,-o", o->out, "Where to write the pruned model (.onnx)");
  auto g = "Pruning";
  cmd->add_option("--method", o->method,
                  "magnitude (unstructured), nm (N:M along the input dim) or channel (removes channels, heads)")
      ->capture_default_str()->group(g);
  cmd->add_option("--sparsity", o->sparsity, "Fraction removed: of the weights (magnitude) or of each channel group")
      ->capture_default_str()->group(g);
  cmd->add_flag("--global", o->global, "magnitude: one threshold over all layers (default: the same fraction per layer)")
      ->group(g);
  cmd->add_option("--n", o->n, "nm: non-zeros kept per group")->capture_default_str()->group(g);
  cmd->add_option("--m", o->m, "nm: group size along the input dimension")->capture_default_str()->group(g);
  cmd->add_option("--exclude", o->exclude, "Nodes left unpruned, e.g. fc3 or conv1,fc2")->delimiter(',')->group(g);
  cmd->add_option("--importance", o->importance, "channel: l1, l2, bn-scale or taylor")->capture_default_str()->group(g);
  cmd->add_option("--taylor-batches", o->taylor_batches, "taylor: training batches the gradients are summed over")
      ->capture_default_str()->group(g);
  cmd->add_option("--prune-end", o->prune_end, "gradual/iterative: fraction of the training steps by which the final sparsity is reached")
      ->capture_default_str()->group(g);
  cmd->add_option("--prune-every", o->prune_every, "gradual: optimizer steps between mask updates (0: 20 updates)")->group(g);
  cmd->add_option("--iterations", o->iterations, "iterative: number of equal sparsity increments")
      ->capture_default_str()->group(g);
  cmd->add_flag("--analyze", o->analyze, "Sensitivity scan: prune each layer alone at --ratios and print the accuracy table")
      ->group(g);
  cmd->add_option("--ratios", o->ratios, "--analyze: ratios to try")->delimiter(',')->group(g);
  cmd->add_option("--analyze-json", o->analyze_json, "--analyze: also write the table as JSON here")->group(g);
  auto d = "Recovery by distillation";
  cmd->add_option("--teacher,-t", o->teachers, "Distil from this teacher while recovering (ONNX, zoo spec, .pt; repeatable)")
      ->group(d);
  cmd->add_option("--teacher-weights", o->teacher_weights, "Ensemble weights")->delimiter(',')->group(d);
  cmd->add_option("--temperature,-T", o->loss.temperature_, "Softmax temperature of the KD term")
      ->capture_default_str()->group(d);
  cmd->add_option("--alpha", o->loss.alpha_, "Weight of the KD term; labels' cross entropy gets 1 - alpha")
      ->capture_default_str()->group(d);
  o->run.add_options(cmd, /*data_optional=*/true, /*skip=*/{"--backend", "--timeout"});  // prune runs in one process
  // The pruning schedule owns --schedule here; the learning-rate schedule moves to --lr-schedule.
  cmd->remove_option(cmd->get_option("--schedule"));
  cmd->add_option("--schedule", o->schedule,
                  "oneshot, iterative or gradual (Zhu & Gupta cubic; needs --epochs); masks stay applied while training")
      ->capture_default_str()->group(g);
  cmd->add_option("--lr-schedule", o->run.trainer.schedule_, "Learning-rate schedule: constant, step or cosine")
      ->capture_default_str()->group("Training");
  cmd->footer("--epochs 0 (the default) prunes without recovery training, and needs no --data (then no accuracy is "
              "reported; --data scores the model before and after). Impossible requests (a sparsity outside "
              "[0, 1], an unknown --exclude name, channel pruning that would remove every channel of a group) "
              "exit with code 2 and write nothing.");
  cmd->callback([&action, o] { action = [o] { run_prune(*o); }; });
}

}  // namespace pare::cli
