// The distillation losses (KD, CE, MSE, cosine, attention transfer, hints) and their weighted sum.
#include "distill/losses.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

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

// ---- Language models: divergences per token ---------------------------------------------------------

namespace {

const char* const kDivergences = "fkl, rkl, jsd:BETA, skl:ALPHA, topk:K";

double parse_divergence_weight(const std::string& spec, const std::string& v, const char* what) {
  double d = -1;
  size_t used = 0;
  try {
    d = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  PARE_CHECK(!v.empty() && used == v.size() && d >= 0 && d <= 1, "the divergence '", spec, "': ", what,
             " must be a number in [0, 1]. However, it is '", v, "'");
  return d;
}

// KL(A || B) per row from log-probabilities [M, V]: the ops of F.kl_div(log_b, log_a, 'none',
// log_target=True).sum(-1), as TRL computes it.
at::Tensor kl_rows(const at::Tensor& log_a, const at::Tensor& log_b) {
  return at::kl_div(log_b, log_a, at::Reduction::None, /*log_target=*/true).sum(-1);
}

// log(w_a * A + (1 - w_a) * B) from log-probabilities, for 0 < w_a < 1.
at::Tensor log_mixture(const at::Tensor& log_a, double w_a, const at::Tensor& log_b) {
  return at::logsumexp(at::stack({log_a + std::log(w_a), log_b + std::log1p(-w_a)}), 0);
}

// Forward KL over the teacher's K most likely tokens and one bucket holding the rest of the mass.
at::Tensor topk_kl_rows(const at::Tensor& ls, const at::Tensor& lt, int64_t k) {
  at::Tensor idx = std::get<1>(lt.topk(k, -1));
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor lt_k = lt.gather(-1, idx), ls_k = ls.gather(-1, idx);
  at::Tensor lt_tail = at::logsumexp(lt.scatter(-1, idx, -inf), {-1}, /*keepdim=*/true);
  at::Tensor ls_tail = at::logsumexp(ls.scatter(-1, idx, -inf), {-1}, /*keepdim=*/true);
  return kl_rows(at::cat({lt_k, lt_tail}, -1), at::cat({ls_k, ls_tail}, -1));
}

// The divergence per row of logits already divided by T (student s, detached teacher t) [M, V] -> [M].
at::Tensor divergence_rows(const at::Tensor& s, const at::Tensor& t, const TokenDivergence& d) {
  at::Tensor ls = at::log_softmax(s, -1), lt = at::log_softmax(t, -1);
  if (d.kind == TokenDivergence::Kind::kTopK) return d.k >= s.size(-1) ? kl_rows(lt, ls) : topk_kl_rows(ls, lt, d.k);
  return divergence_terms(ls, lt, d).sum(-1);
}

std::vector<int64_t> leading_shape(const at::Tensor& logits) {
  return logits.sizes().slice(0, logits.dim() - 1).vec();
}

void check_lm_logits(const char* loss, const at::Tensor& s, const at::Tensor& t) {
  check_same_shape(loss, s, t);
  PARE_CHECK(s.dim() >= 2 && s.size(-1) > 0, loss,
             " requires logits [..., V] of rank >= 2 with V > 0. However, they have shape ", s.sizes());
}

}  // namespace

at::Tensor divergence_terms(const at::Tensor& ls, const at::Tensor& lt, const TokenDivergence& d) {
  using Kind = TokenDivergence::Kind;
  // KL(A || B)'s terms per entry, as F.kl_div(log_b, log_a, 'none', log_target=True) makes them.
  auto kl = [](const at::Tensor& log_a, const at::Tensor& log_b) {
    return at::kl_div(log_b, log_a, at::Reduction::None, /*log_target=*/true);
  };
  switch (d.kind) {
    case Kind::kForwardKL:
      return kl(lt, ls);
    case Kind::kReverseKL:
      return kl(ls, lt);
    case Kind::kJsd: {
      if (d.weight == 0) return kl(lt, ls);
      if (d.weight == 1) return kl(ls, lt);
      at::Tensor lm = log_mixture(lt, d.weight, ls);
      return d.weight * kl(lt, lm) + (1 - d.weight) * kl(ls, lm);
    }
    case Kind::kSkewKL:
      if (d.weight == 0) return kl(lt, ls);
      if (d.weight == 1) return ls * 0;  // m = p_t: nothing to learn
      return kl(lt, log_mixture(lt, d.weight, ls));
    case Kind::kTopK:
      break;
  }
  throw InternalError("divergence_terms: topk:K is not a sum of terms per token (it picks the teacher's top K)");
}

TokenDivergence TokenDivergence::parse(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon), arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const bool has_arg = colon != std::string::npos;
  TokenDivergence d;
  if (name == "fkl" || name == "rkl") {
    PARE_CHECK(!has_arg, "the divergence '", spec, "' takes no argument (pare knows ", kDivergences, ")");
    d.kind = name == "fkl" ? Kind::kForwardKL : Kind::kReverseKL;
  } else if (name == "jsd" || name == "skl") {
    d.kind = name == "jsd" ? Kind::kJsd : Kind::kSkewKL;
    // Without a weight: TRL's default beta 0.5, DistiLLM's alpha 0.1.
    d.weight = has_arg ? parse_divergence_weight(spec, arg, name == "jsd" ? "BETA" : "ALPHA")
                       : (name == "jsd" ? 0.5 : 0.1);
  } else if (name == "topk") {
    d.kind = Kind::kTopK;
    size_t used = 0;
    long long k = 0;
    try {
      k = std::stoll(arg, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PARE_CHECK(has_arg && !arg.empty() && used == arg.size() && k >= 1, "the divergence '", spec,
               "' needs K, a whole number >= 1 of teacher tokens: topk:K, e.g. topk:64");
    d.k = k;
  } else {
    throw InputError(pare::detail::concat("unknown divergence '", spec, "'. pare knows ", kDivergences));
  }
  return d;
}

std::string TokenDivergence::str() const {
  std::ostringstream os;
  switch (kind) {
    case Kind::kForwardKL: return "fkl";
    case Kind::kReverseKL: return "rkl";
    case Kind::kJsd: os << "jsd:" << weight; break;
    case Kind::kSkewKL: os << "skl:" << weight; break;
    case Kind::kTopK: os << "topk:" << k; break;
  }
  return os.str();
}

at::Tensor token_divergence(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                            const at::Tensor& mask, const TokenDivergence& divergence, double temperature) {
  check_temperature(temperature);
  check_lm_logits("token_divergence", student_logits, teacher_logits);
  const int64_t vocab = student_logits.size(-1);
  at::Tensor s = as_float(student_logits).reshape({-1, vocab});
  at::Tensor t = as_float(teacher_logits).detach().reshape({-1, vocab});
  if (mask.defined()) {
    PARE_CHECK(mask.scalar_type() == at::kBool && mask.sizes() == at::IntArrayRef(leading_shape(student_logits)),
               "token_divergence requires a bool mask of the logits' leading shape ",
               at::IntArrayRef(leading_shape(student_logits)), ". However, it is ", mask.scalar_type(), " ",
               mask.sizes());
    at::Tensor rows = mask.reshape({-1}).nonzero().squeeze(1);
    if (rows.numel() < s.size(0)) {
      s = s.index_select(0, rows);
      t = t.index_select(0, rows);
    }
  }
  if (s.size(0) == 0) return as_float(student_logits).sum() * 0;
  return divergence_rows(s / temperature, t / temperature, divergence).sum() / s.size(0);
}

namespace {

// A log-probability that stands for no mass: finite, so that the divergences' p * (log p - log q)
// give 0 where both sides have none (exp(-1e4) is 0 in float32), not 0 * inf.
constexpr double kNoMass = -1e4;

// alpha * T*T * kd(counted) + (1 - alpha) * the next-token cross entropy of `logits` [..., V] on
// `labels`, both over the tokens counted (labels != -100); what lm_kd_loss checks, checked.
at::Tensor kd_with_ce(const char* loss, const at::Tensor& logits, const at::Tensor& labels, double temperature,
                      double alpha, const std::function<at::Tensor(const at::Tensor& counted)>& kd) {
  check_temperature(temperature);
  check_alpha(alpha);
  const int64_t vocab = logits.size(-1);
  PARE_CHECK(labels.defined() && labels.sizes() == at::IntArrayRef(leading_shape(logits)) &&
                 at::isIntegralType(labels.scalar_type(), /*includeBool=*/false),
             loss, " requires integer labels of the logits' leading shape ", at::IntArrayRef(leading_shape(logits)),
             ". However, they are ", labels.defined() ? labels.sizes() : at::IntArrayRef());
  at::Tensor y = labels.to(at::kLong);
  at::Tensor counted = y != -100;
  const int64_t n = counted.sum().item<int64_t>();
  if (n > 0) {
    at::Tensor kept = y.masked_select(counted);
    const int64_t lo = kept.min().item<int64_t>(), hi = kept.max().item<int64_t>();
    PARE_CHECK(lo >= 0 && hi < vocab, loss, " requires labels in [0, ", vocab, ") or -100 (not counted). ",
               "However, they range over [", lo, ", ", hi, "]");
  }
  at::Tensor total;
  if (alpha != 0) accumulate(total, kd(counted), alpha * temperature * temperature);
  if (alpha != 1) {
    at::Tensor ce = n == 0 ? as_float(logits).sum() * 0
                           : at::cross_entropy_loss(as_float(logits).reshape({-1, vocab}), y.reshape({-1}), {},
                                                    at::Reduction::Mean, -100);
    accumulate(total, ce, 1.0 - alpha);
  }
  return total;
}

// The student's log-probabilities `ls` [M, V] collapsed onto a sparse teacher's buckets: the tokens
// `ids` [M, W] (padding -1 at kNoMass), then the rest.
at::Tensor student_buckets(const at::Tensor& ls, const at::Tensor& ids) {
  const at::Tensor pad = ids.lt(0);
  // Padding points at the row's first token (gathered, then masked; scattering it twice is harmless).
  const at::Tensor safe = at::where(pad, ids.narrow(-1, 0, 1).clamp_min(0).expand_as(ids), ids);
  const at::Tensor named = ls.gather(-1, safe).masked_fill(pad, kNoMass);
  const at::Tensor rest = at::logsumexp(ls.scatter(-1, safe, kNoMass), {-1}, /*keepdim=*/true);
  return at::cat({named, rest}, -1);
}

void check_sparse(const char* loss, const at::Tensor& student_logits, const SparseTeacher& t) {
  PARE_CHECK(t.ids.defined() && t.log_probs.defined() && t.ids.dim() == student_logits.dim() &&
                 t.ids.sizes().slice(0, t.ids.dim() - 1) == at::IntArrayRef(leading_shape(student_logits)) &&
                 t.log_probs.sizes().slice(0, t.ids.dim() - 1) == t.ids.sizes().slice(0, t.ids.dim() - 1) &&
                 t.log_probs.size(-1) == t.ids.size(-1) + 1 && t.ids.size(-1) >= 1 &&
                 t.ids.scalar_type() == at::kLong,
             loss, " requires a sparse teacher of int64 ids [..., W] and log-probabilities [..., W + 1] with the "
             "logits' leading shape ", at::IntArrayRef(leading_shape(student_logits)), ". However, they are ",
             t.ids.defined() ? t.ids.sizes() : at::IntArrayRef(), " and ",
             t.log_probs.defined() ? t.log_probs.sizes() : at::IntArrayRef());
}

// The divergence over a sparse teacher's buckets, averaged over the rows `counted` marks.
at::Tensor sparse_divergence(const at::Tensor& student_logits, const SparseTeacher& t, const at::Tensor& counted,
                             const TokenDivergence& d, double temperature) {
  const int64_t vocab = student_logits.size(-1), width = t.ids.size(-1);
  at::Tensor s = as_float(student_logits).reshape({-1, vocab});
  at::Tensor ids = t.ids.reshape({-1, width});
  at::Tensor lt = as_float(t.log_probs).detach().reshape({-1, width + 1});
  at::Tensor rows = counted.reshape({-1}).nonzero().squeeze(1);
  if (rows.numel() < s.size(0)) {
    s = s.index_select(0, rows);
    ids = ids.index_select(0, rows);
    lt = lt.index_select(0, rows);
  }
  if (s.size(0) == 0) return as_float(student_logits).sum() * 0;
  lt = at::where(at::cat({ids.lt(0), at::zeros({lt.size(0), 1}, ids.options().dtype(at::kBool))}, 1) | lt.isneginf(),
                 at::full({}, kNoMass, lt.options()), lt);
  return divergence_rows(student_buckets(at::log_softmax(s / temperature, -1), ids), lt, d).sum() / s.size(0);
}

}  // namespace

at::Tensor lm_kd_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits, const at::Tensor& labels,
                      const TokenDivergence& divergence, double temperature, double alpha) {
  check_lm_logits("lm_kd_loss", student_logits, teacher_logits);
  return kd_with_ce("lm_kd_loss", student_logits, labels, temperature, alpha, [&](const at::Tensor& counted) {
    return token_divergence(student_logits, teacher_logits, counted, divergence, temperature);
  });
}

at::Tensor lm_kd_loss(const at::Tensor& student_logits, const SparseTeacher& teacher, const at::Tensor& labels,
                      const TokenDivergence& divergence, double temperature, double alpha) {
  PARE_CHECK(student_logits.dim() >= 2 && student_logits.size(-1) > 0,
             "lm_kd_loss requires logits [..., V] of rank >= 2 with V > 0. However, they have shape ",
             student_logits.sizes());
  check_sparse("lm_kd_loss", student_logits, teacher);
  return kd_with_ce("lm_kd_loss", student_logits, labels, temperature, alpha, [&](const at::Tensor& counted) {
    return sparse_divergence(student_logits, teacher, counted, divergence, temperature);
  });
}

namespace {

// One chunk's loss from its student logits s [c, V] and labels, tokens [begin, end) of the batch:
// the mean over the chunk's counted tokens.
using ChunkLoss = std::function<at::Tensor(const at::Tensor& s, const at::Tensor& labels, int64_t begin, int64_t end)>;

struct ChunkArgs {
  ChunkLoss loss;
  int64_t chunk;
  at::Tensor* predictions;
};

// chunked_lm_kd_loss as an autograd node: the forward walks the chunks, making the loss and, when
// the student needs them, the gradients of the hidden states and the head; backward scales those.
struct ChunkedLmKd : torch::autograd::Function<ChunkedLmKd> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& head,
                            const at::Tensor& labels, const ChunkArgs& a) {
    const int64_t dim = hidden.size(-1);
    const at::Tensor h = hidden.detach().reshape({-1, dim});
    const at::Tensor y = labels.reshape({-1}).to(at::kLong);
    const int64_t tokens = h.size(0);
    const int64_t counted = (y != -100).sum().item<int64_t>();
    const bool grads = hidden.requires_grad() || head.requires_grad();
    const at::Tensor w = as_float(head.detach());
    at::Tensor grad_h = grads ? at::zeros({tokens, dim}, h.options().dtype(at::kFloat)) : at::Tensor();
    at::Tensor grad_w = grads ? at::zeros_like(w) : at::Tensor();
    at::Tensor pred = a.predictions ? at::empty({tokens}, y.options()) : at::Tensor();
    at::Tensor total = at::zeros({}, h.options().dtype(at::kFloat));
    for (int64_t begin = 0; begin < tokens; begin += a.chunk) {
      const int64_t end = std::min(tokens, begin + a.chunk);
      const at::Tensor yc = y.slice(0, begin, end);
      const int64_t n = counted > 0 ? (yc != -100).sum().item<int64_t>() : 0;
      at::AutoGradMode grad_mode(grads && n > 0);
      at::Tensor hc = as_float(h.slice(0, begin, end)), wc = w;
      if (grads && n > 0) {
        hc = hc.detach().requires_grad_();
        wc = w.detach().requires_grad_();
      }
      const at::Tensor s = at::matmul(hc, wc);
      if (pred.defined()) pred.slice(0, begin, end).copy_(s.detach().argmax(-1));
      if (n == 0) continue;
      // The chunk's loss averages over its counted tokens; weighted back to the whole batch's.
      const at::Tensor loss = a.loss(s, yc, begin, end) * (static_cast<double>(n) / static_cast<double>(counted));
      if (grads) {
        const auto g = torch::autograd::grad({loss}, {hc, wc});
        grad_h.slice(0, begin, end).copy_(g[0]);
        grad_w.add_(g[1]);
      }
      total += loss.detach();
    }
    if (a.predictions) *a.predictions = pred.view(labels.sizes());
    if (grads) ctx->save_for_backward({grad_h.to(hidden.scalar_type()).view(hidden.sizes()), grad_w.to(head.scalar_type())});
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& g = grad_out[0];
    return {saved[0] * g, saved[1] * g, at::Tensor(), at::Tensor()};
  }
};

void check_chunked(const at::Tensor& student_hidden, const at::Tensor& student_head, const at::Tensor& labels,
                   double temperature, double alpha, int64_t chunk_tokens) {
  check_temperature(temperature);
  check_alpha(alpha);
  PARE_CHECK(chunk_tokens >= 1, "chunked_lm_kd_loss requires chunks of at least 1 token. However, it got ",
             chunk_tokens);
  PARE_CHECK(student_hidden.defined() && student_head.defined() && labels.defined(),
             "chunked_lm_kd_loss requires the hidden states, heads and labels of both models");
  PARE_CHECK(student_hidden.dim() >= 2 && student_head.dim() == 2 && student_head.size(0) == student_hidden.size(-1),
             "chunked_lm_kd_loss requires hidden states [..., D] of rank >= 2 and a head [D, V]. However, the "
             "student's hidden states have shape ", student_hidden.sizes(), " and its head ", student_head.sizes());
  PARE_CHECK(labels.sizes() == student_hidden.sizes().slice(0, student_hidden.dim() - 1) &&
                 at::isIntegralType(labels.scalar_type(), /*includeBool=*/false),
             "chunked_lm_kd_loss requires integer labels of the hidden states' leading shape ",
             student_hidden.sizes().slice(0, student_hidden.dim() - 1), ". However, they are ", labels.scalar_type(),
             " ", labels.sizes());
}

}  // namespace

at::Tensor chunked_lm_kd_loss(const at::Tensor& student_hidden, const at::Tensor& student_head,
                              const at::Tensor& teacher_hidden, const at::Tensor& teacher_head, const at::Tensor& labels,
                              const TokenDivergence& divergence, double temperature, double alpha,
                              int64_t chunk_tokens, at::Tensor* predictions) {
  check_chunked(student_hidden, student_head, labels, temperature, alpha, chunk_tokens);
  PARE_CHECK(teacher_hidden.defined() && teacher_head.defined() && teacher_hidden.dim() == student_hidden.dim() &&
                 teacher_hidden.sizes().slice(0, teacher_hidden.dim() - 1) ==
                     student_hidden.sizes().slice(0, student_hidden.dim() - 1),
             "chunked_lm_kd_loss requires hidden states [..., D] with the same leading shape. However, "
             "the student's have shape ", student_hidden.sizes(), " and the teacher's ",
             teacher_hidden.defined() ? teacher_hidden.sizes() : at::IntArrayRef());
  PARE_CHECK(teacher_head.dim() == 2 && teacher_head.size(0) == teacher_hidden.size(-1) &&
                 student_head.size(1) == teacher_head.size(1),
             "chunked_lm_kd_loss requires heads [D, V] fitting the hidden states, with the same vocabulary V. "
             "However, the student's head has shape ", student_head.sizes(), " for hidden states ",
             student_hidden.sizes(), " and the teacher's ", teacher_head.sizes(), " for ", teacher_hidden.sizes());
  const at::Tensor th = teacher_hidden.detach().reshape({-1, teacher_hidden.size(-1)}), tw = teacher_head.detach();
  ChunkLoss loss = [&](const at::Tensor& s, const at::Tensor& yc, int64_t begin, int64_t end) {
    return lm_kd_loss(s, as_float(at::matmul(th.slice(0, begin, end), tw)), yc, divergence, temperature, alpha);
  };
  return ChunkedLmKd::apply(student_hidden, student_head, labels, ChunkArgs{loss, chunk_tokens, predictions});
}

at::Tensor chunked_lm_kd_loss(const at::Tensor& student_hidden, const at::Tensor& student_head,
                              const SparseTeacher& teacher, const at::Tensor& labels,
                              const TokenDivergence& divergence, double temperature, double alpha,
                              int64_t chunk_tokens, at::Tensor* predictions) {
  check_chunked(student_hidden, student_head, labels, temperature, alpha, chunk_tokens);
  check_sparse("chunked_lm_kd_loss", student_hidden, teacher);
  const int64_t width = teacher.ids.size(-1);
  const at::Tensor ids = teacher.ids.reshape({-1, width}), lp = teacher.log_probs.reshape({-1, width + 1});
  ChunkLoss loss = [&](const at::Tensor& s, const at::Tensor& yc, int64_t begin, int64_t end) {
    return lm_kd_loss(s, SparseTeacher{ids.slice(0, begin, end), lp.slice(0, begin, end)}, yc, divergence,
                      temperature, alpha);
  };
  return ChunkedLmKd::apply(student_hidden, student_head, labels, ChunkArgs{loss, chunk_tokens, predictions});
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
