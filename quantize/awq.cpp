#include "quantize/awq.h"

#include <limits>

#include "core/error.h"
#include "quantize/gptq.h"

namespace pare::quantize {

namespace {

// RTN of w on its own symmetric grid (with `shrink`), the values.
at::Tensor round_to_grid(const at::Tensor& w, int bits, int64_t group, const at::Tensor& shrink = {}) {
  const Grid g = symmetric_grid(w, bits, group, shrink);
  return grid_values(rtn(w, g), g);
}

// || X d^T ||^2 for d [out, in]: sum of d h d^T (float64).
double output_error(const at::Tensor& d, const at::Tensor& h) {
  const at::Tensor dd = d.to(at::kDouble);
  return (dd.matmul(h.to(at::kDouble)) * dd).sum().item<double>();
}

}  // namespace

AwqScale awq_scale(const at::Tensor& w_in, const at::Tensor& abs_mean, const at::Tensor& h, int bits, int64_t group,
                   int grid) {
  PARE_CHECK(w_in.dim() == 2 && abs_mean.dim() == 1 && abs_mean.size(0) == w_in.size(1) &&
                 h.sizes() == at::IntArrayRef({w_in.size(1), w_in.size(1)}) && grid > 0,
             "AWQ: a weight of shape ", c10::str(w_in.sizes()), " with input statistics of shapes ",
             c10::str(abs_mean.sizes()), " and ", c10::str(h.sizes()));
  const at::Tensor w = w_in.to(at::kFloat), x = abs_mean.to(at::kFloat);
  const double signal = output_error(w, h);
  // AutoAWQ's weight statistic: |w| over its group's largest magnitude, averaged over the rows.
  const int64_t rows = w.size(0), cols = w.size(1), n = (cols + group - 1) / group;
  const at::Tensor blocks = at::constant_pad_nd(w.abs(), {0, n * group - cols}).reshape({rows, n, group});
  const at::Tensor w_mean = (blocks / std::get<0>(blocks.max(-1, true)).clamp_min(1e-12))
                                .reshape({rows, n * group}).narrow(1, 0, cols).mean(0);
  AwqScale best;
  best.error = std::numeric_limits<double>::infinity();
  for (const bool duo : {false, true}) {
    for (int i = 0; i < grid; ++i) {
      const double alpha = static_cast<double>(i) / grid;
      at::Tensor s = duo ? (x.pow(alpha) / w_mean.pow(1 - alpha).clamp_min(1e-4)).clamp_min(1e-4)
                         : x.pow(alpha).clamp_min(1e-4);
      s = s / (s.max() * s.min()).sqrt();
      const at::Tensor effective = round_to_grid(w * s, bits, group) / s;
      const double error = output_error(w - effective, h) / signal;
      if (!duo && i == 0) best.rtn_error = error;
      // The first (all ones) stands unless one does better, also when the errors are not numbers
      // (a weight of zeros, inputs no token reached).
      if ((!duo && i == 0) || error < best.error)
        best.error = error, best.alpha = alpha, best.scales = s, best.duo = duo;
    }
  }
  return best;
}

at::Tensor awq_clip(const at::Tensor& w_in, const at::Tensor& h, int bits, int64_t group, int grid, double max_shrink) {
  PARE_CHECK(w_in.dim() == 2 && h.sizes() == at::IntArrayRef({w_in.size(1), w_in.size(1)}) && group > 0,
             "AWQ clipping: a weight of shape ", c10::str(w_in.sizes()), " with a Hessian of shape ",
             c10::str(h.sizes()));
  const at::Tensor w = w_in.to(at::kFloat);
  const int64_t rows = w.size(0), cols = w.size(1), n = (cols + group - 1) / group, padded = n * group;
  // The diagonal blocks of h, one per group ([n, group, group], zero past the last column).
  const at::Tensor hp = at::constant_pad_nd(h.to(at::kFloat), {0, padded - cols, 0, padded - cols});
  const at::Tensor blocks = hp.reshape({n, group, n, group}).diagonal(0, 0, 2).permute({2, 0, 1});
  at::Tensor best_error = at::full({rows, n}, std::numeric_limits<float>::infinity());
  at::Tensor best = at::ones({rows, n});
  const int steps = std::max(1, static_cast<int>(max_shrink * grid));
  for (int i = 0; i < steps; ++i) {
    const at::Tensor shrink = at::full({rows, n}, 1.0 - static_cast<double>(i) / grid);
    const at::Tensor d = at::constant_pad_nd(w - round_to_grid(w, bits, group, shrink), {0, padded - cols})
                             .reshape({rows, n, group});
    const at::Tensor error = at::einsum("rng,ngk,rnk->rn", {d, blocks, d});  // each group's share of the output error
    const at::Tensor better = error < best_error;
    best_error = at::where(better, error, best_error);
    best = at::where(better, shrink, best);
  }
  return best;
}

}  // namespace pare::quantize
