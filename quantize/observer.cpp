// Quantization parameters, fake quantization, SQNR and the calibration observers (min-max,
// percentile, KL entropy and MSE over a histogram of |x|).
#include "quantize/observer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace pare::quantize {

CalibMethod parse_calib_method(const std::string& s) {
  if (s == "minmax") return CalibMethod::kMinMax;
  if (s == "percentile") return CalibMethod::kPercentile;
  if (s == "entropy") return CalibMethod::kEntropy;
  if (s == "mse") return CalibMethod::kMse;
  throw InputError("calibration method must be minmax, percentile, entropy or mse, got '" + s + "'");
}

const char* calib_method_name(CalibMethod m) {
  switch (m) {
    case CalibMethod::kMinMax: return "minmax";
    case CalibMethod::kPercentile: return "percentile";
    case CalibMethod::kEntropy: return "entropy";
    case CalibMethod::kMse: return "mse";
  }
  return "?";
}

QuantParams params_from_range(std::pair<double, double> range, QScheme scheme) {
  const double lo = std::min(range.first, 0.0), hi = std::max(range.second, 0.0);
  QuantParams p;
  if (scheme == QScheme::kSymmetricInt8) {
    const double a = std::max(-lo, hi);
    p.qmin = -127;
    p.qmax = 127;
    p.scale = at::scalar_tensor(a > 0 ? a / 127.0 : 1.0, at::kFloat);
    p.zero_point = at::scalar_tensor(0, at::kChar);
    return p;
  }
  p.qmin = 0;
  p.qmax = 255;
  const float scale = hi > lo ? static_cast<float>((hi - lo) / 255.0) : 1.0f;
  const double zp = std::clamp(std::nearbyint(-lo / scale), 0.0, 255.0);
  p.scale = at::scalar_tensor(scale, at::kFloat);
  p.zero_point = at::scalar_tensor(static_cast<int64_t>(zp), at::kByte);
  return p;
}

QuantParams weight_params(const at::Tensor& w, int64_t axis, int bits) {
  PARE_CHECK(bits >= 2 && bits <= 8, "weight bits must be in 2..8, got ", bits);
  QuantParams p;
  p.qmax = (int64_t{1} << (bits - 1)) - 1;
  p.qmin = -p.qmax;
  at::Tensor a = w.detach().to(at::kFloat).abs();
  if (axis >= 0) {
    PARE_ASSERT(axis < w.dim(), "weight axis ", axis, " for a weight of rank ", w.dim());
    a = a.transpose(0, axis).reshape({w.size(axis), -1}).amax(1);
    p.axis = axis;
  } else {
    a = a.max();
  }
  // An all-zero channel gets scale 1/qmax: any scale represents it, and a tiny one would blow up
  // the bias quantized with it.
  a = at::where(a > 1e-8, a, at::ones_like(a));
  p.scale = (a / static_cast<double>(p.qmax)).to(at::kFloat);
  p.zero_point = at::zeros(p.scale.sizes(), at::kChar);
  return p;
}

namespace {

at::Tensor shaped(const at::Tensor& param, const at::Tensor& like, int64_t axis) {
  if (axis < 0) return param.reshape({});
  std::vector<int64_t> shape(static_cast<size_t>(like.dim()), 1);
  shape[static_cast<size_t>(axis)] = like.size(axis);
  return param.reshape(shape);
}

}  // namespace

at::Tensor quantize_tensor(const at::Tensor& x, const QuantParams& p) {
  at::Tensor xf = x.detach().to(at::kFloat);
  // Same expression as core's QuantizeLinear, so pass and interpreter agree to the bit.
  at::Tensor q = at::round(xf / shaped(p.scale, xf, p.axis)) +
                 shaped(p.zero_point.to(at::kFloat), xf, p.axis);
  at::ScalarType t = p.zero_point.scalar_type();
  if (t == at::kInt) q = q.to(at::kDouble);
  // The type's full range saturates, as ONNX does (symmetric weights never reach -128).
  const double lo = t == at::kByte ? 0 : t == at::kChar ? -128 : std::numeric_limits<int32_t>::min();
  const double hi = t == at::kByte ? 255 : t == at::kChar ? 127 : std::numeric_limits<int32_t>::max();
  return at::clamp(q, lo, hi).to(t);
}

at::Tensor dequantize_tensor(const at::Tensor& q, const QuantParams& p) {
  at::Tensor xf = q.to(at::kFloat) - shaped(p.zero_point.to(at::kFloat), q, p.axis);
  return xf * shaped(p.scale, q, p.axis);
}

at::Tensor fake_quantize(const at::Tensor& x, const QuantParams& p) {
  return dequantize_tensor(quantize_tensor(x, p), p);
}

void SqnrAccumulator::add(const at::Tensor& ref, const at::Tensor& approx) {
  at::Tensor r = ref.detach().to(at::kDouble);
  signal += r.pow(2).sum().item<double>();
  noise += (r - approx.detach().to(at::kDouble)).pow(2).sum().item<double>();
}

double SqnrAccumulator::db() const {
  if (noise == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

double sqnr_db(const at::Tensor& ref, const at::Tensor& approx) {
  SqnrAccumulator acc;
  acc.add(ref, approx);
  return acc.db();
}

Observer::Observer(CalibMethod method, QScheme scheme, double percentile, int64_t bins)
    : method_(method), scheme_(scheme), percentile_(percentile), bins_(bins),
      min_(std::numeric_limits<double>::infinity()), max_(-std::numeric_limits<double>::infinity()) {
  PARE_CHECK(percentile > 0 && percentile <= 100, "percentile must be in (0, 100], got ", percentile);
  PARE_CHECK(bins >= 256, "histogram bins must be at least 256, got ", bins);
}

void Observer::observe_range(const at::Tensor& x) {
  if (x.numel() == 0) return;
  at::Tensor f = x.detach().to(at::kFloat);
  min_ = std::min(min_, f.min().item<double>());
  max_ = std::max(max_, f.max().item<double>());
  seen_ = true;
}

void Observer::observe_histogram(const at::Tensor& x) {
  PARE_ASSERT(seen_, "observe_histogram before observe_range");
  const double amax = std::max(std::abs(min_), std::abs(max_));
  if (hist_.empty()) hist_.assign(static_cast<size_t>(bins_), 0.0);
  if (x.numel() == 0 || amax == 0) return;
  // Exact zeros (half of a ReLU output) are represented without error whatever the range: they
  // are counted apart, so that their spike does not decide the entropy and MSE thresholds.
  at::Tensor a = x.detach().to(at::kFloat).abs().reshape({-1});
  at::Tensor nz = a.masked_select(a > 0);
  zeros_ += static_cast<double>(a.numel() - nz.numel());
  if (nz.numel() == 0) return;
  at::Tensor h = at::histc(nz, bins_, 0, amax).to(at::kDouble).contiguous();
  const double* p = h.data_ptr<double>();
  for (int64_t i = 0; i < bins_; ++i) hist_[static_cast<size_t>(i)] += p[i];
}

int64_t Observer::levels() const {
  // [0, t] gets all 256 uint8 levels when the data is non-negative, else half of the levels.
  return scheme_ == QScheme::kAsymmetricUInt8 && min_ >= 0 ? 256 : 128;
}

double Observer::threshold() const {
  const double amax = std::max(std::abs(min_), std::abs(max_));
  if (hist_.empty() || amax == 0) return amax;
  const double total = std::accumulate(hist_.begin(), hist_.end(), 0.0);
  if (total == 0) return amax;
  if (method_ == CalibMethod::kPercentile) {
    const double want = percentile_ / 100.0 * (total + zeros_);
    double cum = zeros_;
    for (int64_t i = 0; i < bins_; ++i) {
      cum += hist_[static_cast<size_t>(i)];
      if (cum >= want) return amax * static_cast<double>(i + 1) / static_cast<double>(bins_);
    }
    return amax;
  }
  return method_ == CalibMethod::kEntropy ? entropy_threshold() : mse_threshold();
}

// TensorRT's calibration: for every candidate threshold (a bin edge), the clipped reference
// histogram P (outliers folded into the last bin) against Q, P merged into `levels` bins and
// spread back evenly over P's non-empty bins; the threshold with the smallest KL(P || Q) wins.
double Observer::entropy_threshold() const {
  const double amax = std::max(std::abs(min_), std::abs(max_));
  const int64_t nq = levels();
  const double eps = 1e-12;
  double best_kl = std::numeric_limits<double>::infinity();
  int64_t best = bins_;
  double outliers = std::accumulate(hist_.begin() + nq, hist_.end(), 0.0);
  std::vector<double> p, q;
  for (int64_t i = nq; i <= bins_; ++i) {
    if (i > nq) outliers -= hist_[static_cast<size_t>(i - 1)];
    p.assign(hist_.begin(), hist_.begin() + i);
    p.back() += outliers;
    q.assign(static_cast<size_t>(i), 0.0);
    for (int64_t j = 0; j < nq; ++j) {
      const int64_t start = j * i / nq, stop = (j + 1) * i / nq;
      double sum = 0;
      int64_t nonzero = 0;
      for (int64_t k = start; k < stop; ++k) {
        sum += hist_[static_cast<size_t>(k)];
        nonzero += p[static_cast<size_t>(k)] > 0;
      }
      if (nonzero == 0) continue;
      for (int64_t k = start; k < stop; ++k)
        if (p[static_cast<size_t>(k)] > 0) q[static_cast<size_t>(k)] = sum / nonzero;
    }
    const double ps = std::accumulate(p.begin(), p.end(), 0.0);
    const double qs = std::accumulate(q.begin(), q.end(), 0.0);
    if (ps == 0 || qs == 0) continue;
    double kl = 0;
    for (int64_t k = 0; k < i; ++k) {
      const double pk = p[static_cast<size_t>(k)] / ps;
      if (pk == 0) continue;
      const double qk = std::max(q[static_cast<size_t>(k)] / qs, eps);
      kl += pk * std::log(pk / qk);
    }
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  return amax * static_cast<double>(best) / static_cast<double>(bins_);
}

// Expected squared error of quantizing the histogram with threshold t: values above t are
// clipped, values below are rounded to the grid of step t / (levels - 1); each bin is represented
// by its centre.
double Observer::mse_threshold() const {
  const double amax = std::max(std::abs(min_), std::abs(max_));
  const double width = amax / static_cast<double>(bins_);
  const double steps = static_cast<double>(levels() - 1);
  double best_err = std::numeric_limits<double>::infinity(), best = amax;
  for (int64_t i = bins_ / 64; i <= bins_; ++i) {
    const double t = width * static_cast<double>(i);
    const double s = t / steps;
    double err = 0;
    for (int64_t k = 0; k < bins_; ++k) {
      const double n = hist_[static_cast<size_t>(k)];
      if (n == 0) continue;
      const double c = width * (static_cast<double>(k) + 0.5);
      const double e = c > t ? c - t : c - s * std::nearbyint(c / s);
      err += n * e * e;
    }
    if (err < best_err) {
      best_err = err;
      best = t;
    }
  }
  return best;
}

std::pair<double, double> Observer::range() const {
  PARE_ASSERT(seen_, "Observer::range() before any observation");
  if (method_ == CalibMethod::kMinMax || hist_.empty()) {
    if (scheme_ == QScheme::kSymmetricInt8) {
      const double a = std::max(std::abs(min_), std::abs(max_));
      return {-a, a};
    }
    return {std::min(min_, 0.0), std::max(max_, 0.0)};
  }
  const double t = threshold();
  if (scheme_ == QScheme::kSymmetricInt8) return {-t, t};
  return {std::min(std::max(min_, -t), 0.0), std::max(std::min(max_, t), 0.0)};
}

}  // namespace pare::quantize
