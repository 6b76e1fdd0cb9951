// pare export MODEL --target onnx|rt --out FILE [--sparse auto|on|off] [--metadata KEY=VALUE ...] [--json]
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/onnx_io.h"
#include "export/onnx_export.h"

namespace pare::cli {

namespace {

struct ExportArgs {
  std::string model, out, target, sparse = "auto";
  std::vector<std::string> metadata;
  bool json = false;
};

void run_export(const ExportArgs& a) {
  exporter::ExportOptions opts;
  opts.target(exporter::parse_target(a.target)).sparse(exporter::parse_sparse_mode(a.sparse));
  for (const auto& kv : a.metadata) {
    const auto eq = kv.find('=');
    PARE_CHECK(eq != std::string::npos && eq > 0, "--metadata takes KEY=VALUE, got '", kv, "'");
    opts.metadata(kv.substr(0, eq), kv.substr(eq + 1));
  }
  const core::Graph g = core::load_model(a.model);
  const exporter::ExportResult r = exporter::export_model(g, a.out, opts);
  if (a.json) {
    nlohmann::json j = exporter::to_json(r);
    j["model"] = a.model;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << exporter::to_text(r);
  }
}

}  // namespace

void add_export(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "export", "Write a model for a target: ONNX with pruned weights as sparse initializers, or a file pare_rt loads");
  cmd->footer(
      "--sparse: a sparse (COO) initializer stores each nonzero as its value and an int64 index, so it is smaller "
      "below a density of 1/3 for float32 and 1/9 for int8. auto stores sparse exactly the initializers it makes "
      "smaller; on stores sparse every initializer with a zero, smaller or not (scalars and empty tensors stay dense); "
      "off stores none. "
      "Readers (ONNX Runtime, pare, pare_rt) make them dense at load. The model's metadata is kept; pare.version and "
      "pare.export (how it was exported) are added. --target rt: pare_rt must load the result, else the command "
      "exits 2 naming the node and why, and writes nothing.\n");
  auto a = std::make_shared<ExportArgs>();
  cmd->add_option("model", a->model, "ONNX file or zoo spec (mlp:784-300-100-10, cnn, ...)")->required();
  cmd->add_option("--target", a->target,
                  "onnx: an ONNX file for any runtime (onnx.checker passes it); rt: also checked to load in "
                  "pare_rt, the oneDNN edge runtime (pare run --engine rt)")
      ->check(CLI::IsMember({"onnx", "rt"}))
      ->required();
  cmd->add_option("--out,-o", a->out, "The file to write (written atomically; nothing on failure)")->required();
  cmd->add_option("--sparse", a->sparse, "Which initializers to store as sparse_initializer (COO): auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--metadata", a->metadata, "KEY=VALUE: one more metadata_props entry (repeat the option for more)")
      ->allow_extra_args(false);
  cmd->add_flag("--json", a->json, "Print the summary as JSON (bytes, and per initializer: density, sizes, decision)");
  cmd->callback([&action, a] { action = [a] { run_export(*a); }; });
}

}  // namespace pare::cli
