// Export a model for where it lands: pruned weights as ONNX sparse initializers, and checked to
// load in pare_rt (the oneDNN CPU runtime) with Target::kRt: `pare export` in a few lines.
// Usage: export_example MODEL.onnx OUT.onnx [onnx|rt]
#include <cstdio>
#include <iostream>
#include <string>

#include "core/error.h"
#include "core/onnx_io.h"
#include "export/onnx_export.h"

int main(int argc, char** argv) try {
  if (argc < 3) return std::fprintf(stderr, "usage: %s MODEL.onnx OUT.onnx [onnx|rt]\n", argv[0]), 2;
  using namespace pare;
  const core::Graph model = core::load_model(argv[1], /*seed=*/1);
  const auto result = exporter::export_model(
      model, argv[2],
      exporter::ExportOptions()
          .target(exporter::parse_target(argc > 3 ? argv[3] : "rt"))
          .sparse(exporter::SparseMode::kAuto)
          .metadata("example", "export_example"));
  std::cout << exporter::to_text(result);
  return 0;
} catch (const pare::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return e.exit_code();
}
