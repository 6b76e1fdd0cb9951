// GPTQ (Frantar et al. 2022): weight quantization that corrects, column by column, the error each
// rounding makes, with the inverse Hessian of the layer's inputs, so that X W^T changes least.
//
//   quantize::Grid g = quantize::symmetric_grid(w, 4, 128);        // scales from the weights
//   at::Tensor h = quantize::hessian(x);                           // X^T X over calibration tokens
//   at::Tensor codes = quantize::gptq(w, h, g);                    // codes on g, rows of w
//   at::Tensor wq = quantize::grid_values(codes, g);               // what the model then holds
//
// The grid: per row and group of `group` columns, value = scale * (code - zero) + offset with code
// in [qmin, qmax]. A grid read off a ggml format's blocks (lm/'s GGUF writer) makes GPTQ's codes
// that format's codes, so the file takes them without a second rounding; act-order then only
// changes the order columns are visited, never the groups. The grid is fixed before GPTQ starts
// (AutoGPTQ's static groups) or, with GptqOptions::regrid, each group's is made from the updated
// weights when GPTQ reaches the group (the reference's way).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

namespace pare::quantize {

/// A fixed quantization grid for a [rows, cols] weight. scale, zero and offset are float [rows,
/// ceil(cols / group)]; a column's group is column / group (the last group may be shorter, as
/// SmolLM2's 576 columns make in groups of 128).
struct Grid {
  at::Tensor scale, zero, offset;
  int64_t group = 32;
  int64_t qmin = 0, qmax = 15;
};

/// Symmetric `bits`-bit grid per group, as ggml's Q4_0 (bits 4) and Q8_0 (bits 8) pick it: the
/// element of largest magnitude, with its sign, maps to the lowest level (-2^(bits-1); for 8 bits
/// 127 maps to the highest, as Q8_0), the scale rounded to fp16 as the formats store it. `shrink`
/// (float [rows, groups], optional) multiplies each group's largest magnitude first: weights past
/// it are clipped (AWQ's clipping, quantize/awq.h).
Grid symmetric_grid(const at::Tensor& w, int bits, int64_t group, const at::Tensor& shrink = {});

/// The codes of round to nearest on `g` (int32 [rows, cols]).
at::Tensor rtn(const at::Tensor& w, const Grid& g);
/// The weights the codes stand for (float [rows, cols]): (code - zero) * scale + offset, the
/// product in the order ggml's dequantizers compute it.
at::Tensor grid_values(const at::Tensor& codes, const Grid& g);

/// X^T X (float64 accumulation, returned float) of activations x [..., cols]; sum them over batches.
at::Tensor hessian(const at::Tensor& x);

struct GptqOptions {
  double damp = 0.01;      ///< added to the diagonal: damp x its mean (the paper's percdamp)
  bool act_order = true;   ///< visit columns by decreasing Hessian diagonal
  int64_t block = 128;     ///< columns whose updates are applied lazily together
  /// When set, each group's grid is made again from the group's columns as GPTQ has updated them,
  /// when its first column is visited (regrid([rows, n]) returns a grid of one group), as GPTQ's
  /// reference does, instead of being fixed from the original weights; gptq() writes it into its
  /// grid. The groups stay those of the grid, so the result still fits a ggml format.
  std::function<Grid(const at::Tensor&)> regrid;
};

/// GPTQ's codes (int32 [rows, cols]) for weight `w` [rows, cols] given `h` [cols, cols] on grid `g`
/// (whose groups opts.regrid makes again). Columns no input ever reached (zero diagonal) get the
/// code of 0. Throws InputError when h is not positive definite even after damping.
at::Tensor gptq(const at::Tensor& w, const at::Tensor& h, Grid& g, const GptqOptions& opts = {});

/// || X (w - q)^T ||^2 / || X w^T ||^2 over the inputs h was made from, in decibels, negated: the
/// layer's output signal-to-quantization-noise ratio (higher is better).
double output_sqnr_db(const at::Tensor& w, const at::Tensor& q, const at::Tensor& h);

}  // namespace pare::quantize
