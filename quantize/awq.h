// AWQ (Lin et al. 2023, activation-aware weight quantization): before rounding to nearest, scale
// each input channel of a weight up by s (and its input down by s, folded into the operation that
// makes the input), with s = (mean |x|)^alpha, so the channels that carry large activations lose
// less to rounding; then clip each group's range where that lowers the output error.
//
//   quantize::AwqScale a = quantize::awq_scale(w, abs_mean, h, 4, 128);    // w [out, in]
//   w2 = w * a.scales; input2 = input / a.scales;                          // the caller folds
//   at::Tensor shrink = quantize::awq_clip(w2, h2, 4, 128);               // h2: of the scaled input
//   quantize::Grid g = quantize::symmetric_grid(w2, 4, 128, shrink);       // then rtn(w2, g)
//
// Both searches measure the error as the paper's code does, on the layer's output over the
// calibration inputs, here through X^T X (h): || X (w - q)^T ||^2 = sum of (w - q) h (w - q)^T. The
// paper's scale search measures it after the whole block (attention, MLP); this one per weight
// group sharing an input (q, k and v together), which needs no second pass of the model.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace pare::quantize {

struct AwqScale {
  at::Tensor scales;      ///< float [in]: multiply the weight's columns, divide the input's channels
  double alpha = 0;       ///< the exponent chosen (0 without duo: all ones, plain RTN)
  bool duo = false;       ///< the scales divide by the weights' statistic too (AutoAWQ's duo scaling)
  double error = 0;       ///< the output error with them, relative to || X w^T ||^2
  double rtn_error = 0;   ///< the same without scaling (alpha 0)
};

/// The scale search: alpha in {0, 1/grid, ..., (grid-1)/grid}, s = max(abs_mean^alpha, 1e-4) (the
/// paper's) or abs_mean^alpha / w_mean^(1-alpha) (AutoAWQ's duo scaling; w_mean: |w| over its
/// group's largest magnitude, averaged over the rows), normalized by sqrt(max(s) min(s)): the one
/// whose RTN on symmetric_grid(w * s, bits, group) changes X w^T least. w float [out, in], abs_mean
/// [in] (mean |x| per input channel), h [in, in].
AwqScale awq_scale(const at::Tensor& w, const at::Tensor& abs_mean, const at::Tensor& h, int bits, int64_t group,
                   int grid = 20);

/// The clip search: per row and group, the factor in {1, 1 - 1/grid, ..., 1 - (max_shrink*grid - 1)/grid}
/// of the group's largest magnitude whose RTN changes that group's share of the output least
/// (float [out, groups], for symmetric_grid's `shrink`).
at::Tensor awq_clip(const at::Tensor& w, const at::Tensor& h, int bits, int64_t group, int grid = 20,
                    double max_shrink = 0.5);

}  // namespace pare::quantize
