// The distillation losses (KD, CE, MSE, cosine, attention transfer, hints) and their weighted sum.
#include "distill/losses.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <set>

#include "core/error.h"

namespace pare::distill {
namespace {

// Every loss works in float32: half-precision teachers and float64 inputs alike.
at::Tensor as_float(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat);
}

void check_defined(const char* loss, const at::Tensor& s, const at::Tensor& t) {
  PARE_CHECK(s.defined() && t.defined(), loss, " requires a student and a teacher tensor. However, the ",
             s.defined() ? "teacher's" : "student's", " is undefined");
}

void check_same_shape(const char* loss, const at::Tensor& s, const at::Tensor& t) {
  check_defined(loss, s, t);
  PARE_CHECK(s.sizes() == t.sizes(), loss,
             " requires the student and teacher tensors to have the same shape. However, the student's is ",
             s.sizes(), " and the teacher's is ", t.sizes());
}

void check_temperature(double temperature) {
  PARE_CHECK(std::isfinite(temperature) && temperature > 0,
             "the distillation temperature must be a finite number > 0. However, it is ", temperature);
}

void check_alpha(double alpha) {
  PARE_CHECK(std::isfinite(alpha) && alpha >= 0 && alpha <= 1,
             "the distillation weight alpha must lie in [0, 1]. However, it is ", alpha);
}

void check_labels(const at::Tensor& logits, const at::Tensor& labels) {
  PARE_CHECK(labels.defined(), "cross-entropy requires labels. However, none were given");
  PARE_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0),
             "cross-entropy requires labels of shape [N] for logits [N, C]. However, the logits are ",
             logits.sizes(), " and the labels ", labels.sizes());
  PARE_CHECK(at::isIntegralType(labels.scalar_type(), /*includeBool=*/false),
             "cross-entropy requires integer class labels. However, they are ", labels.scalar_type());
  if (labels.numel() > 0) {
    const int64_t lo = labels.min().item<int64_t>(), hi = labels.max().item<int64_t>();
    PARE_CHECK(lo >= 0 && hi < logits.size(1), "cross-entropy requires labels in [0, ", logits.size(1),
               ") for ", logits.size(1), " classes. However, they range over [", lo, ", ", hi, "]");
  }
}

void check_logits(const char* loss, const at::Tensor& s, const at::Tensor& t) {
  check_same_shape(loss, s, t);
  PARE_CHECK(s.dim() == 2 && s.size(0) > 0, loss,
             " requires logits of shape [N, C] with N > 0. However, they have shape ", s.sizes());
}

at::Tensor kd_unchecked(const at::Tensor& s, const at::Tensor& t, double temperature) {
  // The same ATen ops as F.kl_div(F.log_softmax(s/T, 1), F.softmax(t/T, 1), 'batchmean') * T*T:
  // kl_div sums xlogy(q, q) - q * log_p, batchmean divides by the batch size.
  at::Tensor log_p = at::log_softmax(as_float(s) / temperature, 1);
  at::Tensor q = at::softmax(as_float(t).detach() / temperature, 1);
  return at::kl_div(log_p, q, at::Reduction::Sum) / s.size(0) * temperature * temperature;
}

at::Tensor ce_unchecked(const at::Tensor& s, const at::Tensor& labels) {
  return at::cross_entropy_loss(as_float(s), labels.to(at::kLong));
}

// Adds weight * term to total (which may still be undefined).
void accumulate(at::Tensor& total, const at::Tensor& term, double weight) {
  at::Tensor weighted = term * weight;
  total = total.defined() ? total + weighted : weighted;
}

std::string pair_name(const char* kind, const ValuePair& p) {
  return std::string(kind) + ":" + p.teacher_value + ":" + p.student_value;
}

const at::Tensor& lookup(const std::unordered_map<std::string, at::Tensor>& values, const std::string& name,
                         const char* side, const std::string& wanted_by) {
  auto it = values.find(name);
  if (it != values.end() && it->second.defined()) return it->second;
  std::set<std::string> names;
  for (const auto& kv : values) names.insert(kv.first);
  std::string have;
  for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
  throw InputError(pare::detail::concat(wanted_by, " needs the ", side, " value \"", name,
                                  "\". However, the ", side, " returned only: ",
                                  have.empty() ? "(nothing)" : have));
}

}  // namespace

at::Tensor kd_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits, double temperature) {
  check_temperature(temperature);
  check_logits("kd_loss", student_logits, teacher_logits);
  return kd_unchecked(student_logits, teacher_logits, temperature);
}

at::Tensor mixed_kd_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                         const at::Tensor& labels, double temperature, double alpha) {
  check_temperature(temperature);
  check_alpha(alpha);
  check_logits("mixed_kd_loss", student_logits, teacher_logits);
  at::Tensor total;
  if (alpha != 0) accumulate(total, kd_unchecked(student_logits, teacher_logits, temperature), alpha);
  if (alpha != 1) {
    check_labels(student_logits, labels);
    accumulate(total, ce_unchecked(student_logits, labels), 1.0 - alpha);
  }
  return total;
}

at::Tensor logits_mse_loss(const at::Tensor& student, const at::Tensor& teacher) {
  check_same_shape("logits_mse_loss", student, teacher);
  return at::mse_loss(as_float(student), as_float(teacher).detach());
}

at::Tensor cosine_loss(const at::Tensor& student, const at::Tensor& teacher) {
  check_same_shape("cosine_loss", student, teacher);
  PARE_CHECK(student.dim() >= 1 && student.size(0) > 0,
             "cosine_loss requires tensors with a batch dim N > 0. However, they have shape ", student.sizes());
  const int64_t n = student.size(0);
  at::Tensor s = as_float(student).reshape({n, -1});
  at::Tensor t = as_float(teacher).detach().reshape({n, -1});
  return (1.0 - at::cosine_similarity(s, t, 1, 1e-8)).mean();
}

at::Tensor attention_transfer_loss(const at::Tensor& student_attn, const at::Tensor& teacher_attn) {
  check_defined("attention_transfer_loss", student_attn, teacher_attn);
  at::Tensor s = as_float(student_attn), t = as_float(teacher_attn).detach();
  if (s.dim() == 3) s = s.unsqueeze(1);
  if (t.dim() == 3) t = t.unsqueeze(1);
  PARE_CHECK(s.dim() == 4 && t.dim() == 4,
             "attention_transfer_loss requires attention maps [N, H, S, S] (or [N, S, S]). However, the student's "
             "has shape ", student_attn.sizes(), " and the teacher's ", teacher_attn.sizes());
  PARE_CHECK(s.size(0) == t.size(0) && s.size(2) == t.size(2) && s.size(3) == t.size(3) && s.numel() > 0,
             "attention_transfer_loss requires the same batch size and sequence lengths for student and teacher "
             "(head counts may differ). However, the student's map has shape ", student_attn.sizes(),
             " and the teacher's ", teacher_attn.sizes());
  if (s.size(1) != t.size(1)) {
    s = s.mean(1, /*keepdim=*/true);
    t = t.mean(1, /*keepdim=*/true);
  }
  // KL(t || s) per row (a query position of one head), then the mean over rows.
  const int64_t rows = s.numel() / s.size(3);
  at::Tensor log_s = at::log(s.clamp_min(1e-12));
  return at::kl_div(log_s, t, at::Reduction::Sum) / rows;
}

// ---- HintProjection --------------------------------------------------------------------------------

HintProjection::HintProjection(const at::Tensor& student_example, const at::Tensor& teacher_example,
                               uint64_t seed) {
  check_defined("HintProjection", student_example, teacher_example);
  const auto& s = student_example;
  const auto& t = teacher_example;
  PARE_CHECK(s.dim() == t.dim() && s.dim() >= 2 && s.dim() <= 4,
             "a hint projection requires student and teacher values of the same rank, [N, C], [N, S, C] or "
             "[N, C, H, W]. However, the student's has shape ", s.sizes(), " and the teacher's ", t.sizes());
  student_shape_ = s.sizes().slice(1).vec();
  teacher_shape_ = t.sizes().slice(1).vec();
  int64_t cs = 0, ct = 0;
  if (s.dim() == 4) {
    cs = s.size(1);
    ct = t.size(1);
    pool_ = s.size(2) != t.size(2) || s.size(3) != t.size(3);
  } else {
    PARE_CHECK(s.dim() == 2 || s.size(1) == t.size(1),
               "a hint projection for [N, S, C] values requires the same sequence length S. However, the "
               "student's value has shape ", s.sizes(), " and the teacher's ", t.sizes());
    cs = s.size(-1);
    ct = t.size(-1);
  }
  if (cs == ct) return;  // identity (possibly after pooling)
  PARE_CHECK(cs > 0 && ct > 0, "a hint projection requires non-empty channel dims. However, the student's value "
             "has shape ", s.sizes(), " and the teacher's ", t.sizes());

  // nn.Linear / nn.Conv2d initialisation: kaiming_uniform(a=sqrt(5)) reduces to U(+-1/sqrt(fan_in)).
  kind_ = s.dim() == 4 ? Kind::kConv1x1 : Kind::kLinear;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(cs));
  std::vector<int64_t> wshape = {ct, cs};
  if (kind_ == Kind::kConv1x1) wshape = {ct, cs, 1, 1};
  weight_ = at::empty(wshape, at::kFloat).uniform_(-bound, bound, gen).to(s.device());
  bias_ = at::empty({ct}, at::kFloat).uniform_(-bound, bound, gen).to(s.device());
  weight_.requires_grad_(true);
  bias_.requires_grad_(true);
}

at::Tensor HintProjection::project(const at::Tensor& s) const {
  PARE_CHECK(s.defined() && s.dim() == static_cast<int64_t>(student_shape_.size()) + 1 &&
                 s.sizes().slice(1) == at::IntArrayRef(student_shape_),
             "a hint projection built for student values [N, ", at::IntArrayRef(student_shape_),
             "] (past the batch dim) was given shape ", s.defined() ? s.sizes() : at::IntArrayRef());
  at::Tensor x = as_float(s);
  if (pool_) x = at::adaptive_avg_pool2d(x, {teacher_shape_[1], teacher_shape_[2]});
  switch (kind_) {
    case Kind::kIdentity: return x;
    case Kind::kLinear: return at::linear(x, weight_, bias_);
    case Kind::kConv1x1: return at::conv2d(x, weight_, bias_);
  }
  throw InternalError("unknown HintProjection kind");
}

std::vector<at::Tensor> HintProjection::parameters() const {
  if (kind_ == Kind::kIdentity) return {};
  return {weight_, bias_};
}

std::map<std::string, at::Tensor> HintProjection::state() const {
  if (kind_ == Kind::kIdentity) return {};
  return {{"weight", weight_.detach()}, {"bias", bias_.detach()}};
}

void HintProjection::load_state(const std::map<std::string, at::Tensor>& state) {
  auto mine = this->state();
  for (const auto& kv : state)
    PARE_CHECK(mine.count(kv.first), "a hint projection's state has only ",
               kind_ == Kind::kIdentity ? "no tensors (it is the identity)" : "\"weight\" and \"bias\"",
               ". However, it was given \"", kv.first, "\"");
  at::NoGradGuard no_grad;
  for (auto& kv : mine) {
    auto it = state.find(kv.first);
    PARE_CHECK(it != state.end() && it->second.defined(), "a hint projection's state requires \"", kv.first,
               "\". However, it is missing");
    PARE_CHECK(it->second.sizes() == kv.second.sizes(), "a hint projection's \"", kv.first, "\" must have shape ",
               kv.second.sizes(), ". However, the saved one has shape ", it->second.sizes());
    kv.second.copy_(it->second);
  }
}

at::Tensor hint_loss(const at::Tensor& student_feature, const at::Tensor& teacher_feature,
                     const HintProjection& proj) {
  check_defined("hint_loss", student_feature, teacher_feature);
  at::Tensor p = proj.project(student_feature);
  PARE_CHECK(p.sizes() == teacher_feature.sizes(),
             "hint_loss requires the projected student feature to have the teacher's shape. However, it has "
             "shape ", p.sizes(), " and the teacher's ", teacher_feature.sizes());
  return at::mse_loss(p, as_float(teacher_feature).detach());
}

// ---- DistillLoss -----------------------------------------------------------------------------------

void DistillLossOptions::validate() const {
  check_temperature(temperature_);
  check_alpha(alpha_);
  PARE_CHECK(std::isfinite(mse_weight_) && mse_weight_ >= 0,
             "the logits MSE weight must be a finite number >= 0. However, it is ", mse_weight_);
  PARE_CHECK(std::isfinite(cosine_weight_) && cosine_weight_ >= 0,
             "the cosine loss weight must be a finite number >= 0. However, it is ", cosine_weight_);
  for (const auto* list : {&hints_, &attention_}) {
    const char* kind = list == &hints_ ? "hint" : "attention";
    std::set<std::pair<std::string, std::string>> seen;
    for (const auto& p : *list) {
      PARE_CHECK(!p.teacher_value.empty() && !p.student_value.empty(), "a ", kind,
                 " pairing requires a teacher and a student value name. However, got \"", p.teacher_value,
                 "\" and \"", p.student_value, "\"");
      PARE_CHECK(std::isfinite(p.weight) && p.weight >= 0, "the ", kind, " weight must be a finite number >= 0. "
                 "However, the one for teacher \"", p.teacher_value, "\" / student \"", p.student_value, "\" is ",
                 p.weight);
      PARE_CHECK(seen.insert({p.teacher_value, p.student_value}).second, "each ", kind,
                 " pairing may be given once. However, teacher \"", p.teacher_value, "\" / student \"",
                 p.student_value, "\" is given twice");
    }
  }
}

DistillLoss::DistillLoss(DistillLossOptions opts) : opts_(std::move(opts)) { opts_.validate(); }

void DistillLoss::prepare(const std::unordered_map<std::string, at::Tensor>& student_values,
                          const std::unordered_map<std::string, at::Tensor>& teacher_values) {
  if (prepared_) return;
  std::vector<HintProjection> built;
  for (size_t i = 0; i < opts_.hints_.size(); ++i) {
    const ValuePair& h = opts_.hints_[i];
    const std::string name = pair_name("hint", h);
    const at::Tensor& s = lookup(student_values, h.student_value, "student", name);
    const at::Tensor& t = lookup(teacher_values, h.teacher_value, "teacher", name);
    try {
      built.emplace_back(s, t, opts_.seed_ + i);
    } catch (const InputError& e) {
      throw InputError(name + ": " + e.what());
    }
  }
  projections_ = std::move(built);
  prepared_ = true;
  if (!pending_state_.empty()) {
    auto state = std::move(pending_state_);
    pending_state_.clear();
    apply_state(state);
  }
}

LossParts DistillLoss::compute(const std::unordered_map<std::string, at::Tensor>& student_values,
                               const std::unordered_map<std::string, at::Tensor>& teacher_values,
                               const at::Tensor& labels, const std::string& student_logits_name,
                               const std::string& teacher_logits_name) {
  prepare(student_values, teacher_values);
  LossParts out;
  const at::Tensor& s = lookup(student_values, student_logits_name, "student", "the distillation loss");
  const at::Tensor& t = lookup(teacher_values, teacher_logits_name, "teacher", "the distillation loss");
  check_logits("the distillation loss", s, t);
  auto add = [&](const std::string& name, const at::Tensor& term, double weight) {
    out.parts[name] = term.detach().item<double>();
    accumulate(out.total, term, weight);
  };
  // Same order and arithmetic as mixed_kd_loss, so the plain KD + CE case matches it bit for bit.
  const double alpha = opts_.alpha_;
  if (alpha != 0) add("kd", kd_unchecked(s, t, opts_.temperature_), alpha);
  if (alpha != 1) {
    check_labels(s, labels);
    add("ce", ce_unchecked(s, labels), 1.0 - alpha);
  }
  if (opts_.mse_weight_ != 0) add("mse", logits_mse_loss(s, t), opts_.mse_weight_);
  if (opts_.cosine_weight_ != 0) add("cosine", cosine_loss(s, t), opts_.cosine_weight_);
  for (size_t i = 0; i < opts_.hints_.size(); ++i) {
    const ValuePair& h = opts_.hints_[i];
    if (h.weight == 0) continue;
    const std::string name = pair_name("hint", h);
    const at::Tensor& sv = lookup(student_values, h.student_value, "student", name);
    const at::Tensor& tv = lookup(teacher_values, h.teacher_value, "teacher", name);
    try {
      add(name, hint_loss(sv, tv, projections_[i]), h.weight);
    } catch (const InputError& e) {
      throw InputError(name + ": " + e.what());
    }
  }
  for (const ValuePair& a : opts_.attention_) {
    if (a.weight == 0) continue;
    const std::string name = pair_name("attn", a);
    const at::Tensor& sv = lookup(student_values, a.student_value, "student", name);
    const at::Tensor& tv = lookup(teacher_values, a.teacher_value, "teacher", name);
    try {
      add(name, attention_transfer_loss(sv, tv), a.weight);
    } catch (const InputError& e) {
      throw InputError(name + ": " + e.what());
    }
  }
  PARE_ASSERT(out.total.defined(), "the distillation loss has no term with a positive weight");
  return out;
}

std::vector<at::Tensor> DistillLoss::parameters() const {
  std::vector<at::Tensor> params;
  for (const auto& p : projections_)
    for (const auto& t : p.parameters()) params.push_back(t);
  return params;
}

namespace {
std::vector<std::string> needed(const DistillLossOptions& o, bool student) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto* list : {&o.hints_, &o.attention_})
    for (const auto& p : *list) {
      const std::string& n = student ? p.student_value : p.teacher_value;
      if (p.weight != 0 || list == &o.hints_)  // hints need values for prepare() even at weight 0
        if (seen.insert(n).second) names.push_back(n);
    }
  return names;
}
}  // namespace

std::vector<std::string> DistillLoss::student_values_needed() const { return needed(opts_, true); }
std::vector<std::string> DistillLoss::teacher_values_needed() const { return needed(opts_, false); }

std::map<std::string, at::Tensor> DistillLoss::state() const {
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < projections_.size(); ++i)
    for (const auto& kv : projections_[i].state())
      out[pair_name("hint", opts_.hints_[i]) + "." + kv.first] = kv.second;
  return out;
}

void DistillLoss::load_state(const std::map<std::string, at::Tensor>& state) {
  if (!prepared_) {
    pending_state_ = state;
    return;
  }
  apply_state(state);
}

void DistillLoss::apply_state(const std::map<std::string, at::Tensor>& state) {
  // Value names contain dots ("layer0.attn.softmax"), so keys are matched whole, never by prefix.
  std::map<std::string, std::pair<size_t, std::string>> owner;
  for (size_t i = 0; i < projections_.size(); ++i)
    for (const char* sub : {"weight", "bias"})
      owner[pair_name("hint", opts_.hints_[i]) + "." + sub] = {i, sub};
  std::vector<std::map<std::string, at::Tensor>> per_hint(projections_.size());
  for (const auto& kv : state) {
    auto it = owner.find(kv.first);
    PARE_CHECK(it != owner.end(), "the distillation loss state has tensors \"hint:<teacher>:<student>.weight\" "
               "and \".bias\" for the configured hints only. However, it was given \"", kv.first, "\"");
    per_hint[it->second.first][it->second.second] = kv.second;
  }
  for (size_t i = 0; i < projections_.size(); ++i) {
    try {
      projections_[i].load_state(per_hint[i]);
    } catch (const InputError& e) {
      throw InputError(pair_name("hint", opts_.hints_[i]) + ": " + e.what());
    }
  }
}

}  // namespace pare::distill
