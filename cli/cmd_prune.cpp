// pare prune MODEL [--data D] --method magnitude|nm|channel --sparsity X [--global] [--n 2 --m 4]
// [--exclude NAME,...] [--schedule oneshot|iterative|gradual --epochs N [--teacher T]] [--analyze]
// --out pruned.onnx
// pare prune LM --calib-data text:FILE [--layers N] [--hidden N] [--heads N] [--intermediate N] [--calib-samples N]
//            [--seq-len S] --out DIR           (Minitron: lm/minitron.h; then pare distill --student hf:DIR)
//
// Flags into compress::PruneOptions, then compress::prune_with_recovery; --analyze is
// prune::sensitivity_scan.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "compress/prune_recovery.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "core/summary.h"
#include "lm/data.h"
#include "lm/hf_export.h"
#include "lm/minitron.h"
#include "lm/text.h"
#include "prune/sensitivity.h"

namespace pare::cli {

namespace {

struct PruneCli {
  std::string model, out, importance = "l1", analyze_json, calib, calib_split = "train";
  lm::PruneTargets targets;
  int64_t calib_samples = 64, seq_len = 256;
  bool analyze = false, method_given = false;
  std::vector<std::string> teachers;
  std::vector<double> teacher_weights, ratios = {0.25, 0.5, 0.75, 0.9};
  compress::PruneOptions prune;
  TrainingRun run;
  distill::DistillLossOptions loss;
};

// --analyze: the accuracy of each pruned variant, as a table (and JSON).
void analyze(const PruneCli& o, const core::Graph& model, const core::TensorDataset* val, double baseline) {
  PARE_CHECK(val != nullptr, "--analyze evaluates each pruned variant: drop --no-val");
  const int64_t batch = o.prune.trainer.eval_batch_size_;
  auto rows = prune::sensitivity_scan(model,
                                      prune::ScanOptions()
                                          .ratios(o.ratios)
                                          .channels(o.prune.method == "channel")
                                          .importance(o.prune.importance)
                                          .exclude(o.prune.exclude),
                                      [&](const core::Graph& p) { return compress::accuracy(p, val, batch); });
  std::cout << prune::to_text(rows, o.run.val_split + " accuracy");
  if (o.analyze_json.empty()) return;
  nlohmann::json j = {{"model", o.model}, {"method", o.prune.method}, {"baseline", baseline}, {"rows", prune::to_json(rows)}};
  write_file_atomic(o.analyze_json, j.dump(2) + "\n");
}

void report(const PruneCli& o, const compress::PruneResult& r, const core::ModelSummary& before,
            const core::ModelSummary& after, bool have_val) {
  const TrainingRun& run = o.run;
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& c : r.curve) curve.push_back({{"epoch", c.epoch}, {"sparsity", c.sparsity}, {"val_accuracy", c.val_accuracy}});
  nlohmann::json j = {{"model", o.model}, {"out", o.out}, {"method", o.prune.method}, {"sparsity", o.prune.sparsity},
                      {"schedule", o.prune.schedule}, {"epochs", o.prune.trainer.epochs_},
                      {"params_before", before.params}, {"params_after", after.params},
                      {"flops_before", before.flops_per_sample}, {"flops_after", after.flops_per_sample},
                      {"weight_sparsity", after.sparsity()}, {"curve", curve}};
  if (have_val) {
    j["accuracy_before"] = r.accuracy_before;
    j["accuracy_after"] = r.accuracy_after;
    if (r.accuracy_pruned >= 0) j["accuracy_pruned"] = r.accuracy_pruned;
  }
  if (!run.quiet && o.prune.method == "channel")
    for (const std::string& line : core::weight_shape_changes(before, after)) std::fprintf(stderr, "  %s\n", line.c_str());
  if (!run.quiet) {
    std::fprintf(stderr, "parameters %lld -> %lld, FLOPs/sample %lld -> %lld, weight sparsity %.2f%%\n",
                 (long long)before.params, (long long)after.params, (long long)before.flops_per_sample,
                 (long long)after.flops_per_sample, after.sparsity() * 100);
    if (have_val && r.accuracy_pruned >= 0)
      std::fprintf(stderr, "%s accuracy: %.2f%% -> %.2f%% pruned -> %.2f%% after recovery\n", run.val_split.c_str(),
                   r.accuracy_before * 100, r.accuracy_pruned * 100, r.accuracy_after * 100);
    else if (have_val)
      std::fprintf(stderr, "%s accuracy: %.2f%% -> %.2f%%\n", run.val_split.c_str(), r.accuracy_before * 100,
                   r.accuracy_after * 100);
  }
  if (run.json) std::cout << j.dump() << "\n";
  else if (!run.quiet) std::fprintf(stderr, "wrote %s\n", o.out.c_str());
}

// A language model: Minitron's importance on calibration text, then a smaller model of the same
// family (a Hugging Face folder), to be distilled from the original (pare distill --student hf:DIR).
void run_prune_lm(const PruneCli& o) {
  const TrainingRun& run = o.run;
  const lm::PruneTargets& t = o.targets;
  PARE_CHECK(!o.method_given || o.prune.method == "channel", "a language model is pruned with --method channel "
             "(heads, MLP neurons, hidden channels, layers), not ", o.prune.method);
  PARE_CHECK(o.run.trainer.epochs_ == 0 && o.teachers.empty() && !o.analyze, "a pruned language model recovers by "
             "distillation from the original: pare distill --teacher ", o.model, " --student hf:",
             o.out.empty() ? "DIR" : o.out);
  PARE_CHECK(t.layers || t.hidden || t.heads || t.intermediate,
             "say what to keep: --layers, --hidden, --heads and/or --intermediate");
  PARE_CHECK(!o.calib.empty(), "--calib-data text:FILE (or jsonl:FILE): the text whose activations rank heads, "
             "neurons, channels and layers");
  PARE_CHECK(!o.out.empty(), "--out DIR is required (a Hugging Face folder)");
  train::set_threads(run.threads);
  const lm::LmModel m = lm::load_lm(o.model);
  PARE_CHECK(m.tok != nullptr, o.model, ": the model has no tokenizer to read the calibration text with");
  const int64_t seq = std::min(o.seq_len, m.config.max_positions);
  t.validate(m.config, o.model);  // before the pass over the text
  const at::Tensor windows = lm::calibration_windows(*m.tok, o.calib, o.calib_split, seq, o.calib_samples,
                                                     run.trainer.seed_);
  const bool talk = !run.quiet;
  if (talk)
    std::fprintf(stderr, "ranking heads, neurons, channels and layers of %s on %lld windows of %lld tokens of %s\n",
                 o.model.c_str(), (long long)windows.size(0), (long long)seq, lm::short_text_spec(o.calib).c_str());
  const lm::Importance imp = lm::importance(m, windows, [&](int64_t done, int64_t total) {
    if (talk) std::fprintf(stderr, "\rwindow %lld/%lld   ", (long long)done, (long long)total);
  });
  if (talk) std::fprintf(stderr, "\n");
  const lm::Keep keep = lm::choose(m.config, imp, t, o.model);
  const lm::LmModel pruned = lm::slice(m, keep, o.model);
  const lm::HfExportResult written = lm::save_hf(pruned, o.out);
  const int64_t before = m.config.parameter_count(), after = pruned.config.parameter_count();
  if (run.json) {
    nlohmann::json j = {{"model", o.model}, {"out", o.out}, {"params_before", before}, {"params_after", after},
                        {"config", nlohmann::json::parse(lm::hf_config_json(pruned.config))},
                        {"importance", lm::to_json(m.config, imp, keep)}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (!talk) return;
  for (int64_t i = 0; i < m.config.layers; ++i) {
    const bool kept = std::find(keep.layers.begin(), keep.layers.end(), i) != keep.layers.end();
    std::fprintf(stderr, "  layer %2lld: block importance %.4f%s\n", (long long)i, imp.layers[i],
                 kept ? "" : "  (removed)");
  }
  const lm::LmConfig& a = m.config;
  const lm::LmConfig& b = pruned.config;
  std::fprintf(stderr, "layers %lld -> %lld, hidden %lld -> %lld, heads %lld (KV %lld) -> %lld (KV %lld), "
               "MLP %lld -> %lld\nparameters %lld -> %lld (%.1f%%)\n",
               (long long)a.layers, (long long)b.layers, (long long)a.hidden, (long long)b.hidden, (long long)a.heads,
               (long long)a.kv_heads, (long long)b.heads, (long long)b.kv_heads, (long long)a.intermediate,
               (long long)b.intermediate, (long long)before, (long long)after, 100.0 * after / before);
  std::cout << lm::to_text(written);
}

void run_prune(PruneCli& o) {
  TrainingRun& run = o.run;
  train::set_threads(run.threads);
  compress::PruneOptions& p = o.prune;
  p.importance = prune::parse_importance(o.importance);
  p.trainer = run.trainer;
  p.trainer.progress(!run.quiet);
  p.trainer.device(resolve_device(run.device)).precision(core::parse_precision(run.precision));
  p.teachers = distill::TeacherSource{o.teachers, o.teacher_weights, o.loss, nullptr};
  if (!run.quiet) {
    p.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    p.teachers.on_start = [](const distill::Teacher& t, const distill::DistillLossOptions& l) {
      std::fprintf(stderr, "recovering by distillation from %s: T=%g alpha=%g\n", t.describe().c_str(),
                   l.temperature_, l.alpha_);
    };
  }
  const bool have_data = !run.data.empty();
  p.validate(have_data);
  PARE_CHECK(!o.out.empty() || o.analyze, "--out FILE is required (unless --analyze)");
  PARE_CHECK(have_data || !o.analyze, "--analyze scores each pruned variant: give --data");
  core::Graph model = core::load_model(o.model, run.trainer.seed_);
  core::TensorDataset train_set, val_set;
  const core::TensorDataset* val = have_data ? run.load_data(train_set, val_set, model, p.trainer) : nullptr;
  const core::ModelSummary before = core::summarize(model);
  if (o.analyze) {
    const double baseline = compress::accuracy(model, val, p.trainer.eval_batch_size_);
    if (!run.quiet && val)
      std::fprintf(stderr, "%s: %lld parameters, %s accuracy %.2f%%\n", o.model.c_str(), (long long)before.params,
                   run.val_split.c_str(), baseline * 100);
    analyze(o, model, val, baseline);
    if (o.out.empty()) return;
  }
  const compress::PruneResult r = compress::prune_with_recovery(model, p, have_data ? &train_set : nullptr, val);
  core::save_onnx(r.graph, o.out);
  report(o, r, before, core::summarize(r.graph), val != nullptr);
}

}  // namespace

void add_prune(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("prune", "Prune a model (magnitude, N:M or whole channels) and recover its accuracy");
  auto o = std::make_shared<PruneCli>();
  o->run.trainer.epochs(0);
  compress::PruneOptions& p = o->prune;
  cmd->add_option("model", o->model, "ONNX file or zoo spec, or a language model (hf:DIR, gguf:FILE)")->required();
  cmd->add_option("--out,-o", o->out,
                  "Where to write the pruned model (.onnx; a language model: a Hugging Face folder)");
  auto g = "Pruning";
  cmd->add_option("--method", p.method,
                  "magnitude (unstructured), nm (N:M along the input dim) or channel (removes channels, heads)")
      ->capture_default_str()->group(g);
  cmd->add_option("--sparsity", p.sparsity, "Fraction removed: of the weights (magnitude) or of each channel group")
      ->capture_default_str()->group(g);
  cmd->add_flag("--global", p.global, "magnitude: one threshold over all layers (default: the same fraction per layer)")
      ->group(g);
  cmd->add_option("--n", p.n, "nm: non-zeros kept per group")->capture_default_str()->group(g);
  cmd->add_option("--m", p.m, "nm: group size along the input dimension")->capture_default_str()->group(g);
  cmd->add_option("--exclude", p.exclude, "Nodes left unpruned, e.g. fc3 or conv1,fc2")->delimiter(',')->group(g);
  cmd->add_option("--importance", o->importance, "channel: l1, l2, bn-scale or taylor")->capture_default_str()->group(g);
  cmd->add_option("--taylor-batches", p.taylor_batches, "taylor: training batches the gradients are summed over")
      ->capture_default_str()->group(g);
  cmd->add_option("--prune-end", p.prune_end, "gradual/iterative: fraction of the training steps by which the final sparsity is reached")
      ->capture_default_str()->group(g);
  cmd->add_option("--prune-every", p.prune_every, "gradual: optimizer steps between mask updates (0: 20 updates)")->group(g);
  cmd->add_option("--iterations", p.iterations, "iterative: number of equal sparsity increments")
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
  cmd->add_option("--schedule", p.schedule,
                  "oneshot, iterative or gradual (Zhu & Gupta cubic; needs --epochs); masks stay applied while training")
      ->capture_default_str()->group(g);
  cmd->add_option("--lr-schedule", o->run.trainer.schedule_, "Learning-rate schedule: constant, step or cosine")
      ->capture_default_str()->group("Training");
  cmd->footer("--epochs 0 (the default) prunes without recovery training, and needs no --data (then no accuracy is "
              "reported; --data scores the model before and after). Impossible requests (a sparsity outside "
              "[0, 1], an unknown --exclude name, channel pruning that would remove every channel of a group) "
              "exit with code 2 and write nothing. A language model (hf:DIR, gguf:FILE) is pruned as Minitron does: "
              "one pass over --calib-data ranks its heads (whole KV groups), MLP neurons, hidden channels and layers "
              "(1 - cosine of each layer's input and output), and --out gets the smaller Hugging Face checkpoint; "
              "recover it with pare distill --teacher MODEL --student hf:OUT.");
  auto l = "Language models (Minitron)";
  cmd->add_option("--calib-data", o->calib, "Text whose activations rank the units: text:FILE or jsonl:FILE[:FIELD]")
      ->group(l);
  cmd->add_option("--calib-split", o->calib_split, "Split of --calib-data")->capture_default_str()->group(l);
  cmd->add_option("--calib-samples", o->calib_samples, "Windows of --seq-len tokens, drawn at random (--seed)")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(l);
  cmd->add_option("--seq-len", o->seq_len, "Tokens per window (at most the context)")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(l);
  cmd->add_option("--layers", o->targets.layers, "Decoder layers to keep (those of highest block importance)")
      ->group(l);
  cmd->add_option("--hidden", o->targets.hidden, "Hidden channels to keep (embedding width)")->group(l);
  cmd->add_option("--heads", o->targets.heads, "Query heads to keep per layer, whole KV groups")->group(l);
  cmd->add_option("--intermediate", o->targets.intermediate, "MLP neurons to keep per layer")->group(l);
  cmd->callback([&action, o, cmd] {
    o->method_given = cmd->get_option("--method")->count() > 0;
    action = [o] {
      if (lm::is_lm_spec(o->model)) run_prune_lm(*o);
      else run_prune(*o);
    };
  });
}

}  // namespace pare::cli
