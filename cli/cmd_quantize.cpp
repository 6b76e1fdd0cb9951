// pare quantize MODEL --calib D [--calib-samples N] [--method M] [--per-channel|--per-tensor]
//               [--exclude NAME|OP ...] [--include NAME|OP ...] --out model.int8.onnx
// pare quantize MODEL --calib D --qat [--teacher T] [--epochs N --lr LR ...] --out model.int8.onnx
// pare quantize MODEL --dynamic [--per-tensor] --out model.int8.onnx
// pare quantize MODEL --weight-only int4 [--group 32] --out model.int4.onnx
// pare quantize LM --weight-only int4|int8 [--group 32] [--method gptq|awq|awq+gptq|rtn] --calib text:FILE
//               [--calib-samples N] [--seq-len S] [--damp D] [--sequential] [--static-groups] [--grid q4_0|q4_k]
//               --out FILE.gguf|DIR
// pare quantize LM --calib text:FILE [--smoothquant ALPHA] [--method minmax|percentile|...] --out FILE.onnx  (W8A8)

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "compress/qat.h"
#include "core/data.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "quantize/dynamic.h"
#include "quantize/ptq.h"
#include "lm/data.h"
#include "lm/gguf_export.h"
#include "lm/hf_export.h"
#include "lm/text.h"
#include "lm/weight_quant.h"
#include "quantize/weight_only.h"

namespace pare::cli {

namespace {

struct QuantizeOpts {
  std::string model, calib, calib_split = "train", method = "minmax", activations = "uint8";
  std::string normalize, out, report, weight_only, grid = "q4_0";
  int64_t calib_samples = 512, batch_size = 256, group = 32, seq_len = 512;
  double damp = 0.01;
  bool sequential = false, static_groups = false;
  bool method_given = false, samples_given = false, batch_size_given = false;  // a language model's defaults differ
  double smoothquant = -1;  // a language model's W8A8: SmoothQuant's alpha first (< 0: none)
  uint64_t seed = 0;
  double percentile = 99.99;
  bool per_channel = false, per_tensor = false, keep_first = false, keep_last = false;
  bool no_fold_bn = false, json = false, quiet = false;
  std::vector<std::string> exclude, include;
  int threads = 0, weight_bits = 8;
  bool dynamic = false;
  // --qat: the training run (data, schedule) and the distillation loss, as `pare distill` has them.
  bool qat = false, learn_scales = false;
  std::vector<std::string> teachers;
  TrainingRun run;
  distill::DistillLossOptions loss;
};

// --qat: compress::quantization_aware_training on the run's data (default: --calib), then rank 0
// writes the QDQ model and its report.
void run_qat(QuantizeOpts& o, core::Graph& g, const at::Tensor& calib_x, const std::string& norm,
             const quantize::PtqOptions& popts) {
  TrainingRun& run = o.run;
  if (run.data.empty()) run.data = o.calib;
  run.normalize = norm;  // the model's own normalization, as for calibration
  run.quiet = o.quiet;
  run.json = o.json;
  run.threads = o.threads;
  run.trainer.batch_size(o.batch_size).seed(o.seed);
  compress::QatRunOptions qopts;
  qopts.trainer = run.start();
  qopts.qat.ptq(popts).learn_scales(o.learn_scales);
  core::TensorDataset train, val;
  const core::TensorDataset* val_ptr = run.load_data(train, val, g, qopts.trainer);
  const bool talk = !o.quiet && qopts.trainer.is_writer();
  qopts.teachers = distill::TeacherSource{o.teachers, {}, o.loss, nullptr};
  if (talk && !o.teachers.empty())
    qopts.teachers.on_start = [&](const distill::Teacher& t, const distill::DistillLossOptions& l) {
      std::fprintf(stderr, "quantization-aware training of %s on %s, distilling from %s: T=%g alpha=%g\n",
                   o.model.c_str(), train.name.c_str(), t.describe().c_str(), l.temperature_, l.alpha_);
    };
  else if (talk)
    std::fprintf(stderr, "quantization-aware training of %s on %s (cross entropy, no teacher)\n", o.model.c_str(),
                 train.name.c_str());
  compress::QatRunResult r = compress::quantization_aware_training(g, calib_x, train, val_ptr, qopts);
  if (!qopts.trainer.is_writer()) return;  // rank 0 writes
  if (!norm.empty()) r.quantized.graph.metadata["pare.normalize"] = norm;
  nlohmann::json qat = {{"epochs", r.history.size()},
                        {"train_loss", r.history.empty() ? 0.0 : r.history.back().train_loss},
                        {"teachers", o.teachers},
                        {"learn_scales", o.learn_scales}};
  if (val_ptr) {
    qat["fake_quant_accuracy"] = r.history.empty() ? -1.0 : r.history.back().val_accuracy;
    qat["accuracy"] = r.accuracy;
    if (!o.quiet)
      std::fprintf(stderr, "%s accuracy of the QDQ model: %.2f%%\n", run.val_split.c_str(), r.accuracy * 100);
  }
  core::save_onnx(r.quantized.graph, o.out);
  nlohmann::json j = nlohmann::json::parse(r.quantized.report.to_json(-1));
  j["qat"] = qat;
  if (!o.report.empty()) write_file_atomic(o.report, j.dump(2) + "\n");
  if (o.json) std::cout << j.dump() << "\n";
  else std::cout << r.quantized.report.to_text();
  if (!o.quiet) std::fprintf(stderr, "wrote %s\n", o.out.c_str());
}

// --dynamic: int8 weights, activation scales computed at run time.
void run_dynamic(const QuantizeOpts& o) {
  PARE_CHECK(o.weight_only.empty(), "--dynamic and --weight-only are two different schemes; choose one");
  PARE_CHECK(o.calib.empty(), "--dynamic computes activation scales at run time and takes no --calib "
             "(use static quantization for calibrated scales)");
  PARE_CHECK(o.include.empty(), "--include applies to static quantization, not --dynamic");
  PARE_CHECK(o.weight_bits == 8, "--dynamic writes int8 weights; --weight-bits ", o.weight_bits,
             " applies to static quantization and --qat");
  core::Graph g = core::load_model(o.model);
  quantize::check_not_quantized(g, o.model);
  auto r = quantize::quantize_dynamic(
      g, quantize::DynamicOptions().per_channel(!o.per_tensor).exclude(split_commas(o.exclude)));
  PARE_CHECK(!r.layers.empty(), o.model, ": no MatMul or Gemm with a constant 2-D weight to quantize");
  core::save_onnx(r.graph, o.out);
  std::cout << r.to_text();
  if (!o.quiet) std::fprintf(stderr, "wrote %s\n", o.out.c_str());
}

// --weight-only int4: 4-bit weight blocks, no calibration.
void run_weight_only(const QuantizeOpts& o) {
  PARE_CHECK(!o.qat, "--qat trains int8 QDQ models; --weight-only int4 takes no training");
  PARE_CHECK(o.weight_only == "int4", "--weight-only must be int4, got '", o.weight_only, "'");
  PARE_CHECK(o.weight_bits == 8, "--weight-bits applies to static quantization and --qat; --weight-only "
             "int4 stores 4-bit blocks of its own");
  PARE_CHECK(o.include.empty(), "--include applies to static quantization, not --weight-only");
  core::Graph g = core::load_model(o.model);
  quantize::check_not_quantized(g, o.model);
  auto r = quantize::quantize_weight_only(
      g, quantize::WeightOnlyOptions().group(o.group).exclude(split_commas(o.exclude)));
  PARE_CHECK(!r.layers.empty(), o.model, ": no MatMul or Gemm with a constant 2-D weight to quantize");
  core::save_onnx(r.graph, o.out);
  std::cout << r.to_text();
  if (!o.quiet) std::fprintf(stderr, "wrote %s\n", o.out.c_str());
}

// The static quantization options from the flags.
quantize::PtqOptions ptq_options(const QuantizeOpts& o) {
  PARE_CHECK(!o.calib.empty(), "--calib is required for static quantization and --qat (or use --dynamic "
             "or --weight-only int4)");
  quantize::PtqOptions opts;
  opts.method(quantize::parse_calib_method(o.method))
      .percentile(o.percentile)
      .per_channel(!o.per_tensor)
      .exclude(split_commas(o.exclude))
      .include(split_commas(o.include))
      .keep_first(o.keep_first)
      .keep_last(o.keep_last)
      .fold_bn(!o.no_fold_bn)
      .batch_size(o.batch_size)
      .weight_bits(o.weight_bits)
      .calib_name("--calib " + o.calib + " (" + o.calib_split + ")");
  PARE_CHECK(o.activations == "uint8" || o.activations == "int8",
             "--activations must be uint8 or int8, got '", o.activations, "'");
  opts.activations(o.activations == "uint8" ? quantize::QScheme::kAsymmetricUInt8
                                            : quantize::QScheme::kSymmetricInt8);
  PARE_CHECK(o.calib_samples >= 1, "--calib-samples must be at least 1, got ", o.calib_samples);
  if (!o.quiet) opts.progress([](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); });
  return opts;
}

// The calibration windows of a language model's quantization, said on stderr.
at::Tensor lm_calibration(const QuantizeOpts& o, const lm::LmModel& m) {
  PARE_CHECK(m.tok != nullptr, o.model, ": the model has no tokenizer to read the calibration text with");
  const int64_t seq = std::min(o.seq_len, m.config.max_positions);
  const at::Tensor windows = lm::calibration_windows(*m.tok, o.calib, o.calib_split, seq,
                                                    o.samples_given ? o.calib_samples : 32, o.seed);
  if (!o.quiet)
    std::fprintf(stderr, "calibrating on %lld windows of %lld tokens of %s\n", static_cast<long long>(windows.size(0)),
                 static_cast<long long>(seq), lm::short_text_spec(o.calib).c_str());
  return windows;
}

// A language model to W8A8 (SmoothQuant's setting): --smoothquant ALPHA first when given, then static
// int8 weights and linear-layer inputs, written as an ONNX QDQ file that `pare eval` reads back.
void run_w8a8_lm(const QuantizeOpts& o) {
  PARE_CHECK(ends_with(o.out, ".onnx"), "--out ", o.out, ": W8A8 (int8 "
             "activations) is written as an ONNX QDQ file (FILE.onnx); GGUF and Hugging Face folders hold weights only "
             "(give --weight-only int4|int8 for those)");
  PARE_CHECK(o.method == "minmax" || o.method == "percentile" || o.method == "entropy" || o.method == "mse",
             "--method for W8A8 calibrates the activations' ranges: minmax, percentile, entropy or mse, not '",
             o.method, "' (gptq, awq and rtn round weights: give --weight-only)");
  lm::BuildOptions fp32;
  fp32.dtype = at::kFloat;
  lm::LmModel m = lm::load_lm(o.model, fp32);
  const at::Tensor windows = lm_calibration(o, m);
  nlohmann::json report;
  if (o.smoothquant >= 0) {
    const lm::LmSmoothResult smooth = lm::smooth_activations(m, windows, o.smoothquant);
    if (!o.json) std::cout << to_text(smooth);
    report["smoothquant"] = to_json(smooth);
  }
  quantize::PtqOptions opts = ptq_options(o);
  opts.batch_size(o.batch_size_given ? o.batch_size : 1).calib_name("--calib " + lm::short_text_spec(o.calib));
  const quantize::PtqResult r = lm::quantize_w8a8(m, windows, opts);
  core::save_onnx(r.graph, o.out);
  report["quantization"] = nlohmann::json::parse(r.report.to_json());
  if (!o.report.empty()) write_file_atomic(o.report, report.dump(2) + "\n");
  if (o.json) std::cout << report.dump(2) << "\n";
  else std::cout << r.report.to_text();
  if (!o.quiet) std::fprintf(stderr, "wrote %s\n", o.out.c_str());
}

// A language model: RTN, GPTQ or AWQ of its linear weights calibrated on text (lm/weight_quant.h),
// written as a GGUF file (group 32: the codes as Q4_0/Q8_0/Q4_K blocks, unchanged) or a Hugging Face
// folder; without --weight-only, W8A8.
void run_quantize_lm(const QuantizeOpts& o) {
  PARE_CHECK(!o.qat && !o.dynamic, "--qat and --dynamic take ONNX models; a language model takes --weight-only "
             "int4|int8 with --method rtn|gptq|awq|awq+gptq, or W8A8 (static, with --smoothquant ALPHA) into "
             "FILE.onnx");
  PARE_CHECK(!o.calib.empty(), "--calib text:FILE (or jsonl:FILE) is the calibration text a language model's "
             "quantization needs (RTN too, for its report)");
  if (o.weight_only.empty()) return run_w8a8_lm(o);
  PARE_CHECK(o.weight_only == "int4" || o.weight_only == "int8", "a language model is quantized with --weight-only "
             "int4 or int8 (its linear weights; activations stay fp32), not '", o.weight_only, "'");
  PARE_CHECK(o.smoothquant < 0, "--smoothquant goes with W8A8 (no --weight-only): it moves activation outliers into "
             "the weights so that the activations quantize");
  lm::LmModel m = lm::load_lm(o.model);
  const bool gguf = ends_with(o.out, ".gguf");
  PARE_CHECK(!gguf || o.group == 32, "--out ", o.out, ": a GGUF file holds int4 and int8 in blocks of 32 (Q4_0, Q8_0), "
             "so --group ", o.group, " is written as a Hugging Face folder (give --out DIR)");
  lm::LmQuantOptions q;
  q.bits = o.weight_only == "int4" ? 4 : 8;
  q.group = o.group;
  q.method = o.method_given ? o.method : "gptq";
  q.gptq.damp = o.damp;
  q.sequential = o.sequential;
  q.static_groups = o.static_groups;
  q.q4_k = o.grid == "q4_k";
  const at::Tensor windows = lm_calibration(o, m);
  const lm::LmQuantResult r = lm::quantize_weights(m, windows, q, [&](int done, int total, const std::string& name) {
    if (!o.quiet) std::fprintf(stderr, "\r%s %d/%d %s   ", q.method.c_str(), done, total, name.c_str());
  });
  if (!o.quiet) std::fprintf(stderr, "\n");
  if (!o.report.empty()) write_file_atomic(o.report, to_json(r).dump(2) + "\n");
  auto print = [&](const auto& written) {
    if (o.json) std::cout << nlohmann::json{{"quantization", to_json(r)}, {"written", to_json(written)}}.dump(2) << "\n";
    else std::cout << to_text(r) << to_text(written);
  };
  if (gguf) print(lm::save_gguf(m, o.out, lm::GgufExportOptions().type(r.type).blocks(r.blocks)));
  else print(lm::save_hf(m, o.out));
}

// Static quantization (and --qat): calibrate on a seeded subset of --calib, then write QDQ.
void run_static(QuantizeOpts& o) {
  const quantize::PtqOptions opts = ptq_options(o);
  core::Graph g = core::load_model(o.model);
  quantize::check_not_quantized(g, o.model);
  core::TensorDataset ds = core::load_dataset(o.calib, o.calib_split);
  const int64_t n = std::min(o.calib_samples, ds.size());
  // A seeded random subset, the same for the same seed.
  auto order = core::epoch_order(ds.size(), true, o.seed, 0);
  order.resize(static_cast<size_t>(n));
  ds.x = ds.x.index_select(0, at::tensor(order, at::kLong));
  if (ds.has_labels()) ds.y = ds.y.index_select(0, at::tensor(order, at::kLong));
  std::string norm = o.normalize;
  if (norm.empty() && g.metadata.count("pare.normalize")) norm = g.metadata["pare.normalize"];
  if (!norm.empty()) core::normalize(ds, norm);
  quantize::check_calibration_data(g, ds.x, "--calib " + o.calib);
  if (!o.quiet)
    std::fprintf(stderr, "quantizing %s with %lld calibration samples from %s (%s)\n",
                 o.model.c_str(), static_cast<long long>(n), o.calib.c_str(), o.calib_split.c_str());

  if (o.qat) {
    run_qat(o, g, ds.x, norm, opts);
    return;
  }
  quantize::PtqResult r = quantize::quantize_static(g, ds.x, opts);
  core::save_onnx(r.graph, o.out);
  if (!o.report.empty()) write_file_atomic(o.report, r.report.to_json() + "\n");
  if (o.json) std::cout << r.report.to_json(-1) << "\n";
  else std::cout << r.report.to_text();
  if (!o.quiet) std::fprintf(stderr, "wrote %s\n", o.out.c_str());
}

// --qat's options: the run's options are TrainingRun's fields, registered here because --seed,
// --batch-size, --normalize, --threads, --quiet and --json are shared with calibration.
void add_qat_options(CLI::App* cmd, QuantizeOpts& o, CLI::Option* dynamic) {
  auto qg = "Quantization-aware training (--qat)";
  auto* qat = cmd->add_flag("--qat", o.qat,
                            "Quantization-aware training: fake-quantize where static quantization "
                            "puts QDQ pairs (scales calibrated on --calib), train, then write the same "
                            "QDQ form")
                  ->group(qg);
  qat->excludes(dynamic);
  o.run.trainer.epochs(1).lr(1e-4).batch_size(o.batch_size);
  o.loss.temperature(4).alpha(0.9);
  cmd->add_option("--teacher,-t", o.teachers,
                  "Teacher for QAT with distillation: ONNX file, zoo spec or TorchScript; repeat for "
                  "an ensemble (without one, QAT trains on the labels' cross entropy; loading TorchScript runs the code in "
                  "the file: only files you trust)")
      ->group(qg)->needs(qat);
  cmd->add_option("--temperature,-T", o.loss.temperature_, "Softmax temperature of the KD term")
      ->capture_default_str()->group(qg)->needs(qat);
  cmd->add_option("--alpha", o.loss.alpha_, "Weight of the KD term; labels' cross entropy gets 1 - alpha")
      ->capture_default_str()->group(qg)->needs(qat);
  cmd->add_flag("--learn-scales", o.learn_scales, "Train the quantization scales too (LSQ)")->group(qg)->needs(qat);
  cmd->add_option("--data,-d", o.run.data, "Training data (default: the --calib dataset)")->group(qg)->needs(qat);
  // --batch-size and --seed serve calibration and training alike (declared above).
  o.run.add_training_options(cmd, qg, qat, {"--batch-size", "--seed"});
  cmd->add_option("--val-split", o.run.val_split, "Split evaluated after each epoch")
      ->capture_default_str()->group(qg)->needs(qat);
  cmd->add_flag("--no-val", o.run.no_val, "Skip evaluation after each epoch")->group(qg)->needs(qat);
}

// `pare quantize --help`'s closing text.
constexpr const char* kFooter =
    "Weights: symmetric int8, per output channel unless --per-tensor; biases int32 (scale = "
    "input scale * weight scale). Activations: the inputs and (Relu/Clip-fused) outputs of "
    "Conv/Gemm/MatMul, uint8 asymmetric by default. Shape-only ops (MaxPool, Flatten, Reshape, "
    "...) keep their input's scale; other ops run in fp32 on dequantized values.\n"
    "--qat trains the fake-quant model (BatchNorm folded first, so training adjusts the weights "
    "that get quantized) with the straight-through estimator, distilling from --teacher when "
    "given, and writes the same QDQ form as static quantization.\n"
    "Example: pare quantize cnn.onnx --calib fashion-mnist --method mse --out cnn.int8.onnx\n"
    "Example: pare quantize mlp.onnx --calib fashion-mnist --weight-bits 4 --per-tensor --qat "
    "--teacher cnn.onnx --epochs 2 --out mlp.w4.onnx\n"
    "A language model (hf:DIR, gguf:FILE): --weight-only int4|int8 quantizes the decoder layers' linear weights on "
    "ggml's Q4_0/Q8_0 grid per --group of input columns, by GPTQ (error feedback through the calibration "
    "inputs' Hessian), AWQ (input channels scaled by their mean |x|^alpha, the inverse folded into the norm or "
    "linear before, then clipped RTN) or RTN; group 32 writes the codes into a GGUF file unchanged (--grid q4_k: "
    "on ggml's Q4_K grid, the file Q4_K).\n"
    "Example: pare quantize gguf:smollm2.gguf --weight-only int4 --method awq --calib text:fortunes.txt "
    "--out smollm2.q4_0.gguf\n"
    "Without --weight-only a language model goes W8A8 into an ONNX QDQ file: int8 weights per output channel, "
    "each decoder linear layer's input int8 with a scale calibrated by --method (minmax, percentile, entropy, "
    "mse), its output left dequantized; embedding, head, norms and attention fp32. --smoothquant ALPHA first moves "
    "activation outliers into the weights (the inverse folded into the norm or linear before). `pare eval` reads "
    "the file back (its metadata holds the config and tokenizer); ONNX Runtime runs it.\n"
    "Example: pare quantize hf:teacher --smoothquant 0.5 --calib text:fortunes.txt --out teacher.w8a8.onnx";

// A language model's options: its calibration windows, GPTQ's and SmoothQuant's.
void add_lm_options(CLI::App* cmd, QuantizeOpts& o) {
  cmd->add_option("--seq-len", o.seq_len, "A language model's calibration window, in tokens (at most its context)")
      ->capture_default_str();
  cmd->add_option("--damp", o.damp, "GPTQ: added to the Hessian's diagonal, times its mean")->capture_default_str();
  cmd->add_flag("--sequential", o.sequential,
                "A language model: each decoder layer calibrated on the model whose earlier layers are quantized "
                "already (a pass per layer) instead of all from one pass");
  cmd->add_option("--smoothquant", o.smoothquant,
                  "A language model's W8A8 (no --weight-only, --out FILE.onnx): SmoothQuant's migration strength "
                  "alpha in [0, 1] (0.5 in the paper): each linear layer's input channels divided by "
                  "max|x|^alpha / max|w|^(1-alpha), its weights' columns multiplied, before quantization")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--grid", o.grid,
                  "A language model's int4 at group 32: q4_0 (symmetric, Q4_0's blocks) or q4_k (asymmetric, ggml's "
                  "Q4_K: 6-bit scales and mins per 32 in super-blocks of 256, fixed from the weights; Q4_0 for a "
                  "weight whose input width is not whole super-blocks)")
      ->check(CLI::IsMember({"q4_0", "q4_k"}))
      ->capture_default_str();
  cmd->add_flag("--static-groups", o.static_groups,
                "GPTQ: each group's scale fixed from the original weights before GPTQ starts, instead of from the "
                "weights as GPTQ has updated them when it reaches the group");
}

}  // namespace

void add_quantize(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "quantize",
      "Post-training static int8 quantization: calibrate activation ranges on a dataset and write "
      "a standard ONNX QDQ model (QuantizeLinear/DequantizeLinear, int8 weights) that ONNX Runtime "
      "runs with int8 kernels and `pare eval` simulates exactly; --qat trains the quantized model "
      "first (with a --teacher: QAT with distillation); --dynamic and --weight-only int4 need no "
      "calibration");
  auto o = std::make_shared<QuantizeOpts>();
  cmd->add_option("model", o->model, "fp32 ONNX file or zoo spec, or a language model (hf:DIR, gguf:FILE)")->required();
  cmd->add_option("--calib,-c,--calib-data", o->calib,
                  "Calibration data: fashion-mnist[:DIR], npy:X.npy,Y.npy or npy:X.npy (inputs only; required unless "
                  "--weight-only); for a language model text:FILE or jsonl:FILE[:FIELD]");
  cmd->add_option("--weight-only", o->weight_only,
                  "int4: block-wise 4-bit weights for MatMul/Gemm (ONNX Runtime's MatMulNBits), "
                  "activations fp32, no calibration; a language model: int4 or int8, with --method "
                  "rtn|gptq|awq|awq+gptq");
  cmd->add_option("--group", o->group, "--weight-only: weights per scale along K (16, 32, 64, 128, ...)")
      ->capture_default_str();
  cmd->add_option("--calib-split", o->calib_split, "Split the calibration samples come from")
      ->capture_default_str();
  auto* samples = cmd->add_option("--calib-samples", o->calib_samples,
                                  "Calibration samples, drawn at random (seeded) from the split (a language model: "
                                  "windows of --seq-len tokens, default 32)")
      ->capture_default_str();
  add_lm_options(cmd, *o);
  cmd->add_option("--seed", o->seed, "Seed for drawing the calibration samples")->capture_default_str();
  auto* method = cmd->add_option("--method", o->method,
                                 "Activation range calibration: minmax, percentile, entropy (KL) or mse; a language "
                                 "model's weights: gptq (default), awq, awq+gptq (GPTQ on AWQ's scaled weights) "
                                 "or rtn (round to nearest)")
                     ->capture_default_str();
  cmd->add_option("--percentile", o->percentile, "--method percentile: percentile of |x| kept")
      ->capture_default_str();
  cmd->add_option("--weight-bits", o->weight_bits,
                  "Static/QAT weight precision, 2..8 bits: symmetric codes stored in int8 (4 gives a "
                  "4-bit model that is still standard QDQ)")
      ->capture_default_str();
  auto* dyn = cmd->add_flag("--dynamic", o->dynamic,
                            "Dynamic quantization of Gemm/MatMul: int8 weights, activation scales "
                            "computed at run time (DynamicQuantizeLinear + MatMulInteger); no --calib");
  auto* pc = cmd->add_flag("--per-channel", o->per_channel,
                           "Weight scales per output channel (the default)");
  cmd->add_flag("--per-tensor", o->per_tensor, "One weight scale per tensor")->excludes(pc);
  cmd->add_option("--activations", o->activations,
                  "Activation encoding: uint8 (asymmetric) or int8 (symmetric)")
      ->capture_default_str();
  cmd->add_option("--exclude", o->exclude, "Node names or op types kept in fp32 (comma-separated or repeated)");
  cmd->add_option("--include", o->include,
                  "Quantize only these node names or op types (each must be quantizable)");
  cmd->add_flag("--keep-first", o->keep_first, "Keep the first quantizable layer in fp32");
  cmd->add_flag("--keep-last", o->keep_last, "Keep the last quantizable layer in fp32");
  cmd->add_flag("--no-fold-bn", o->no_fold_bn, "Do not fold BatchNorm into the preceding Conv/Gemm");
  cmd->add_option("--normalize", o->normalize,
                  "MEAN,STD applied to the calibration inputs (default: what the model's metadata records)");
  auto* batch = cmd->add_option("--batch-size,-b", o->batch_size,
                                "Samples per calibration forward (a language model's W8A8: windows, default 1)")
                    ->capture_default_str();
  cmd->add_option("--report", o->report, "Write the per-layer report (scales, zero points, SQNR) as JSON here");
  cmd->add_flag("--json", o->json, "Print the report as JSON on stdout instead of a table");
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: libtorch's default)");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress output");
  cmd->add_option("--out,-o", o->out, "Where to write the quantized ONNX model (a language model: FILE.gguf, or a "
                  "Hugging Face folder of the quantized values)")->required();
  add_qat_options(cmd, *o, dyn);
  cmd->footer(kFooter);
  cmd->callback([&action, o, method, samples, batch] {
    o->method_given = method->count() > 0;
    o->samples_given = samples->count() > 0;
    o->batch_size_given = batch->count() > 0;
    action = [o] {
      train::set_threads(o->threads);
      if (lm::is_lm_spec(o->model)) run_quantize_lm(*o);
      else if (o->dynamic) run_dynamic(*o);
      else if (!o->weight_only.empty()) run_weight_only(*o);
      else run_static(*o);
    };
  });
}

}  // namespace pare::cli
