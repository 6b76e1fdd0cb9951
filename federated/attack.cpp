// What Byzantine clients send in experiments: sign-flipped, scaled or pure-noise updates,
// flipped labels, and "a little is enough" (ALIE) updates built from the attackers' honest ones.
#include "federated/attack.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"

namespace pare::federated {

namespace {

const std::vector<std::pair<AttackKind, std::string>>& attack_table() {
  static const std::vector<std::pair<AttackKind, std::string>> table = {
      {AttackKind::kNone, "none"},         {AttackKind::kSignFlip, "sign-flip"},
      {AttackKind::kScaling, "scaling"},   {AttackKind::kGaussian, "gaussian"},
      {AttackKind::kLabelFlip, "label-flip"}, {AttackKind::kAlie, "alie"}};
  return table;
}

// Phi^-1(p) for p in (0, 1): Acklam's rational approximation (relative error 1.15e-9), then one
// Halley step on Phi(x) - p with Phi from std::erfc, which brings it to about machine precision.
double inverse_normal_cdf(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  PARE_ASSERT(p > 0 && p < 1, "inverse normal CDF of ", p);
  const double p_low = 0.02425;
  auto tail = [&](double q) {
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  };
  double x;
  if (p < p_low) {
    x = tail(std::sqrt(-2 * std::log(p)));
  } else if (p > 1 - p_low) {
    x = -tail(std::sqrt(-2 * std::log1p(-p)));
  } else {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

}  // namespace

AttackKind parse_attack(const std::string& name) {
  std::string all;
  for (const auto& [kind, n] : attack_table()) {
    if (n == name) return kind;
    all += (all.empty() ? "" : ", ") + n;
  }
  throw InputError(detail::concat("attack '", name, "' is not one of ", all));
}

std::string attack_name(AttackKind kind) {
  for (const auto& [k, n] : attack_table())
    if (k == kind) return n;
  PARE_ASSERT(false, "attack kind ", static_cast<int>(kind), " has no name");
  return {};
}

at::Tensor attack_update(AttackKind kind, const at::Tensor& u, const AttackOptions& opts) {
  PARE_CHECK(u.defined() && u.is_floating_point(), "an update attack needs a floating-point update: got ",
             u.defined() ? c10::toString(u.scalar_type()) : "an undefined tensor");
  at::NoGradGuard no_grad;
  switch (kind) {
    case AttackKind::kSignFlip:
      PARE_CHECK_OPTION(std::isfinite(opts.flip) && opts.flip > 0, "flip", "must be finite and > 0, got ", opts.flip);
      return u.detach() * -opts.flip;
    case AttackKind::kScaling:
      PARE_CHECK_OPTION(std::isfinite(opts.scale), "scale", "must be finite, got ", opts.scale);
      return u.detach() * opts.scale;
    case AttackKind::kGaussian: {
      PARE_CHECK_OPTION(std::isfinite(opts.sigma) && opts.sigma >= 0, "sigma",
                        "(the noise's standard deviation) must be finite and >= 0, got ", opts.sigma);
      // Drawn on the CPU in float64 from the seed alone, so the noise does not depend on u's
      // device or dtype.
      auto gen = at::make_generator<at::CPUGeneratorImpl>(opts.seed);
      at::Tensor noise = at::randn(u.sizes(), gen, at::TensorOptions().dtype(at::kDouble)) * opts.sigma;
      return noise.to(u.options());
    }
    case AttackKind::kNone:
    case AttackKind::kLabelFlip:
    case AttackKind::kAlie:
      return u.detach().clone();
  }
  PARE_ASSERT(false, "attack kind ", static_cast<int>(kind));
  return {};
}

at::Tensor flip_labels(const at::Tensor& y, int64_t classes) {
  PARE_CHECK_OPTION(classes >= 1, "classes", "must be at least 1, got ", classes);
  PARE_CHECK(y.defined() && !y.is_floating_point() && !y.is_complex() && y.scalar_type() != at::kBool,
             "label flipping needs integer labels: got ",
             y.defined() ? c10::toString(y.scalar_type()) : "an undefined tensor");
  at::Tensor labels = y.detach().to(at::kLong);
  if (labels.numel()) {
    const int64_t lo = labels.min().item<int64_t>(), hi = labels.max().item<int64_t>();
    PARE_CHECK(lo >= 0 && hi < classes, "label flipping needs labels in [0, ", classes, "): got labels in [", lo,
               ", ", hi, "]");
  }
  return (classes - 1) - labels;
}

double alie_z(int64_t n, int64_t f) {
  PARE_CHECK_OPTION(n >= 1, "clients", "must be at least 1, got ", n);
  PARE_CHECK_OPTION(f >= 0, "byzantine", "(the number of attacking clients f) must be >= 0, got ", f);
  // s: the honest clients the attackers need on their side for a majority.
  const int64_t s = n / 2 + 1 - f;
  PARE_CHECK_OPTION(s >= 1, "byzantine",
                    "is too large for ALIE: it needs s = floor(n / 2 + 1) - f >= 1 (attackers short of a majority): got "
                    "s = ", s, " for n = ", n, ", f = ", f);
  PARE_CHECK_OPTION(s < n, "clients",
                    "is too small for ALIE: it needs s = floor(n / 2 + 1) - f < n, so that z = Phi^-1((n - s) / n) is "
                    "finite: got s = ", s, " for n = ", n, ", f = ", f);
  return inverse_normal_cdf(static_cast<double>(n - s) / static_cast<double>(n));
}

at::Tensor alie_update(const at::Tensor& H, int64_t n, int64_t f) {
  PARE_CHECK(H.defined() && H.dim() == 2 && H.is_floating_point() && H.size(0) >= 1,
             "ALIE needs the attackers' honest updates as a floating-point matrix H [k, d] with k >= 1: got ",
             H.defined() ? detail::concat("sizes ", H.sizes(), ", ", H.scalar_type()) : "an undefined tensor");
  const double z = alie_z(n, f);
  at::Tensor X = H.detach().to(at::kCPU, at::kDouble);
  at::Tensor mean = X.mean(0);
  at::Tensor sd = at::std(X, {0}, /*unbiased=*/false);  // population: 0 for k = 1
  return (mean - z * sd).to(at::kFloat);
}

}  // namespace pare::federated
