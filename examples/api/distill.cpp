// Distill an MLP student from a teacher: `pare distill` in about 15 lines.
// Usage: distill_example TEACHER.onnx|SPEC DATA (e.g. fashion-mnist) OUT.onnx [EPOCHS]
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/data.h"
#include "core/onnx_io.h"
#include "distill/distiller.h"

int main(int argc, char** argv) try {
  if (argc < 4) return std::fprintf(stderr, "usage: %s TEACHER DATA OUT.onnx [EPOCHS]\n", argv[0]), 2;
  using namespace pare;
  auto teacher = engine::load(argv[1]);
  core::Module student(core::load_model("mlp:784-300-100-10", /*seed=*/1));
  auto train = core::load_dataset(argv[2], "train"), test = core::load_dataset(argv[2], "test");
  auto history = distill::distill(student, *teacher, distill::DistillLossOptions().temperature(4).alpha(0.9),
                                  train::TrainerOptions().epochs(argc > 4 ? std::stoi(argv[4]) : 1).batch_size(128),
                                  train, &test);
  core::save_onnx(student.to_graph(), argv[3]);
  std::printf("student accuracy %.2f%%\n", history.back().val_accuracy * 100);
  return 0;
} catch (const pare::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return e.exit_code();
}
