// Quantization parameters and the observers that find them.
//
// A tensor is quantized as q = saturate(round_half_to_even(x / scale) + zero_point) and read back
// as (q - zero_point) * scale, exactly as ONNX QuantizeLinear/DequantizeLinear define it. Weights
// use symmetric int8 in [-127, 127] (zero point 0), per output channel or per tensor; activations
// use asymmetric uint8 (the range always contains 0, so 0 is exact) or symmetric int8.
//
//   Observer obs(CalibMethod::kEntropy, QScheme::kAsymmetricUInt8);
//   for (auto& b : batches) obs.observe_range(b);                       // pass 1: min / max
//   if (obs.needs_histogram()) for (auto& b : batches) obs.observe_histogram(b);  // pass 2
//   QuantParams p = params_from_range(obs.range(), QScheme::kAsymmetricUInt8);
//   at::Tensor xq = fake_quantize(x, p);
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pare::quantize {

/// How an activation's range is chosen from the calibration data.
enum class CalibMethod {
  kMinMax,      ///< the observed minimum and maximum
  kPercentile,  ///< clip |x| at a percentile of its distribution (default 99.99)
  kEntropy,     ///< the clipping threshold minimizing KL(fp32 histogram || quantized histogram)
  kMse,         ///< the clipping threshold minimizing the expected squared quantization error
};

/// Parses "minmax", "percentile", "entropy" or "mse"; throws InputError naming the choices.
CalibMethod parse_calib_method(const std::string& s);
const char* calib_method_name(CalibMethod m);

/// Integer encodings.
enum class QScheme {
  kSymmetricInt8,    ///< int8, zero point 0, range [-127, 127]
  kAsymmetricUInt8,  ///< uint8, zero point in [0, 255], range [0, 255]
};

/// The parameters of one quantized tensor.
struct QuantParams {
  at::Tensor scale;       ///< float32: 0-d per tensor, 1-D [C] per channel
  at::Tensor zero_point;  ///< int8 / uint8 / int32, the shape of scale
  int64_t axis = -1;      ///< channel axis when per channel, -1 per tensor
  int64_t qmin = 0, qmax = 0;
  bool per_channel() const { return axis >= 0; }
};

/// Per-tensor parameters for the float range [lo, hi] (widened to contain 0). A zero range gets
/// scale 1 (as ONNX Runtime does).
QuantParams params_from_range(std::pair<double, double> range, QScheme scheme);

/// Symmetric parameters of a weight: per channel along `axis`, or per tensor when axis < 0; codes
/// in [-(2^(bits-1) - 1), 2^(bits-1) - 1] (bits 2..8), stored as int8.
QuantParams weight_params(const at::Tensor& w, int64_t axis, int bits = 8);

/// Integer tensor of `x` quantized with `p` (ONNX QuantizeLinear).
at::Tensor quantize_tensor(const at::Tensor& x, const QuantParams& p);
/// Float tensor of `q` read back with `p` (ONNX DequantizeLinear).
at::Tensor dequantize_tensor(const at::Tensor& q, const QuantParams& p);
/// dequantize(quantize(x)).
at::Tensor fake_quantize(const at::Tensor& x, const QuantParams& p);

/// Signal-to-quantization-noise ratio 10 log10(sum ref^2 / sum (ref - approx)^2) in dB;
/// +inf when the two are equal.
double sqnr_db(const at::Tensor& ref, const at::Tensor& approx);
/// Running sums for an SQNR over many batches.
struct SqnrAccumulator {
  double signal = 0, noise = 0;
  void add(const at::Tensor& ref, const at::Tensor& approx);
  double db() const;
};

/// Collects statistics of one activation over calibration batches and picks its range.
class Observer {
 public:
  /// `percentile` is used by kPercentile (in (0, 100]); `bins` by the histogram methods.
  Observer(CalibMethod method, QScheme scheme, double percentile = 99.99, int64_t bins = 2048);

  /// Pass 1: running minimum and maximum.
  void observe_range(const at::Tensor& x);
  /// True when range() needs a histogram (pass 2) of |x| over [0, max |x|] from pass 1. Exact
  /// zeros are counted apart: they carry no quantization error, and the spike of a ReLU output
  /// would otherwise decide the entropy and MSE thresholds.
  bool needs_histogram() const { return method_ != CalibMethod::kMinMax; }
  /// Pass 2: histogram of |x|; call after every batch went through observe_range.
  void observe_histogram(const at::Tensor& x);

  /// The chosen range [lo, hi], lo <= 0 <= hi. Throws InternalError when nothing was observed.
  std::pair<double, double> range() const;
  double min() const { return min_; }
  double max() const { return max_; }

 private:
  double threshold() const;  // the clipping threshold of |x| for the histogram methods
  double entropy_threshold() const;
  double mse_threshold() const;
  int64_t levels() const;  // quantization levels available to [0, threshold]

  CalibMethod method_;
  QScheme scheme_;
  double percentile_;
  int64_t bins_;
  double min_, max_;
  bool seen_ = false;
  std::vector<double> hist_;  // counts of the non-zero |x| in bins_ equal bins over [0, amax]
  double zeros_ = 0;          // count of exact zeros
};

}  // namespace pare::quantize
