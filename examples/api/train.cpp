// Train a model from a zoo spec (or an ONNX file) on a data set: `pare train` in a few lines.
// Usage: train_example MODEL DATA OUT.onnx [EPOCHS]     (e.g. lenet5 fashion-mnist lenet5.onnx 1)
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/data.h"
#include "core/onnx_io.h"
#include "train/trainer.h"

int main(int argc, char** argv) try {
  if (argc < 4) return std::fprintf(stderr, "usage: %s MODEL DATA OUT.onnx [EPOCHS]\n", argv[0]), 2;
  using namespace pare;
  core::Module model(core::load_model(argv[1], /*seed=*/1));
  auto train = core::load_dataset(argv[2], "train"), test = core::load_dataset(argv[2], "test");
  train::Trainer trainer(model, train::TrainerOptions()
                                    .epochs(argc > 4 ? std::stoi(argv[4]) : 1)
                                    .batch_size(128)
                                    .lr(1e-3)
                                    .schedule("cosine"));
  auto history = trainer.fit(train, &test);
  core::save_onnx(model.to_graph(), argv[3]);
  std::printf("test accuracy %.2f%% after %zu epoch(s)\n", history.back().val_accuracy * 100, history.size());
  return 0;
} catch (const pare::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return e.exit_code();
}
