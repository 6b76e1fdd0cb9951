// Remove half of a model's channels (hidden units, Conv filters, attention heads), keeping the
// graph consistent, then train one epoch to win the accuracy back and write the smaller model:
// `pare prune --method channel --epochs 1` in a few lines.
// Usage: prune_example MODEL.onnx|SPEC DATA OUT.onnx [SPARSITY]      (DATA: fashion-mnist, npy:X.npy,Y.npy)
#include <cstdio>
#include <iostream>
#include <string>

#include "compress/prune_recovery.h"
#include "core/error.h"
#include "core/onnx_io.h"
#include "core/summary.h"

int main(int argc, char** argv) try {
  if (argc < 4) return std::fprintf(stderr, "usage: %s MODEL DATA OUT.onnx [SPARSITY]\n", argv[0]), 2;
  using namespace pare;
  const core::Graph model = core::load_model(argv[1], /*seed=*/1);
  const core::TensorDataset train = core::load_dataset(argv[2], "train"), val = core::load_dataset(argv[2], "test");
  compress::PruneOptions opts;
  opts.method = "channel", opts.sparsity = argc > 4 ? std::stod(argv[4]) : 0.5;
  opts.trainer.epochs(1).lr(1e-3);
  opts.log = [](const std::string& line) { std::cout << line << "\n"; };
  const compress::PruneResult r = compress::prune_with_recovery(model, opts, &train, &val);
  core::save_onnx(r.graph, argv[3]);
  std::printf("parameters %lld -> %lld, accuracy %.4f -> %.4f pruned -> %.4f recovered\n",
              static_cast<long long>(core::summarize(model).params),
              static_cast<long long>(core::summarize(r.graph).params), r.accuracy_before, r.accuracy_pruned,
              r.accuracy_after);
  return 0;
} catch (const pare::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return e.exit_code();
}
