// Distillation = the Trainer's loop + a Teacher + a DistillLoss. This is what `pare distill` runs.
//
//   auto teacher = engine::load("teacher.onnx");
//   core::Module student(core::load_model("mlp:784-300-100-10", 1));
//   auto history = distill::distill(student, *teacher,
//       distill::DistillLossOptions().temperature(4).alpha(0.9),
//       train::TrainerOptions().epochs(10).lr(1e-3), train, &test);
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/data.h"
#include "core/module.h"
#include "distill/losses.h"
#include "distill/teacher.h"
#include "train/trainer.h"

namespace pare::distill {

/// Checks that every value a hint or attention term names exists in the teacher and the student
/// and that their class counts agree. Throws InputError naming the value or the models.
void check_distill_setup(Teacher& teacher, core::Module& student, const DistillLossOptions& loss,
                         const at::Tensor& example);

/// Trains `student` from `teacher` on `train` (labels feed the CE term), evaluating on `val`.
/// The teacher runs once per batch, without gradients, in eval mode. Hint projections are trained
/// with the student and saved in its checkpoints, never in the student itself. `configure`, when
/// given, is called with the trainer before training starts (to add callbacks such as a pruning
/// schedule's).
std::vector<train::EpochStats> distill(core::Module& student, Teacher& teacher,
                                const DistillLossOptions& loss, const train::TrainerOptions& trainer,
                                const core::TensorDataset& train, const core::TensorDataset* val,
                                const std::function<void(train::Trainer&)>& configure = nullptr);

/// Where a student learns from, for fine_tune: teachers (zoo specs or model files, weighted as
/// an ensemble) and the distillation loss; no teachers means cross entropy alone.
struct TeacherSource {
  std::vector<std::string> specs;
  std::vector<double> weights;  ///< empty: equal weights
  DistillLossOptions loss;
  /// Called once the teachers are loaded and the loss validated (to report them).
  std::function<void(const Teacher&, const DistillLossOptions&)> on_start;
};

/// Trains `student` on `train`, evaluating on `val`: distils from `teachers` when it names any
/// (the loss takes the trainer's seed and is validated), else fits with cross entropy. The
/// recovery step of pruning with recovery and of quantization-aware training.
std::vector<train::EpochStats> fine_tune(core::Module& student, const TeacherSource& teachers,
                                  const train::TrainerOptions& trainer, const core::TensorDataset& train,
                                  const core::TensorDataset* val,
                                  const std::function<void(train::Trainer&)>& configure = nullptr);

}  // namespace pare::distill
