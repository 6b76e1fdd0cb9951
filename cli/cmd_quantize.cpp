// pare quantize MODEL --calib D [--calib-samples N] [--method M] [--per-channel|--per-tensor]
//               [--exclude NAME|OP ...] [--include NAME|OP ...] --out model.int8.onnx
// pare quantize MODEL --weight-only int4 [--group 32] --out model.int4.onnx
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "core/data.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/onnx_io.h"
#include "quantize/ptq.h"
#include "quantize/weight_only.h"

namespace pare::cli {

namespace {

// "a,b" and repeated flags both give lists.
std::vector<std::string> split_commas(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (auto& s : in) {
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) out.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  return out;
}

}  // namespace

void add_quantize(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "quantize",
      "Post-training static int8 quantization: calibrate activation ranges on a dataset and write "
      "a standard ONNX QDQ model (QuantizeLinear/DequantizeLinear, int8 weights) that ONNX Runtime "
      "runs with int8 kernels and `pare eval` simulates exactly");
  struct Opts {
    std::string model, calib, calib_split = "train", method = "minmax", activations = "uint8";
    std::string normalize, out, report, weight_only;
    int64_t calib_samples = 512, batch_size = 256, group = 32;
    uint64_t seed = 0;
    double percentile = 99.99;
    bool per_channel = false, per_tensor = false, keep_first = false, keep_last = false;
    bool no_fold_bn = false, json = false, quiet = false;
    std::vector<std::string> exclude, include;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("model", o->model, "fp32 ONNX file or zoo spec")->required();
  cmd->add_option("--calib,-c", o->calib,
                  "Calibration data: fashion-mnist[:DIR] or npy:X.npy,Y.npy (required unless --weight-only)");
  cmd->add_option("--weight-only", o->weight_only,
                  "int4: block-wise 4-bit weights for MatMul/Gemm (ONNX Runtime's MatMulNBits), "
                  "activations fp32, no calibration");
  cmd->add_option("--group", o->group, "--weight-only: weights per scale along K (16, 32, 64, 128, ...)")
      ->capture_default_str();
  cmd->add_option("--calib-split", o->calib_split, "Split the calibration samples come from")
      ->capture_default_str();
  cmd->add_option("--calib-samples", o->calib_samples,
                  "Calibration samples, drawn at random (seeded) from the split")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed for drawing the calibration samples")->capture_default_str();
  cmd->add_option("--method", o->method,
                  "Activation range calibration: minmax, percentile, entropy (KL) or mse")
      ->capture_default_str();
  cmd->add_option("--percentile", o->percentile, "--method percentile: percentile of |x| kept")
      ->capture_default_str();
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
  cmd->add_option("--batch-size,-b", o->batch_size, "Samples per calibration forward")->capture_default_str();
  cmd->add_option("--report", o->report, "Write the per-layer report (scales, zero points, SQNR) as JSON here");
  cmd->add_flag("--json", o->json, "Print the report as JSON on stdout instead of a table");
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: libtorch's default)");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress output");
  cmd->add_option("--out,-o", o->out, "Where to write the quantized ONNX model")->required();
  cmd->footer(
      "Weights: symmetric int8, per output channel unless --per-tensor; biases int32 (scale = "
      "input scale * weight scale). Activations: the inputs and (Relu/Clip-fused) outputs of "
      "Conv/Gemm/MatMul, uint8 asymmetric by default. Shape-only ops (MaxPool, Flatten, Reshape, "
      "...) keep their input's scale; other ops run in fp32 on dequantized values.\n"
      "Example: pare quantize cnn.onnx --calib fashion-mnist --method mse --out cnn.int8.onnx");
  cmd->callback([&action, o] {
    action = [o] {
      set_threads(o->threads);
      if (!o->weight_only.empty()) {
        PARE_CHECK(o->weight_only == "int4", "--weight-only must be int4, got '", o->weight_only, "'");
        PARE_CHECK(o->include.empty(), "--include applies to static quantization, not --weight-only");
        core::Graph g = core::load_model(o->model);
        quantize::check_not_quantized(g, o->model);
        auto r = quantize::quantize_weight_only(
            g, quantize::WeightOnlyOptions().group(o->group).exclude(split_commas(o->exclude)));
        PARE_CHECK(!r.layers.empty(), o->model, ": no MatMul or Gemm with a constant 2-D weight to quantize");
        core::save_onnx(r.graph, o->out);
        std::cout << r.to_text();
        if (!o->quiet) std::fprintf(stderr, "wrote %s\n", o->out.c_str());
        return;
      }
      PARE_CHECK(!o->calib.empty(), "--calib is required for static quantization (or use --weight-only int4)");
      quantize::PtqOptions opts;
      opts.method(quantize::parse_calib_method(o->method))
          .percentile(o->percentile)
          .per_channel(!o->per_tensor)
          .exclude(split_commas(o->exclude))
          .include(split_commas(o->include))
          .keep_first(o->keep_first)
          .keep_last(o->keep_last)
          .fold_bn(!o->no_fold_bn)
          .batch_size(o->batch_size)
          .calib_name("--calib " + o->calib + " (" + o->calib_split + ")");
      PARE_CHECK(o->activations == "uint8" || o->activations == "int8",
                 "--activations must be uint8 or int8, got '", o->activations, "'");
      opts.activations(o->activations == "uint8" ? quantize::QScheme::kAsymmetricUInt8
                                                 : quantize::QScheme::kSymmetricInt8);
      PARE_CHECK(o->calib_samples >= 1, "--calib-samples must be at least 1, got ", o->calib_samples);
      if (!o->quiet) opts.progress([](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); });

      core::Graph g = core::load_model(o->model);
      quantize::check_not_quantized(g, o->model);
      core::TensorDataset ds = core::load_dataset(o->calib, o->calib_split);
      const int64_t n = std::min(o->calib_samples, ds.size());
      // A seeded random subset, the same for the same seed.
      auto order = core::epoch_order(ds.size(), true, o->seed, 0);
      order.resize(static_cast<size_t>(n));
      ds.x = ds.x.index_select(0, at::tensor(order, at::kLong));
      ds.y = ds.y.index_select(0, at::tensor(order, at::kLong));
      std::string norm = o->normalize;
      if (norm.empty() && g.metadata.count("pare.normalize")) norm = g.metadata["pare.normalize"];
      if (!norm.empty()) core::normalize(ds, norm);
      quantize::check_calibration_data(g, ds.x, "--calib " + o->calib);
      if (!o->quiet)
        std::fprintf(stderr, "quantizing %s with %lld calibration samples from %s (%s)\n",
                     o->model.c_str(), static_cast<long long>(n), o->calib.c_str(), o->calib_split.c_str());

      quantize::PtqResult r = quantize::quantize_static(g, ds.x, opts);
      core::save_onnx(r.graph, o->out);
      if (!o->report.empty()) write_file_atomic(o->report, r.report.to_json() + "\n");
      if (o->json) std::cout << r.report.to_json(-1) << "\n";
      else std::cout << r.report.to_text();
      if (!o->quiet) std::fprintf(stderr, "wrote %s\n", o->out.c_str());
    };
  });
}

}  // namespace pare::cli
