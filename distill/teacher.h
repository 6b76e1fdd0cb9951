// Teachers: the models a student learns from. A teacher is any engine (engine/engine.h: a graph
// on libtorch or pare_rt, a sharded graph, TorchScript, a cache); this header combines them.
//
//   auto teacher = distill::load_teachers({"cnn.onnx"}, {});                  // one teacher
//   auto ensemble = distill::load_teachers({"a.onnx", "b.pt"}, {0.7, 0.3});   // weighted mean of logits
//   engine::check_compatible(*teacher, student, x_example);                   // same number of classes
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace pare::distill {

/// What distillation learns from: any engine, run once per step.
using Teacher = engine::Engine;

/// Several teachers with weights, normalised to sum 1. The logits are the weighted mean of the
/// members' logits (averaging logits rather than probabilities, the common practice for
/// distilling from an ensemble; with a temperature the KD loss then softens the averaged logits).
/// An ensemble provides logits only: requesting any other value throws InputError.
class EnsembleTeacher : public Teacher {
 public:
  /// `weights`: one per member, each finite and >= 0, summing to > 0; empty means equal weights.
  /// Throws InputError otherwise, or when `members` is empty.
  EnsembleTeacher(std::vector<std::unique_ptr<Teacher>> members, std::vector<double> weights);

  /// How the members' logits combine: the weighted mean (default), or, robust to a few members
  /// that are wrong on purpose (federated distillation with Byzantine clients), the
  /// coordinate-wise median (numpy's: the mean of the two middle values for an even count) or the
  /// trimmed mean that drops floor(trim * n) values at each end (weights unused by both).
  enum class Combine { kMean, kMedian, kTrimmedMean };
  /// Throws InputError when trim is outside [0, 0.5).
  void set_combine(Combine c, double trim = 0.2);

  /// Throws InputError naming both members when their logits differ in shape.
  std::unordered_map<std::string, at::Tensor> forward(const at::Tensor& x,
                                                      const std::vector<std::string>& values) override;
  bool has_value(const std::string& name) const override;
  /// Throws InputError naming two members that disagree on the number of classes.
  int64_t num_classes(const at::Tensor& example) override;
  std::string describe() const override;
  void to(const at::Device& d) override;

  size_t size() const { return members_.size(); }
  Teacher& member(size_t i) { return *members_.at(i); }
  /// Normalised weights (sum 1), one per member.
  const std::vector<double>& weights() const { return weights_; }

 private:
  std::vector<std::unique_ptr<Teacher>> members_;
  std::vector<double> weights_;
  Combine combine_ = Combine::kMean;
  double trim_ = 0.2;
};

/// Checks teacher weights for `n` teachers and returns them normalised to sum 1 (empty: equal).
/// Throws InputError when the count differs from `n`, a weight is negative or not finite, or the
/// sum is 0.
std::vector<double> normalize_teacher_weights(const std::vector<double>& weights, size_t n);

/// Several specs with weights (see normalize_teacher_weights; empty = equal). One spec returns that
/// teacher itself (its weight must still be valid); more return an EnsembleTeacher. Every zoo spec
/// is built with the same `seed`. Throws InputError for no specs.
std::unique_ptr<Teacher> load_teachers(const std::vector<std::string>& specs,
                                       const std::vector<double>& weights, uint64_t seed = 0,
                                       engine::Kind kind = engine::Kind::kTorch);

}  // namespace pare::distill
