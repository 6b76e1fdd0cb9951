// The KD loss over vocabulary blocks (distill/vocab_parallel.h).
#include "distill/vocab_parallel.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

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
    int64_t offset = 0;
    for (int r = 0; r < a.pg->rank(); ++r) offset += (*a.rows)[r];
    ctx->saved_data["pg"] = reinterpret_cast<int64_t>(a.pg);
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["count"] = x.size(0);
    return a.pg->all_gather_rows(x.detach(), *a.rows);
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

// What a step's chunks share besides the tensors the autograd node takes.
struct Blocks {
  const at::Tensor* teacher;  // [counted tokens, len]: the teacher's block
  const at::Tensor* labels;   // [counted tokens]: the next tokens' ids
  const at::Tensor* mine;     // [counted tokens]: 1 / n for this rank's n tokens, else 0
  int64_t begin, chunk;
  const TokenDivergence* divergence;
  double temperature, alpha;
  dist::ProcessGroup* pg;
  at::Tensor* predictions;  // [counted tokens]: the student's argmax, or null
};

// This rank's loss on counted tokens [from, to), whose student block is s [to - from, len].
at::Tensor chunk_loss(const at::Tensor& s, const Blocks& a, int64_t from, int64_t to) {
  dist::ProcessGroup& pg = *a.pg;
  const double temp = a.temperature;
  const at::Tensor mine = a.mine->slice(0, from, to);
  at::Tensor st = s / temp;
  const at::Tensor log_z = log_normalizer(st, pg);
  at::Tensor total = at::zeros({}, s.options());
  if (a.alpha != 0) {
    at::Tensor tt = a.teacher->slice(0, from, to) / temp;
    at::Tensor lt = tt - log_normalizer(tt, pg).unsqueeze(1);
    at::Tensor div = AllReduceSum::apply(divergence_terms(st - log_z.unsqueeze(1), lt, *a.divergence).sum(-1), &pg);
    total = total + a.alpha * temp * temp * (div * mine).sum();
  }
  if (a.alpha != 1) {  // the next-token cross entropy: log Z - the label's logit, which one block holds
    const int64_t len = s.size(1);
    at::Tensor log_z1 = temp == 1 ? log_z : log_normalizer(s, pg);
    at::Tensor local = a.labels->slice(0, from, to) - a.begin;
    at::Tensor here = (local >= 0) & (local < len);
    at::Tensor label_logit = s.gather(1, local.clamp(0, len - 1).unsqueeze(1)).squeeze(1) * here.to(at::kFloat);
    total = total + (1 - a.alpha) * ((log_z1 - AllReduceSum::apply(label_logit, &pg)) * mine).sum();
  }
  return total;
}

// As ChunkedLmKd (losses.cpp): the forward walks chunks of the counted tokens of every rank (the
// same chunks on every rank, so that their collectives line up), making the loss and, while each
// chunk's block of logits exists, the gradients of the hidden states and of the head's block (of
// the sum of the ranks' losses: the all-reduces' backward adds them); backward scales them.
struct VocabChunks : torch::autograd::Function<VocabChunks> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& head, const Blocks& a) {
    const int64_t tokens = hidden.size(0), len = a.teacher->size(1);
    const bool grads = hidden.requires_grad() || head.requires_grad();
    const at::Tensor h = hidden.detach(), w = head.detach().to(at::kFloat).narrow(1, a.begin, len);
    at::Tensor grad_h = grads ? at::zeros_like(h) : at::Tensor();
    at::Tensor grad_w = grads ? at::zeros(head.sizes(), w.options()) : at::Tensor();
    at::Tensor total = at::zeros({}, h.options());
    for (int64_t from = 0; from < tokens; from += a.chunk) {
      const int64_t to = std::min(tokens, from + a.chunk);
      at::AutoGradMode grad_mode(grads);
      at::Tensor hc = h.slice(0, from, to), wc = w;
      if (grads) hc = hc.detach().requires_grad_(), wc = w.detach().requires_grad_();
      const at::Tensor s = at::matmul(hc, wc);
      if (a.predictions) a.predictions->slice(0, from, to).copy_(argmax_over_blocks(s, a.begin, *a.pg));
      const at::Tensor loss = chunk_loss(s, a, from, to);
      if (grads) {
        const auto g = torch::autograd::grad({loss}, {hc, wc});
        grad_h.slice(0, from, to).copy_(g[0]);
        grad_w.narrow(1, a.begin, len).add_(g[1]);
      }
      total += loss.detach();
    }
    if (grads) ctx->save_for_backward({grad_h, grad_w.to(head.scalar_type())});
    return total;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    return {saved[0] * grad[0], saved[1] * grad[0], at::Tensor()};
  }
};

}  // namespace

void check_vocab_parallel(const TokenDivergence& d) {
  PARE_CHECK_OPTION(d.kind != TokenDivergence::Kind::kTopK, "loss", d.str(), " keeps the teacher's ", d.k,
                    " most likely tokens over the whole vocabulary, which a tensor-parallel teacher never gathers: "
                    "use fkl, rkl, jsd:BETA or skl:ALPHA");
}

at::Tensor vocab_parallel_lm_kd_loss(const at::Tensor& hidden, const at::Tensor& head, const TeacherBlock& teacher,
                                     const at::Tensor& labels, const TokenDivergence& d, double temperature,
                                     double alpha, int64_t chunk_tokens, dist::ProcessGroup& pg,
                                     at::Tensor* predictions) {
  check_vocab_parallel(d);
  check_block(hidden, head, teacher, labels, temperature, alpha, pg);
  PARE_CHECK(chunk_tokens >= 0, "vocab_parallel_lm_kd_loss requires chunks of at least 1 token (or 0: one). However, "
             "it got ", chunk_tokens);
  const int64_t dim = hidden.size(-1), len = teacher.logits.size(-1), vocab = head.size(1);
  const int64_t per_row = hidden.numel() / std::max<int64_t>(1, hidden.size(0) * dim);  // tokens a row
  int64_t offset = 0;
  for (int r = 0; r < pg.rank(); ++r) offset += teacher.rows[r] * per_row;
  const int64_t own = hidden.size(0) * per_row;
  const Rows rows{&teacher.rows, &pg};
  at::Tensor h = GatherRows::apply(hidden.to(at::kFloat), rows).reshape({-1, dim});
  at::Tensor y = GatherRows::apply(labels.to(at::kLong), rows).reshape({-1});
  at::Tensor counted = (y != -100).nonzero().squeeze(1);
  at::Tensor picked = predictions ? at::full({counted.numel()}, -1, y.options()) : at::Tensor();
  if (predictions) *predictions = at::full(labels.sizes(), -1, y.options());
  if (counted.numel() == 0) return (h.sum() + head.sum()) * 0;  // every rank sees the same labels
  at::Tensor kept = y.index_select(0, counted);
  const int64_t lo = kept.min().item<int64_t>(), hi = kept.max().item<int64_t>();
  PARE_CHECK(lo >= 0 && hi < vocab, "vocab_parallel_lm_kd_loss requires labels in [0, ", vocab,
             ") or -100 (not counted). However, they range over [", lo, ", ", hi, "]");
  // Each rank's loss is the mean over its own counted tokens.
  at::Tensor mine = ((counted >= offset) & (counted < offset + own)).to(at::kFloat);
  mine = mine / std::max(1.0, mine.sum().item<double>());
  const at::Tensor t = teacher.logits.detach().to(at::kFloat).reshape({-1, len}).index_select(0, counted);
  const Blocks a{&t, &kept, &mine, teacher.begin, chunk_tokens > 0 ? chunk_tokens : counted.numel(), &d, temperature,
                 alpha, &pg, predictions ? &picked : nullptr};
  at::Tensor loss = VocabChunks::apply(h.index_select(0, counted), head, a);
  if (predictions) {
    at::Tensor all = at::full({y.size(0)}, -1, y.options()).index_copy_(0, counted, picked);
    *predictions = all.narrow(0, offset, own).view(labels.sizes());
  }
  return loss;
}

}  // namespace pare::distill
