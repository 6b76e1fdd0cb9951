// Distillation = the Trainer's loop + a Teacher + a DistillLoss. This is what `pare distill` runs.
//
//   auto teacher = engine::load("teacher.onnx");
//   core::Module student(core::load_model("mlp:784-300-100-10", 1));
//   auto history = distill::distill(student, *teacher,
//       distill::DistillLossOptions().temperature(4).alpha(0.9),
//       train::TrainerOptions().epochs(10).lr(1e-3), train, &test);
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/data.h"
#include "core/module.h"
#include "dist/shard.h"
#include "distill/losses.h"
#include "distill/teacher.h"
#include "engine/cache.h"
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

/// A language model's logits as hidden @ head: the value of its last hidden state (after the final
/// norm) and the initializer of its head [hidden, vocab] (lm::head_of finds them).
struct LmHead {
  std::string hidden, weight;
};

/// How distill_lm distills a language model (`pare distill` on text).
struct LmDistillOptions {
  TokenDivergence divergence;  ///< fkl unless set
  double temperature = 1.0;
  double alpha = 0.5;  ///< weight of the divergence (times T*T); the next-token cross entropy gets 1 - alpha
  /// Tokens per chunk of chunked_lm_kd_loss; 0 computes the whole [tokens, vocabulary] logits of both
  /// models (lm_kd_loss), which the heads are then not needed for; kAutoChunk makes chunks of 2^22
  /// logits (32 tokens at Llama 3's vocabulary of 128,256, 512 at 8,192): 16 MB in fp32, under the
  /// 32 MB past which pare's malloc maps and unmaps each allocation (page faults every chunk cost
  /// a third of a KD step at 64 MB chunks).
  static constexpr int64_t kAutoChunk = -1;
  int64_t chunk_tokens = kAutoChunk;
  /// chunk_tokens for a vocabulary of `vocab` tokens, kAutoChunk resolved.
  int64_t chunk_for(int64_t vocab) const {
    return chunk_tokens == kAutoChunk ? std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(1, vocab)) : chunk_tokens;
  }
  LmHead student_head, teacher_head;
  /// The teacher read from a cache instead of run (`--teacher cache:DIR`), for windows built from
  /// the same text: its divergence is computed over the cached tokens' buckets (lm_kd_loss's sparse
  /// form). Set, distill_lm takes no teacher module.
  std::shared_ptr<const engine::LmTeacherCacheFile> cache;
  /// The teacher sharded over the ranks (`--teacher-parallel`). Tensor parallel, built with
  /// split_output, each rank holds its vocabulary block of the teacher's logits for every rank's
  /// tokens and the loss is vocab_parallel_lm_kd_loss (no logits gathered; the student's heads
  /// are needed, topk:K refused); pipeline parallel, each rank gets its tokens' whole logits and the
  /// loss is lm_kd_loss on the whole logits (not chunked). Set, distill_lm takes no teacher module.
  std::shared_ptr<dist::ShardedModel> sharded;
  /// On-policy distillation (GKD, Agarwal et al. 2024): in a share `on_policy` of the batches,
  /// spread evenly (batch i when floor((i + 1) share) > floor(i share)), `student_windows` replaces
  /// the batch's windows and targets with the student's own continuations of their first tokens
  /// (targets -100 before them), which the teacher then scores; the divergence alone is taken on
  /// them (alpha 1 in those batches: a next-token loss would teach the student its own samples).
  /// distill/ knows no language model: lm::student_windows makes the function.
  double on_policy = 0;
  std::function<std::pair<at::Tensor, at::Tensor>(const core::Module& student, const at::Tensor& x)> student_windows;
};

/// Trains the language model `student` from `teacher` (a frozen Module of the same vocabulary, or
/// null with opts.cache or opts.sharded) on
/// token windows (lm::token_windows: x [N, S] ids, y [N, S] next tokens, -100 for tokens that do not
/// count), with lm_kd_loss or, chunked, chunked_lm_kd_loss. The teacher runs once per batch without
/// gradients, only as far as its last hidden state when chunked. Accuracy counts next tokens; the
/// validation loss is the student's next-token cross entropy. Throws InputError when the vocabularies
/// differ, a head is not found, or a cache was built from other windows, at another temperature, or
/// cannot serve the divergence (rkl and jsd:1 from sampled draws).
std::vector<train::EpochStats> distill_lm(core::Module& student, core::Module* teacher, const LmDistillOptions& opts,
                                          const train::TrainerOptions& trainer, const core::TensorDataset& train,
                                          const core::TensorDataset* val);

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
