// Teacher composition: ensembles of engines, their weights, and loading several teachers.
#include "distill/teacher.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace pare::distill {

// ---------------------------------------------------------------------------------------------
// EnsembleTeacher

std::vector<double> normalize_teacher_weights(const std::vector<double>& weights, size_t n) {
  PARE_CHECK(n >= 1, "no teacher given");
  if (weights.empty()) return std::vector<double>(n, 1.0 / static_cast<double>(n));
  PARE_CHECK(weights.size() == n, "teacher weights: expected one per teacher (", n, "), got ",
             weights.size());
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    PARE_CHECK(std::isfinite(weights[i]) && weights[i] >= 0, "teacher weights must be finite and >= 0; weight ",
               i + 1, " is ", weights[i]);
    sum += weights[i];
  }
  PARE_CHECK(sum > 0, "teacher weights sum to 0; at least one must be > 0");
  std::vector<double> r(weights);
  for (auto& w : r) w /= sum;
  return r;
}

EnsembleTeacher::EnsembleTeacher(std::vector<std::unique_ptr<Teacher>> members, std::vector<double> weights)
    : members_(std::move(members)) {
  PARE_CHECK(!members_.empty(), "an ensemble teacher needs at least one member");
  for (const auto& m : members_) PARE_ASSERT(m != nullptr, "null ensemble member");
  weights_ = normalize_teacher_weights(weights, members_.size());
}

std::unordered_map<std::string, at::Tensor> EnsembleTeacher::forward(const at::Tensor& x,
                                                                     const std::vector<std::string>& values) {
  for (const auto& v : values)
    PARE_CHECK(v == "logits", describe(), " provides logits only, not value '", v,
               "' (hint and attention losses need a single ONNX or zoo teacher)");
  std::vector<at::Tensor> all;  // kept only to sort them (median, trimmed mean); the mean keeps a sum
  at::Tensor first, acc;
  for (size_t i = 0; i < members_.size(); ++i) {
    at::Tensor l = members_[i]->logits(x);
    if (i == 0) first = l;
    PARE_CHECK(l.sizes() == first.sizes(), "ensemble members disagree: ", members_[0]->describe(), " gives logits ",
               first.sizes(), " but ", members_[i]->describe(), " gives ", l.sizes());
    // acc + l * w, not add_(l, alpha): the same rounding as the textbook formula.
    if (combine_ == Combine::kMean)
      acc = i == 0 ? l * weights_[0] : acc + l * weights_[i];
    else
      all.push_back(std::move(l));
  }
  if (combine_ == Combine::kMean) return {{"logits", acc}};
  const at::Tensor sorted = std::get<0>(at::stack(all).sort(0));
  const int64_t n = sorted.size(0);
  if (combine_ == Combine::kMedian)
    return {{"logits", n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) * 0.5}};
  const int64_t k = int64_t(trim_ * double(n));
  return {{"logits", sorted.narrow(0, k, n - 2 * k).mean(0)}};
}

void EnsembleTeacher::set_combine(Combine c, double trim) {
  PARE_CHECK_OPTION(trim >= 0 && trim < 0.5, "trim", "must be in [0, 0.5), got ", trim);
  combine_ = c;
  trim_ = trim;
}

bool EnsembleTeacher::has_value(const std::string& name) const { return name == "logits"; }

int64_t EnsembleTeacher::num_classes(const at::Tensor& example) {
  int64_t k = members_[0]->num_classes(example);
  for (size_t i = 1; i < members_.size(); ++i) {
    int64_t ki = members_[i]->num_classes(example);
    PARE_CHECK(ki == k, "ensemble members disagree: ", members_[0]->describe(), " has ", k, " classes but ",
               members_[i]->describe(), " has ", ki);
  }
  return k;
}

std::string EnsembleTeacher::describe() const {
  std::ostringstream os;
  os << "ensemble of " << members_.size() << " teachers (";
  for (size_t i = 0; i < members_.size(); ++i)
    os << (i ? ", " : "") << members_[i]->describe() << " weight " << weights_[i];
  os << ")";
  return os.str();
}

void EnsembleTeacher::to(const at::Device& d) {
  for (auto& m : members_) m->to(d);
}

std::unique_ptr<Teacher> load_teachers(const std::vector<std::string>& specs, const std::vector<double>& weights,
                                       uint64_t seed, engine::Kind kind) {
  PARE_CHECK(!specs.empty(), "no teacher given");
  auto w = normalize_teacher_weights(weights, specs.size());  // before loading anything big
  if (specs.size() == 1) return engine::load(specs[0], seed, kind);
  std::vector<std::unique_ptr<Teacher>> members;
  for (const auto& s : specs) members.push_back(engine::load(s, seed, kind));
  return std::make_unique<EnsembleTeacher>(std::move(members), std::move(w));
}

}  // namespace pare::distill
