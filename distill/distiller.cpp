#include "distill/distiller.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "dist/shard.h"
#include "distill/teacher_cache.h"
#include "distill/vocab_parallel.h"

namespace pare::distill {

void check_distill_setup(Teacher& teacher, core::Module& student, const DistillLossOptions& loss,
                         const at::Tensor& example) {
  loss.validate();
  auto student_has = [&](const std::string& v) {
    const auto& g = student.graph();
    if (g.find_input(v) || g.is_initializer(v)) return true;
    for (auto& n : g.nodes)
      for (auto& o : n.outputs)
        if (o == v) return true;
    return false;
  };
  auto check_pairs = [&](const std::vector<ValuePair>& pairs, const char* what) {
    for (auto& p : pairs) {
      PARE_CHECK(teacher.has_value(p.teacher_value), "--", what, " ", p.teacher_value, ":",
                 p.student_value, ": ", teacher.describe(), " has no value named '",
                 p.teacher_value, "' (pare inspect lists a graph's layers)");
      PARE_CHECK(student_has(p.student_value), "--", what, " ", p.teacher_value, ":",
                 p.student_value, ": the student has no value named '", p.student_value, "'");
    }
  };
  check_pairs(loss.hints_, "hint");
  check_pairs(loss.attention_, "attention");
  check_compatible(teacher, student, example);
}

std::vector<train::EpochStats> distill(core::Module& student, Teacher& teacher,
                                const DistillLossOptions& loss_opts, const train::TrainerOptions& trainer_opts,
                                const core::TensorDataset& train, const core::TensorDataset* val,
                                const std::function<void(train::Trainer&)>& configure) {
  PARE_CHECK(train.size() > 0, "the training set '", train.name, "' is empty");
  core::require_labels(train, "distillation (the hard-label loss and the accuracy)");
  // The student, the teacher and the loss's own tensors (hint projections) live on the trainer's
  // device; pare_rt and sharded teachers stay on the CPU and return their logits on the batch's.
  const at::Device device = trainer_opts.device_;
  student.to(device);
  teacher.to(device);
  at::Tensor example = train.x.narrow(0, 0, std::min<int64_t>(2, train.size())).to(device);
  check_distill_setup(teacher, student, loss_opts, example);
  if (auto* cache = dynamic_cast<engine::CachedEngine*>(&teacher)) {
    cache->check(train, loss_opts.temperature_);
    if (trainer_opts.augment_.any())
      throw InputError(cache->describe() + " holds the teacher's outputs on the original images; augment needs a "
                       "live teacher").about("augment");
  }

  auto loss = std::make_shared<DistillLoss>(loss_opts);
  const auto student_needed = loss->student_values_needed();
  const auto teacher_needed = loss->teacher_values_needed();
  const std::string student_logits = student.graph().outputs.at(0).name;
  // The projections must exist before the optimizer is built: prepare on a first batch.
  {
    at::NoGradGuard no_grad;
    bool was_training = student.is_training();
    student.eval();
    core::Batch first{example, train.y.narrow(0, 0, example.size(0)).to(device), at::arange(example.size(0), at::kLong)};
    loss->prepare(student.forward_values({example}, student_needed), teacher.forward_batch(first, teacher_needed));
    student.train(was_training);
  }
  train::Trainer trainer(student, trainer_opts);
  trainer.set_loss(
      [&teacher, loss, student_needed, teacher_needed, student_logits](core::Module& m, const core::Batch& b) {
        auto t = teacher.forward_batch(b, teacher_needed);  // once per batch, no grad
        auto s = m.forward_values({b.x}, student_needed);
        LossParts parts = loss->compute(s, t, b.y, student_logits, "logits");
        return train::StepOutput{parts.total, s.at(student_logits), parts.parts};
      },
      loss->parameters());
  if (configure) configure(trainer);
  return trainer.fit(train, val);
}

namespace {

// A cache's checks against the windows, the temperature and the divergence it is asked to serve.
void check_cache(const engine::LmTeacherCacheFile& c, const LmDistillOptions& opts, const core::TensorDataset& train) {
  c.check(train);
  engine::check_cache_temperature(c.describe(), c.temperature, opts.temperature);
  const auto& d = opts.divergence;
  const bool needs_all = d.kind == TokenDivergence::Kind::kReverseKL ||
                         (d.kind == TokenDivergence::Kind::kJsd && d.weight == 1);
  PARE_CHECK(!(needs_all && c.kind == "lm-sampled"), c.describe(), " holds draws, not the teacher's mass on every "
             "token the student puts mass on, which the divergence ", d.str(), " needs; use fkl, jsd:BETA < 1, "
             "skl:ALPHA or topk:K, or a top-k cache");
}

// The loss of one batch: the teacher (run, sharded or cached) and the student on the batch's windows.
at::Tensor batch_loss(core::Module& m, core::Module* teacher, const LmDistillOptions& opts, const core::Batch& b,
                      double alpha, train::StepOutput& out) {
  const auto& d = opts.divergence;
  const double temp = opts.temperature;
  const bool chunked = opts.chunk_tokens != 0;
  auto student_head = [&] { return m.forward_until({b.x}, {opts.student_head.hidden, opts.student_head.weight}); };
  if (opts.sharded) {
    if (opts.sharded->report().mode == "tp") {  // the teacher's vocabulary block for every rank's tokens
      auto part = opts.sharded->forward_split(b.x);
      auto s = student_head();
      return vocab_parallel_lm_kd_loss(s.at(opts.student_head.hidden), s.at(opts.student_head.weight),
                                       {part.y, part.rows, part.begin}, b.y, d, temp, alpha, opts.chunk_tokens,
                                       opts.sharded->group(), &out.predictions);
    }
    const at::Tensor t = opts.sharded->forward(b.x);  // a pipeline's last stage sends each rank its logits
    out.logits = m.forward({b.x})[0];
    return lm_kd_loss(out.logits, t, b.y, d, temp, alpha);
  }
  if (opts.cache) {
    auto [ids, lp] = opts.cache->teacher(b.rows);
    const SparseTeacher sparse{ids.to(b.x.device()), lp.to(b.x.device())};
    if (!chunked) {
      out.logits = m.forward({b.x})[0];
      return lm_kd_loss(out.logits, sparse, b.y, d, temp, alpha);
    }
    auto s = student_head();
    return chunked_lm_kd_loss(s.at(opts.student_head.hidden), s.at(opts.student_head.weight), sparse, b.y, d, temp,
                              alpha, opts.chunk_tokens, &out.predictions);
  }
  if (!chunked) {
    at::Tensor t;
    {
      at::NoGradGuard no_grad;
      t = teacher->forward({b.x})[0];
    }
    out.logits = m.forward({b.x})[0];
    return lm_kd_loss(out.logits, t, b.y, d, temp, alpha);
  }
  std::unordered_map<std::string, at::Tensor> th;
  {
    at::NoGradGuard no_grad;
    th = teacher->forward_until({b.x}, {opts.teacher_head.hidden, opts.teacher_head.weight});
  }
  auto s = student_head();
  return chunked_lm_kd_loss(s.at(opts.student_head.hidden), s.at(opts.student_head.weight),
                            th.at(opts.teacher_head.hidden), th.at(opts.teacher_head.weight), b.y, d, temp, alpha,
                            opts.chunk_tokens, &out.predictions);
}

// The vocabulary, checked the same for both, from one window: the logits' widths, or the heads'.
int64_t check_vocabularies(core::Module& student, core::Module* teacher, const LmDistillOptions& opts,
                           const core::TensorDataset& train, const at::Device& device) {
  at::NoGradGuard no_grad;
  const bool chunked = opts.chunk_tokens != 0 || opts.sharded;
  const at::Tensor x = train.x.narrow(0, 0, 1).narrow(1, 0, std::min<int64_t>(2, train.x.size(1))).to(device);
  auto width = [&](core::Module& m, const LmHead& head, const char* who) {
    if (!chunked) return m.forward({x})[0].size(-1);
    PARE_CHECK(!head.hidden.empty() && !head.weight.empty(), "the ", who, "'s LM head is not known: the chunked "
               "and the vocabulary-parallel loss need it (or distill with chunk_tokens 0)");
    return m.forward_until({x}, {head.weight}).at(head.weight).size(-1);
  };
  const int64_t vs = width(student, opts.student_head, "student");
  const int64_t vt = teacher  ? width(*teacher, opts.teacher_head, "teacher")
                     : opts.cache ? opts.cache->vocab
                                  : opts.sharded->output_sizes().back();
  PARE_CHECK(vs == vt, "the student's vocabulary has ", vs, " tokens and the teacher's ", vt,
             ": token-level distillation needs the same vocabulary");
  return vs;
}

}  // namespace

std::vector<train::EpochStats> distill_lm(core::Module& student, core::Module* teacher, const LmDistillOptions& options,
                                          const train::TrainerOptions& trainer_opts, const core::TensorDataset& train,
                                          const core::TensorDataset* val) {
  PARE_CHECK(train.size() > 0, "the training set '", train.name, "' is empty");
  PARE_CHECK_OPTION(options.chunk_tokens >= 0 || options.chunk_tokens == LmDistillOptions::kAutoChunk, "chunk_tokens",
                    "must be >= 0 (or auto), got ", options.chunk_tokens);
  PARE_CHECK((teacher != nullptr) + (options.cache != nullptr) + (options.sharded != nullptr) == 1,
             "distill_lm takes one teacher: run, cached or sharded");
  PARE_CHECK_OPTION(options.on_policy >= 0 && options.on_policy <= 1, "on_policy", "must lie in [0, 1], got ",
                    options.on_policy);
  PARE_CHECK_OPTION(options.on_policy == 0 || (options.student_windows && !options.cache), "on_policy",
                    options.cache ? "needs a teacher that scores the student's own tokens, not a cache of its outputs "
                                    "on the text"
                                  : "needs the student's generation (student_windows)");
  if (options.sharded && options.sharded->report().mode == "tp") check_vocab_parallel(options.divergence);
  LmDistillOptions opts = options;
  const at::Device device = trainer_opts.device_;
  student.to(device);
  if (teacher) teacher->to(device);
  if (opts.cache) check_cache(*opts.cache, opts, train);
  opts.chunk_tokens = opts.chunk_for(check_vocabularies(student, teacher, opts, train, device));
  train::Trainer trainer(student, trainer_opts);
  auto batches = std::make_shared<int64_t>(0);  // for on-policy's share
  trainer.set_loss([teacher, opts, batches](core::Module& m, const core::Batch& data) {
    train::StepOutput out;
    const double i = static_cast<double>((*batches)++);
    const bool own = std::floor((i + 1) * opts.on_policy) > std::floor(i * opts.on_policy);
    core::Batch generated;
    if (own) {  // the student's continuations, scored by the teacher
      generated = data;
      std::tie(generated.x, generated.y) = opts.student_windows(m, data.x);
      out.targets = generated.y;
    }
    // On the student's own tokens the divergence alone (as GKD): their next-token loss would teach
    // the student its own samples.
    out.loss = batch_loss(m, teacher, opts, own ? generated : data, own ? 1.0 : opts.alpha, out);
    return out;
  });
  return trainer.fit(train, val);
}

std::vector<train::EpochStats> fine_tune(core::Module& student, const TeacherSource& teachers,
                                  const train::TrainerOptions& trainer, const core::TensorDataset& train,
                                  const core::TensorDataset* val, const std::function<void(train::Trainer&)>& configure) {
  if (teachers.specs.empty()) {
    train::Trainer t(student, trainer);
    if (configure) configure(t);
    return t.fit(train, val);
  }
  DistillLossOptions loss = teachers.loss;
  loss.seed(trainer.seed_);
  loss.validate();
  auto teacher = load_teachers(teachers.specs, teachers.weights, trainer.seed_);
  if (teachers.on_start) teachers.on_start(*teacher, loss);
  return distill(student, *teacher, loss, trainer, train, val, configure);
}

}  // namespace pare::distill
