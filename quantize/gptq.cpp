#include "quantize/gptq.h"

#include <cmath>
#include <functional>
#include <vector>
#include <limits>

#include "core/error.h"

namespace pare::quantize {

namespace {

// fp16 rounding of a float tensor, as the formats store scales (nearest even).
at::Tensor to_half_grid(const at::Tensor& t) { return t.to(at::kHalf).to(at::kFloat); }

// The codes of `w` (float [rows, n]) on the grid columns given by `groups` (int64 [n]).
at::Tensor codes_of(const at::Tensor& w, const at::Tensor& scale, const at::Tensor& zero, const at::Tensor& offset,
                    const Grid& g) {
  const at::Tensor safe = at::where(scale == 0, at::ones_like(scale), scale);
  at::Tensor code = at::round((w - offset) / safe) + zero;
  code = at::where(scale == 0, zero, code);
  return code.clamp(static_cast<double>(g.qmin), static_cast<double>(g.qmax));
}

at::Tensor values_of(const at::Tensor& code, const at::Tensor& scale, const at::Tensor& zero, const at::Tensor& offset) {
  return (code - zero) * scale + offset;
}

int64_t groups_of(int64_t cols, int64_t group) { return (cols + group - 1) / group; }

void check_grid(const at::Tensor& w, const Grid& g) {
  PARE_CHECK(w.dim() == 2 && g.group > 0, "a grid of groups of ", g.group, " does not fit a weight of shape ",
             c10::str(w.sizes()));
  PARE_CHECK(g.scale.sizes() == at::IntArrayRef({w.size(0), groups_of(w.size(1), g.group)}), "grid of shape ",
             c10::str(g.scale.sizes()), " for a weight of shape ", c10::str(w.sizes()));
}

// Each column's group parameters, [rows, cols].
at::Tensor per_column(const at::Tensor& p, int64_t group, int64_t cols) {
  return p.repeat_interleave(group, 1).narrow(1, 0, cols);
}

// Group k's grid from its columns' values now: those of the block being visited from w1 (which
// starts at visiting position i1), the later ones from w (whose lazy updates from this block are
// still pending: exact when blocks hold whole groups in visiting order, as without act-order).
void regrid_group(Grid& g, int64_t k, const at::Tensor& position, const at::Tensor& w, const at::Tensor& w1, int64_t i1,
                  const std::function<Grid(const at::Tensor&)>& regrid) {
  const int64_t first = k * g.group, n = std::min(g.group, position.size(0) - first);
  std::vector<at::Tensor> cols;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t p = position[first + j].item<int64_t>();
    cols.push_back(p >= i1 && p < i1 + w1.size(1) ? w1.select(1, p - i1) : w.select(1, p));
  }
  const Grid one = regrid(at::stack(cols, 1));
  PARE_CHECK(one.scale.sizes() == at::IntArrayRef({w.size(0), 1}), "GPTQ: regrid made a grid of shape ",
             c10::str(one.scale.sizes()), " for one group of ", w.size(0), " rows");
  g.scale.select(1, k).copy_(one.scale.squeeze(1));
  g.zero.select(1, k).copy_(one.zero.squeeze(1));
  g.offset.select(1, k).copy_(one.offset.squeeze(1));
}

}  // namespace

Grid symmetric_grid(const at::Tensor& w, int bits, int64_t group, const at::Tensor& shrink) {
  PARE_CHECK(bits == 4 || bits == 8, "symmetric grids have 4 or 8 bits, not ", bits);
  PARE_CHECK(w.dim() == 2 && group > 0, "groups of ", group, " for a weight of shape ", c10::str(w.sizes()));
  const int64_t cols = w.size(1), n = groups_of(cols, group);
  at::Tensor padded = w.to(at::kFloat);
  if (n * group != cols) padded = at::constant_pad_nd(padded, {0, n * group - cols});  // the last group is shorter
  const at::Tensor blocks = padded.reshape({w.size(0), n, group});
  PARE_CHECK(!shrink.defined() || shrink.sizes() == at::IntArrayRef({w.size(0), n}), "a shrink of shape ",
             shrink.defined() ? c10::str(shrink.sizes()) : "", " for ", n, " groups of a weight of shape ",
             c10::str(w.sizes()));
  const at::Tensor factor = shrink.defined() ? shrink.to(at::kFloat) : at::ones({w.size(0), n});
  Grid g;
  g.group = group;
  if (bits == 4) {  // Q4_0: the first element of largest magnitude, signed, becomes code 0 (-8)
    const at::Tensor idx = blocks.abs().argmax(-1, /*keepdim=*/true);
    g.scale = to_half_grid(blocks.gather(-1, idx).squeeze(-1) * factor / -8.0);
    g.zero = at::full_like(g.scale, 8.0);
    g.qmin = 0, g.qmax = 15;
  } else {  // Q8_0: the largest magnitude becomes +-127 (-128 is left out: ggml's int8 dot products negate codes)
    g.scale = to_half_grid(std::get<0>(blocks.abs().max(-1)) * factor / 127.0);
    g.zero = at::zeros_like(g.scale);
    g.qmin = -127, g.qmax = 127;
  }
  g.offset = at::zeros_like(g.scale);
  return g;
}

at::Tensor rtn(const at::Tensor& w, const Grid& g) {
  check_grid(w, g);
  const int64_t cols = w.size(1);
  return codes_of(w.to(at::kFloat), per_column(g.scale, g.group, cols), per_column(g.zero, g.group, cols),
                  per_column(g.offset, g.group, cols), g).to(at::kInt);
}

at::Tensor grid_values(const at::Tensor& codes, const Grid& g) {
  check_grid(codes, g);
  const int64_t cols = codes.size(1);
  return values_of(codes.to(at::kFloat), per_column(g.scale, g.group, cols), per_column(g.zero, g.group, cols),
                   per_column(g.offset, g.group, cols));
}

at::Tensor hessian(const at::Tensor& x) {
  const at::Tensor flat = x.reshape({-1, x.size(-1)}).to(at::kDouble);
  return flat.t().matmul(flat).to(at::kFloat);
}

at::Tensor gptq(const at::Tensor& w_in, const at::Tensor& h_in, Grid& g, const GptqOptions& opts) {
  check_grid(w_in, g);
  const int64_t rows = w_in.size(0), cols = w_in.size(1);
  PARE_CHECK(h_in.sizes() == at::IntArrayRef({cols, cols}), "GPTQ: a Hessian of shape ", c10::str(h_in.sizes()),
             " for a weight of shape ", c10::str(w_in.sizes()));
  at::Tensor w = w_in.to(at::kFloat).clone(), h = h_in.to(at::kFloat).clone();
  const at::Tensor dead = h.diagonal() == 0;
  h.diagonal().masked_fill_(dead, 1.0);
  w.index_put_({at::indexing::Slice(), dead}, 0.0);
  const at::Tensor perm = opts.act_order ? at::argsort(h.diagonal(), /*stable=*/true, /*dim=*/0, /*descending=*/true)
                                         : at::arange(cols, at::kLong);
  w = w.index_select(1, perm);
  h = h.index_select(0, perm).index_select(1, perm);
  h.diagonal().add_(opts.damp * h.diagonal().mean().item<double>());
  at::Tensor hinv;
  try {
    hinv = at::linalg_cholesky(at::cholesky_inverse(at::linalg_cholesky(h)), /*upper=*/true);
  } catch (const c10::Error&) {
    throw InputError("GPTQ: the calibration inputs' Hessian is not positive definite even with damping " +
                     std::to_string(opts.damp) + " (too few calibration tokens? raise --damp)");
  }
  // Each visited column's group; with regrid, a group's grid is made when its first column comes.
  const at::Tensor group_of = perm.div(g.group, "floor");
  const auto* group_at = group_of.data_ptr<int64_t>();
  const at::Tensor position = at::argsort(perm);  // of each original column in the visiting order
  std::vector<bool> gridded(static_cast<size_t>(g.scale.size(1)), !opts.regrid);
  at::Tensor codes = at::empty({rows, cols}, at::kFloat);
  for (int64_t i1 = 0; i1 < cols; i1 += opts.block) {
    const int64_t i2 = std::min(i1 + opts.block, cols), count = i2 - i1;
    at::Tensor w1 = w.narrow(1, i1, count).clone();
    at::Tensor err1 = at::empty({rows, count}, at::kFloat);
    const at::Tensor hinv1 = hinv.narrow(0, i1, count).narrow(1, i1, count);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t c = i1 + i, k = group_at[c];
      if (!gridded[static_cast<size_t>(k)]) regrid_group(g, k, position, w, w1, i1, opts.regrid), gridded[k] = true;
      const at::Tensor col = w1.select(1, i);
      const at::Tensor sc = g.scale.select(1, k), ze = g.zero.select(1, k), of = g.offset.select(1, k);
      const at::Tensor code = codes_of(col, sc, ze, of, g);
      codes.select(1, c).copy_(code);
      const at::Tensor err = (col - values_of(code, sc, ze, of)) / hinv1[i][i];
      w1.narrow(1, i, count - i).sub_(err.unsqueeze(1).matmul(hinv1[i].narrow(0, i, count - i).unsqueeze(0)));
      err1.select(1, i).copy_(err);
    }
    if (i2 < cols) w.narrow(1, i2, cols - i2).sub_(err1.matmul(hinv.narrow(0, i1, count).narrow(1, i2, cols - i2)));
  }
  return codes.index_select(1, position).to(at::kInt);
}

double output_sqnr_db(const at::Tensor& w, const at::Tensor& q, const at::Tensor& h) {
  const at::Tensor wd = w.to(at::kDouble), d = wd - q.to(at::kDouble), hd = h.to(at::kDouble);
  const double signal = (wd.matmul(hd) * wd).sum().item<double>();
  const double noise = (d.matmul(hd) * d).sum().item<double>();
  if (noise <= 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

}  // namespace pare::quantize
