// Sparsity schedules (one-shot, iterative, Zhu & Gupta's gradual) and masks kept applied during
// training.
#include "prune/schedule.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/module.h"

namespace pare::prune {

SparsitySchedule::SparsitySchedule(Kind kind, double final_sparsity, double initial_sparsity, int64_t begin,
                                   int64_t end, int64_t every, int64_t n)
    : kind_(kind), final_(final_sparsity), initial_(initial_sparsity), begin_(begin), end_(end), every_(every), n_(n) {}

SparsitySchedule SparsitySchedule::one_shot(double final_sparsity) {
  return SparsitySchedule(Kind::kOneShot, final_sparsity, 0, 0, 0, 1, 1);
}

SparsitySchedule SparsitySchedule::iterative(double final_sparsity, int64_t iterations, int64_t begin, int64_t end) {
  PARE_CHECK(iterations >= 1, "iterative pruning needs at least one iteration, got ", iterations);
  PARE_CHECK(begin >= 0 && end >= begin, "iterative pruning needs 0 <= begin <= end, got ", begin, "..", end);
  return SparsitySchedule(Kind::kIterative, final_sparsity, 0, begin, end,
                          std::max<int64_t>(1, (end - begin) / iterations), iterations);
}

SparsitySchedule SparsitySchedule::gradual(double final_sparsity, double initial_sparsity, int64_t t0,
                                           int64_t n, int64_t dt) {
  PARE_CHECK(n >= 1 && dt >= 1 && t0 >= 0, "gradual pruning needs n >= 1 updates every dt >= 1 steps from t0 >= 0, got n=",
             n, " dt=", dt, " t0=", t0);
  PARE_CHECK(initial_sparsity >= 0 && initial_sparsity <= final_sparsity,
             "gradual pruning needs 0 <= initial sparsity <= final sparsity, got ", initial_sparsity, " and ",
             final_sparsity);
  return SparsitySchedule(Kind::kGradual, final_sparsity, initial_sparsity, t0, t0 + n * dt, dt, n);
}

SparsitySchedule SparsitySchedule::over_training(const std::string& kind, double final_sparsity, int64_t total_steps,
                                                 double end, int64_t every, int64_t iterations) {
  PARE_CHECK_OPTION(kind == "oneshot" || kind == "iterative" || kind == "gradual", "schedule",
                    "must be oneshot, iterative or gradual, got '", kind, "'");
  PARE_CHECK_OPTION(end > 0 && end <= 1, "prune_end", "must lie in (0, 1], got ", end);
  PARE_CHECK_OPTION(every >= 0, "prune_every", "must be >= 0, got ", every);
  PARE_CHECK_OPTION(iterations >= 1, "iterations", "must be at least 1, got ", iterations);
  if (kind == "oneshot") return one_shot(final_sparsity);
  const int64_t last = std::max<int64_t>(1, static_cast<int64_t>(end * total_steps));
  if (kind == "iterative") return iterative(final_sparsity, iterations, 0, last);
  const int64_t dt = every > 0 ? every : std::max<int64_t>(1, last / 20);
  return gradual(final_sparsity, 0.0, 0, std::max<int64_t>(1, last / dt), dt);
}

double SparsitySchedule::at(int64_t step) const {
  switch (kind_) {
    case Kind::kOneShot:
      return final_;
    case Kind::kIterative: {
      if (step < begin_) return 0;
      const int64_t done = std::min(n_, (step - begin_) / every_ + 1);
      return final_ * static_cast<double>(done) / static_cast<double>(n_);
    }
    case Kind::kGradual: {
      if (step < begin_) return 0;
      // Held constant between updates, as the masks are.
      const int64_t t = std::min(end_, begin_ + (step - begin_) / every_ * every_);
      const double frac = 1.0 - static_cast<double>(t - begin_) / static_cast<double>(end_ - begin_);
      return final_ + (initial_ - final_) * frac * frac * frac;
    }
  }
  return final_;
}

bool SparsitySchedule::updates_at(int64_t step) const {
  switch (kind_) {
    case Kind::kOneShot:
      return step == 0;
    case Kind::kIterative:
      return step >= begin_ && (step - begin_) % every_ == 0 && (step - begin_) / every_ < n_;
    case Kind::kGradual:
      return step >= begin_ && step <= end_ && (step - begin_) % every_ == 0;
  }
  return false;
}

int64_t SparsitySchedule::last_update() const {
  switch (kind_) {
    case Kind::kOneShot: return 0;
    case Kind::kIterative: return begin_ + (n_ - 1) * every_;
    case Kind::kGradual: return end_;
  }
  return 0;
}

std::string SparsitySchedule::describe() const {
  std::ostringstream os;
  switch (kind_) {
    case Kind::kOneShot: os << "one-shot " << final_; break;
    case Kind::kIterative:
      os << "iterative to " << final_ << " in " << n_ << " steps of " << final_ / n_ << ", every " << every_
         << " optimizer steps from " << begin_;
      break;
    case Kind::kGradual:
      os << "gradual " << initial_ << " -> " << final_ << " over steps " << begin_ << ".." << end_ << ", every "
         << every_;
      break;
  }
  return os.str();
}

MaskedPruning::MaskedPruning(core::Module& model, std::vector<WeightTarget> targets, MaskOptions opts,
                             SparsitySchedule schedule)
    : model_(model), targets_(std::move(targets)), opts_(opts), schedule_(schedule) {}

void MaskedPruning::update(double sparsity) {
  target_ = sparsity;
  skipped_.clear();
  masks_ = compute_masks(lookup_in(model_), targets_, MaskOptions(opts_).sparsity(sparsity), &skipped_);
}

void MaskedPruning::start() {
  if (schedule_.updates_at(0)) update(schedule_.at(0));
  apply_masks(model_, masks_);
}

void MaskedPruning::before_step() {
  if (!resync_) return;
  resync_ = false;
  at::NoGradGuard no_grad;
  masks_.clear();
  for (auto& t : targets_) {
    at::Tensor w = model_.initializer(t.weight);
    masks_[t.weight] = w.detach().ne(0).to(w.dtype());
  }
}

void MaskedPruning::after_step(int64_t step) {
  // N:M masks are chosen once (at step 0): their sparsity does not follow a schedule.
  if (opts_.method_ == MaskMethod::kMagnitude && step > 0 && schedule_.updates_at(step)) {
    apply_masks(model_, masks_);  // the step just taken must not revive pruned weights
    update(schedule_.at(step));
  }
  apply_masks(model_, masks_);
}

}  // namespace pare::prune
