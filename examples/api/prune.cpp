// Remove half of a model's channels (hidden units, Conv filters, attention heads), keeping the
// graph consistent, and write the smaller model: `pare prune --method channel` in a few lines.
// Usage: prune_example MODEL.onnx|SPEC OUT.onnx [SPARSITY]
#include <cstdio>
#include <iostream>
#include <string>

#include "core/error.h"
#include "core/onnx_io.h"
#include "core/summary.h"
#include "prune/structured.h"

int main(int argc, char** argv) try {
  if (argc < 3) return std::fprintf(stderr, "usage: %s MODEL OUT.onnx [SPARSITY]\n", argv[0]), 2;
  using namespace pare;
  const core::Graph model = core::load_model(argv[1], /*seed=*/1);
  const auto result = prune::prune_channels(
      model, prune::ChannelOptions().sparsity(argc > 3 ? std::stod(argv[3]) : 0.5).importance(prune::Importance::kL1));
  std::cout << result.report();
  core::save_onnx(result.graph, argv[2]);
  std::printf("parameters %lld -> %lld\n", static_cast<long long>(core::summarize(model).params),
              static_cast<long long>(core::summarize(result.graph).params));
  return 0;
} catch (const pare::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return e.exit_code();
}
