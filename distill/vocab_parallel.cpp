// The KD loss over vocabulary blocks (distill/vocab_parallel.h).
#include "distill/vocab_parallel.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "dist/world.h"

namespace pare::distill {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

dist::ProcessGroup* group_of(AutogradContext* ctx) {
  return reinterpret_cast<dist::ProcessGroup*>(ctx->saved_data["pg"].toInt());
}

// The sum over the ranks, on every rank. Each rank's loss may read it, so its gradient is the sum
// of the ranks' gradients.
struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, dist::ProcessGroup* pg) {
    ctx->saved_data["pg"] = reinterpret_cast<int64_t>(pg);
    at::Tensor y = x.detach().contiguous().clone();
    pg->all_reduce(y);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    at::Tensor g = grad[0].contiguous().clone();
    group_of(ctx)->all_reduce(g);
    return {g, at::Tensor()};
  }
};

struct Rows {
  const std::vector<int64_t>* rows;  // per rank
  dist::ProcessGroup* pg;
};

// Every rank's rows of `x` (rank order), on every rank; the gradient of this rank's rows is the sum
// of the ranks' gradients for them.
struct GatherRows : torch::autograd::Function<GatherRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Rows& a) {
    const auto& rows = *a.rows;
    const int64_t most = *std::max_element(rows.begin(), rows.end());
    int64_t offset = 0;
    for (int r = 0; r < a.pg->rank(); ++r) offset += rows[r];
    ctx->saved_data["pg"] = reinterpret_cast<int64_t>(a.pg);
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["count"] = x.size(0);
    at::Tensor padded = x.detach().contiguous();
    if (x.size(0) < most) {
      std::vector<int64_t> pad = x.sizes().vec();
      pad[0] = most - x.size(0);
      padded = at::cat({padded, at::zeros(pad, x.options())});
    }
    auto parts = a.pg->all_gather(padded);
    for (size_t r = 0; r < parts.size(); ++r) parts[r] = parts[r].narrow(0, 0, rows[r]);
    return at::cat(parts);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    at::Tensor g = grad[0].contiguous().clone();
    group_of(ctx)->all_reduce(g);
    return {g.narrow(0, ctx->saved_data["offset"].toInt(), ctx->saved_data["count"].toInt()), at::Tensor()};
  }
};

// log sum_v exp(x) over the whole vocabulary per row of the block x [M, len]: the maximum over all
// ranks shifts it (a constant for the gradient), the sums of exponentials are added over ranks.
at::Tensor log_normalizer(const at::Tensor& x, dist::ProcessGroup& pg) {
  at::Tensor m = std::get<0>(x.detach().max(-1));
  m = at::stack(pg.all_gather(m.contiguous())).amax(0);
  return m + AllReduceSum::apply((x - m.unsqueeze(1)).exp().sum(-1), &pg).log();
}

// The student's argmax over the whole vocabulary for every row: each rank's best in its block,
// the best of those.
at::Tensor argmax_over_blocks(const at::Tensor& s, int64_t begin, dist::ProcessGroup& pg) {
  auto [value, index] = s.detach().max(-1);
  at::Tensor values = at::stack(pg.all_gather(value.contiguous()));
  at::Tensor indices = at::stack(pg.all_gather((index + begin).contiguous()));
  return indices.gather(0, values.argmax(0).unsqueeze(0)).squeeze(0);
}

void check_block(const at::Tensor& hidden, const at::Tensor& head, const TeacherBlock& t, const at::Tensor& labels,
                 double temperature, double alpha, dist::ProcessGroup& pg) {
  const char* f = "vocab_parallel_lm_kd_loss";
  PARE_CHECK(std::isfinite(temperature) && temperature > 0, f, " requires a temperature > 0. However, it is ",
             temperature);
  PARE_CHECK(alpha >= 0 && alpha <= 1, f, " requires alpha in [0, 1]. However, it is ", alpha);
  PARE_CHECK(hidden.defined() && head.defined() && labels.defined() && t.logits.defined(), f,
             " requires the student's hidden states, head and labels and the teacher's block");
  PARE_CHECK(hidden.dim() >= 2 && head.dim() == 2 && head.size(0) == hidden.size(-1), f,
             " requires hidden states [rows, ..., D] and a head [D, V]. However, they have shapes ", hidden.sizes(),
             " and ", head.sizes());
  const auto lead = hidden.sizes().slice(0, hidden.dim() - 1);
  PARE_CHECK(labels.sizes() == lead && at::isIntegralType(labels.scalar_type(), /*includeBool=*/false), f,
             " requires integer labels of shape ", lead, ". However, they are ", labels.scalar_type(), " ",
             labels.sizes());
  PARE_CHECK(static_cast<int>(t.rows.size()) == pg.size() && t.rows[pg.rank()] == hidden.size(0), f,
             " requires the teacher's rows of ", pg.size(), " ranks, this one's ", hidden.size(0), ". However, it has ",
             t.rows.size() > static_cast<size_t>(pg.rank()) ? t.rows[pg.rank()] : -1, " of ", t.rows.size());
  int64_t all = 0;
  for (int64_t r : t.rows) all += r;
  std::vector<int64_t> want = lead.vec();
  want[0] = all;
  PARE_CHECK(t.logits.dim() == hidden.dim() && t.logits.sizes().slice(0, want.size()) == at::IntArrayRef(want) &&
                 t.begin >= 0 && t.begin + t.logits.size(-1) <= head.size(1),
             f, " requires the teacher's block [", all, " rows, ..., <= ", head.size(1) - t.begin,
             "] of a vocabulary of ", head.size(1), " from ", t.begin, ". However, it has shape ", t.logits.sizes());
}

}  // namespace

at::Tensor vocab_parallel_lm_kd_loss(const at::Tensor& hidden, const at::Tensor& head, const TeacherBlock& teacher,
                                     const at::Tensor& labels, const TokenDivergence& d, double temperature,
                                     double alpha, dist::ProcessGroup& pg, at::Tensor* predictions) {
  PARE_CHECK(d.kind != TokenDivergence::Kind::kTopK, "--loss ", d.str(), " keeps the teacher's ", d.k, " most likely "
             "tokens over the whole vocabulary, which a vocabulary-parallel teacher never gathers: use fkl, rkl, "
             "jsd:BETA or skl:ALPHA with --teacher-parallel tp");
  check_block(hidden, head, teacher, labels, temperature, alpha, pg);
  const int64_t dim = hidden.size(-1), len = teacher.logits.size(-1), vocab = head.size(1);
  const int64_t per_row = hidden.numel() / std::max<int64_t>(1, hidden.size(0) * dim);  // tokens a row
  int64_t offset = 0;
  for (int r = 0; r < pg.rank(); ++r) offset += teacher.rows[r] * per_row;
  const int64_t own = hidden.size(0) * per_row;
  const Rows rows{&teacher.rows, &pg};
  at::Tensor h = GatherRows::apply(hidden.to(at::kFloat), rows).reshape({-1, dim});
  at::Tensor y = GatherRows::apply(labels.to(at::kLong), rows).reshape({-1});
  at::Tensor s_all = at::matmul(h, head.to(at::kFloat).narrow(1, teacher.begin, len));  // [every token, len]
  if (predictions)
    *predictions = argmax_over_blocks(s_all, teacher.begin, pg).narrow(0, offset, own).view(labels.sizes());
  at::Tensor counted = (y != -100).nonzero().squeeze(1);
  if (counted.numel() == 0) return s_all.sum() * 0;  // every rank sees the same labels
  at::Tensor kept = y.index_select(0, counted);
  const int64_t lo = kept.min().item<int64_t>(), hi = kept.max().item<int64_t>();
  PARE_CHECK(lo >= 0 && hi < vocab, "vocab_parallel_lm_kd_loss requires labels in [0, ", vocab,
             ") or -100 (not counted). However, they range over [", lo, ", ", hi, "]");
  // Each rank's loss is the mean over its own counted tokens.
  at::Tensor mine = ((counted >= offset) & (counted < offset + own)).to(at::kFloat);
  mine = mine / std::max(1.0, mine.sum().item<double>());
  at::Tensor s = s_all.index_select(0, counted);
  at::Tensor t = teacher.logits.detach().to(at::kFloat).reshape({-1, len}).index_select(0, counted);
  at::Tensor st = s / temperature, tt = t / temperature;
  const at::Tensor log_z = log_normalizer(st, pg);
  at::Tensor ls = st - log_z.unsqueeze(1);
  at::Tensor total = at::zeros({}, s.options());
  if (alpha != 0) {
    at::Tensor lt = tt - log_normalizer(tt, pg).unsqueeze(1);
    at::Tensor div = AllReduceSum::apply(divergence_terms(ls, lt, d).sum(-1), &pg);
    total = total + alpha * temperature * temperature * (div * mine).sum();
  }
  if (alpha != 1) {  // the next-token cross entropy: log Z - the label's logit, which one block holds
    at::Tensor log_z1 = temperature == 1 ? log_z : log_normalizer(s, pg);
    at::Tensor local = kept - teacher.begin;
    at::Tensor here = (local >= 0) & (local < len);
    at::Tensor label_logit = s.gather(1, local.clamp(0, len - 1).unsqueeze(1)).squeeze(1) * here.to(at::kFloat);
    total = total + (1 - alpha) * ((log_z1 - AllReduceSum::apply(label_logit, &pg)) * mine).sum();
  }
  return total;
}

}  // namespace pare::distill
