// The distillation losses, each usable alone and all combinable with weights in DistillLoss.
//
//   kd_loss(s, t, T)                 Hinton KD: KL(softmax(t/T) || softmax(s/T)) * T^2, batchmean
//   mixed_kd_loss(s, t, y, T, a)     a * KD + (1 - a) * cross-entropy(s, y)
//   token_divergence(s, t, m, d, T)  a language model's per-token fkl, rkl, jsd, skl or top-k KL
//   lm_kd_loss(s, t, y, d, T, a)     a * T^2 * token_divergence + (1 - a) * next-token cross-entropy
//   chunked_lm_kd_loss(hs, Ws, ht, Wt, y, d, T, a, c)  the same from last hidden states and LM heads,
//                                    c tokens at a time: never the whole [tokens, vocabulary] logits
//   lm_kd_loss(s, sparse, y, d, T, a)  the same against a teacher kept sparsely (a teacher cache)
//   chunked_lm_kd_loss(hs, Ws, sparse, y, d, T, a, c)  and chunked
//   logits_mse_loss(s, t)            mean squared error between logits
//   cosine_loss(s, t)                mean over rows of 1 - cos(s_i, t_i)
//   attention_transfer_loss(s, t)    MiniLM-style KL between attention distributions
//   hint_loss(s, t, proj)            FitNets-style MSE after a learned HintProjection
//
// Every loss is computed in float32 whatever the inputs' dtype, returns a 0-dim float32 tensor,
// and detaches the teacher's tensors: gradients flow to the student (and projections) only.
//
//   distill::DistillLoss loss(distill::DistillLossOptions().temperature(4).alpha(0.9)
//                                 .hint("relu2", "relu1", 0.5));
//   auto s_vals = student.forward_values({x}, loss.student_values_needed());
//   auto t_vals = teacher.forward_values({x}, loss.teacher_values_needed());
//   loss.prepare(s_vals, t_vals);        // builds the projections, before making the optimizer
//   ... optimizer over student.parameters() + loss.parameters() ...
//   auto parts = loss.compute(s_vals, t_vals, y, "logits", "logits");
//   parts.total.backward();
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace pare::distill {

/// Hinton KD: KL(softmax(t/T) || softmax(s/T)) with reduction batchmean (sum / N), times T*T.
/// Equals PyTorch's F.kl_div(F.log_softmax(s/T, 1), F.softmax(t/T, 1), reduction='batchmean')*T*T
/// (same ATen ops, in float32). Logits are [N, C].
/// Throws InputError if `temperature` <= 0 (or not finite), the shapes differ or are not [N, C].
at::Tensor kd_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits, double temperature);

/// alpha * kd_loss(s, t, T) + (1 - alpha) * cross_entropy(s, labels) (mean over the batch).
/// A term whose weight is exactly 0 is not computed (so alpha = 1 accepts undefined labels).
/// `labels` are int64 class indices [N]. Throws InputError for alpha outside [0, 1], labels of
/// the wrong shape or dtype, and what kd_loss throws.
at::Tensor mixed_kd_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                         const at::Tensor& labels, double temperature, double alpha);

/// The divergence between a language model student's and its teacher's next-token distributions
/// p_s = softmax(s/T) and p_t = softmax(t/T) (`pare distill --loss`), one value per token:
///   fkl        forward KL(p_t || p_s) (Hinton KD per token)
///   rkl        reverse KL(p_s || p_t) (MiniLLM: mode-seeking)
///   jsd:BETA   generalized Jensen-Shannon divergence as TRL's GKDTrainer.generalized_jsd_loss:
///              BETA KL(p_t || m) + (1 - BETA) KL(p_s || m), m = BETA p_t + (1 - BETA) p_s; BETA = 0 is
///              fkl and BETA = 1 is rkl (taken as those, as TRL does: the formula vanishes there)
///   skl:ALPHA  skew KL (DistiLLM): KL(p_t || ALPHA p_t + (1 - ALPHA) p_s); ALPHA = 0 is fkl
///   topk:K     forward KL over K + 1 buckets: the teacher's K most likely tokens and one tail bucket
///              holding the rest of each distribution's mass (K >= vocabulary is fkl)
struct TokenDivergence {
  enum class Kind { kForwardKL, kReverseKL, kJsd, kSkewKL, kTopK };
  Kind kind = Kind::kForwardKL;
  double weight = 0;  ///< BETA of jsd, ALPHA of skl
  int64_t k = 0;      ///< K of topk

  /// "fkl", "rkl", "jsd:0.5", "skl:0.1", "topk:64". Throws InputError naming the spelling and the
  /// ones it knows, or a weight outside [0, 1], or K < 1.
  static TokenDivergence parse(const std::string& spec);
  /// The spelling parse() reads back.
  std::string str() const;
};

/// The divergence's terms per vocabulary entry from log-probabilities at T (student `ls`, detached
/// teacher `lt`, [..., V] or any block of the vocabulary of both): summed over the whole
/// vocabulary they give the divergence per token. For the vocabulary-parallel loss, where each
/// rank holds a block. Every kind but topk:K (InternalError): its K tokens are chosen over the whole
/// vocabulary.
at::Tensor divergence_terms(const at::Tensor& ls, const at::Tensor& lt, const TokenDivergence& divergence);

/// The mean over counted tokens of the divergence per token (summed over the vocabulary), without a
/// T*T factor: equals TRL's generalized_jsd_loss(s, t, labels, beta, T, 'batchmean') for jsd (and
/// fkl, rkl as its beta = 0 and 1). Logits are [..., V], student and teacher of the same shape (any
/// leading dims: [B, S, V] or [N, V]); `mask` is bool of the leading shape, true for the tokens that
/// count (HF's labels != -100), or undefined for all. Only the counted rows are computed. Float32;
/// the teacher is detached. No counted token gives 0 (differentiable, gradient 0).
/// Throws InputError for different shapes, a rank below 2, a mask of another shape or dtype, and a
/// temperature <= 0.
at::Tensor token_divergence(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                            const at::Tensor& mask, const TokenDivergence& divergence, double temperature);

/// The language-model distillation loss: alpha * T*T * token_divergence(s, t, labels != -100) +
/// (1 - alpha) * the next-token cross entropy on `labels` (int64 of the leading shape, -100 for
/// tokens not counted: prompt and padding), both averaged over the counted tokens. The T*T keeps the
/// KD gradient's scale independent of T (Hinton); at T = 1 the term is TRL's loss. A term of weight
/// exactly 0 is not computed. Throws what token_divergence throws, and InputError for alpha outside
/// [0, 1] or labels of another shape, dtype or outside [0, V) besides -100.
at::Tensor lm_kd_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits, const at::Tensor& labels,
                      const TokenDivergence& divergence, double temperature, double alpha);

/// lm_kd_loss of the logits hidden @ head for the student and the teacher, computed in chunks of
/// `chunk_tokens` tokens so that no more than one chunk's [tokens, vocabulary] logits of either model
/// exist at once: `student_hidden` [..., D] is the student's last hidden state (after its final
/// norm) and `student_head` [D, V] its LM head as the graph multiplies by it; `teacher_hidden`
/// [..., Dt] (the same leading shape) and `teacher_head` [Dt, V] the teacher's, detached. As Liger's
/// fused linear cross entropy does, each chunk's gradients for the hidden state and the head are
/// made in the forward, while its logits exist, and backward only scales them: one head product
/// forward and two backward, as the plain loss, with memory of one chunk. Equals lm_kd_loss of the
/// whole logits up to rounding (the sum runs in another order). `predictions`, when given, receives
/// the student's argmax per token (labels' shape) for accuracy. Throws InputError for shapes that do
/// not fit together, chunk_tokens < 1, and what lm_kd_loss throws.
at::Tensor chunked_lm_kd_loss(const at::Tensor& student_hidden, const at::Tensor& student_head,
                              const at::Tensor& teacher_hidden, const at::Tensor& teacher_head, const at::Tensor& labels,
                              const TokenDivergence& divergence, double temperature, double alpha,
                              int64_t chunk_tokens, at::Tensor* predictions = nullptr);

/// A teacher's distribution per token kept sparsely, as a language model's teacher cache holds it
/// (engine::LmTeacherCacheFile): `ids` [..., W] int64, the tokens it names (-1: padding), and
/// `log_probs` [..., W + 1] float, their log-probabilities at the cache's temperature and last the
/// log of the mass on the tokens it does not name (-inf, as padding's, for none).
struct SparseTeacher {
  at::Tensor ids, log_probs;
};

/// lm_kd_loss against a sparse teacher: the divergence is computed over W + 1 buckets, the
/// teacher's named tokens and the rest, the student's distribution (at T) collapsed onto the same
/// buckets. fkl is then the top-k KL with a tail bucket (equal to lm_kd_loss's topk:W for the same
/// teacher); with sampled counts (no rest) it is Sparse Logit Sampling's unbiased estimate. rkl and
/// jsd:1 need the teacher's mass on every token the student names, which sampled caches do not keep:
/// the caller refuses them. Throws InputError for shapes that do not fit together, and what
/// lm_kd_loss throws.
at::Tensor lm_kd_loss(const at::Tensor& student_logits, const SparseTeacher& teacher, const at::Tensor& labels,
                      const TokenDivergence& divergence, double temperature, double alpha);

/// chunked_lm_kd_loss against a sparse teacher: the student's logits made and dropped chunk by
/// chunk as there. Equals the plain sparse lm_kd_loss up to rounding.
at::Tensor chunked_lm_kd_loss(const at::Tensor& student_hidden, const at::Tensor& student_head,
                              const SparseTeacher& teacher, const at::Tensor& labels,
                              const TokenDivergence& divergence, double temperature, double alpha,
                              int64_t chunk_tokens, at::Tensor* predictions = nullptr);

/// Mean squared error over all elements. Throws InputError when the shapes differ.
at::Tensor logits_mse_loss(const at::Tensor& student, const at::Tensor& teacher);

/// mean_i (1 - cos(s_i, t_i)) with rows i over dim 0 (all other dims flattened; eps 1e-8 as in
/// F.cosine_similarity). Throws InputError when the shapes differ or a tensor has rank 0.
at::Tensor cosine_loss(const at::Tensor& student, const at::Tensor& teacher);

/// Attention transfer for transformer attention probabilities [N, H, S, S] (rank 3 [N, S, S] is
/// read as one head), as in MiniLM: KL(teacher row || student row) summed over the keys, then
/// averaged over batch, heads and query positions. When the head counts differ, both maps are
/// first averaged over heads (an average of distributions is a distribution), so a 12-head
/// teacher can teach a 4-head student. Student probabilities are clamped to >= 1e-12 before the
/// log so that a softmax that underflowed to 0 gives a large finite loss, not Inf.
/// Throws InputError when ranks, batch or sequence sizes differ.
at::Tensor attention_transfer_loss(const at::Tensor& student_attn, const at::Tensor& teacher_attn);

/// Feature (hint) distillation's learned map from a student value to the teacher's shape:
///   [N, C] or [N, S, C]    a linear map Cs -> Ct on the last dim;
///   [N, C, H, W]           adaptive average pooling of the student to the teacher's H x W when
///                          they differ, then a 1x1 convolution Cs -> Ct;
///   identity when the shapes (past the batch dim) already match: no parameters.
/// Initialised like nn.Linear / nn.Conv2d (U(-1/sqrt(Cs), 1/sqrt(Cs)) for weight and bias) from
/// a generator seeded with `seed`, on the student example's device. Trained with the student
/// (hand parameters() to the optimizer) and never exported.
class HintProjection {
 public:
  enum class Kind { kIdentity, kLinear, kConv1x1 };

  /// Throws InputError when the ranks differ, a rank is not 2, 3 or 4, or a non-channel size
  /// that cannot be bridged differs (the sequence length of [N, S, C] values).
  HintProjection(const at::Tensor& student_example, const at::Tensor& teacher_example, uint64_t seed);

  /// The student value mapped to the teacher's shape (float32). Throws InputError when `s` does
  /// not have the student example's shape past the batch dim.
  at::Tensor project(const at::Tensor& s) const;

  /// The trainable tensors (weight, bias), empty for the identity.
  std::vector<at::Tensor> parameters() const;

  /// {"weight", "bias"} for checkpoints (detached; empty for the identity).
  std::map<std::string, at::Tensor> state() const;
  /// Copies saved weights into the parameters in place (the optimizer keeps its handles).
  /// Throws InputError for a missing or extra name or a shape that differs.
  void load_state(const std::map<std::string, at::Tensor>& state);

  Kind kind() const { return kind_; }

 private:
  Kind kind_ = Kind::kIdentity;
  std::vector<int64_t> student_shape_, teacher_shape_;  // past the batch dim
  bool pool_ = false;
  at::Tensor weight_, bias_;
};

/// MSE between proj.project(student_feature) and the (detached) teacher feature.
/// Throws InputError when the projected shape differs from the teacher's.
at::Tensor hint_loss(const at::Tensor& student_feature, const at::Tensor& teacher_feature,
                     const HintProjection& proj);

/// One intermediate-value pairing for hint or attention losses.
struct ValuePair {
  std::string teacher_value, student_value;
  double weight = 1.0;
};

/// What DistillLoss combines. The CE weight is derived: 1 - alpha.
struct DistillLossOptions {
  DistillLossOptions& temperature(double v) { temperature_ = v; return *this; }
  /// Weight of the KD term; cross-entropy on the labels gets 1 - alpha.
  DistillLossOptions& alpha(double v) { alpha_ = v; return *this; }
  /// Weight of logits_mse_loss(student logits, teacher logits).
  DistillLossOptions& mse_weight(double v) { mse_weight_ = v; return *this; }
  /// Weight of cosine_loss(student logits, teacher logits).
  DistillLossOptions& cosine_weight(double v) { cosine_weight_ = v; return *this; }
  /// Adds a hint (feature MSE through a HintProjection) between two named values.
  DistillLossOptions& hint(std::string teacher_value, std::string student_value, double weight = 1.0) {
    hints_.push_back({std::move(teacher_value), std::move(student_value), weight});
    return *this;
  }
  DistillLossOptions& hints(std::vector<ValuePair> v) { hints_ = std::move(v); return *this; }
  /// Adds an attention-transfer term between two attention-probability values ([N, H, S, S]).
  DistillLossOptions& attention(std::string teacher_value, std::string student_value, double weight = 1.0) {
    attention_.push_back({std::move(teacher_value), std::move(student_value), weight});
    return *this;
  }
  DistillLossOptions& attentions(std::vector<ValuePair> v) { attention_ = std::move(v); return *this; }
  /// Seeds the hint projections' initialisation (hint i uses seed + i).
  DistillLossOptions& seed(uint64_t v) { seed_ = v; return *this; }

  double ce_weight() const { return 1.0 - alpha_; }

  double temperature_ = 4.0, alpha_ = 0.9, mse_weight_ = 0.0, cosine_weight_ = 0.0;
  std::vector<ValuePair> hints_, attention_;
  uint64_t seed_ = 0;

  /// Throws InputError naming the option: temperature <= 0, alpha outside [0, 1], a negative or
  /// non-finite weight, an empty value name.
  void validate() const;
};

/// The loss total and each term's value (unweighted, for logging; reading them syncs a GPU once
/// per term and step).
struct LossParts {
  at::Tensor total;                      ///< 0-dim float32, differentiable wrt the student
  std::map<std::string, double> parts;   ///< "kd", "ce", "mse", "cosine", "hint:<t>:<s>", "attn:<t>:<s>"
};

/// The weighted sum of the losses DistillLossOptions asks for. Terms with weight 0 are skipped.
class DistillLoss {
 public:
  /// Throws what DistillLossOptions::validate throws.
  explicit DistillLoss(DistillLossOptions opts);

  /// Builds the hint projections from a first batch's values (seeded; only the first call does
  /// anything). Call it before handing parameters() to the optimizer; compute() calls it too.
  /// Throws InputError naming a missing value or a hint pair that cannot be bridged.
  void prepare(const std::unordered_map<std::string, at::Tensor>& student_values,
               const std::unordered_map<std::string, at::Tensor>& teacher_values);
  bool prepared() const { return prepared_; }

  /// Total loss and parts for one batch. `labels` may be undefined when the CE weight is 0.
  /// Throws InputError naming a missing value, and what the individual losses throw.
  LossParts compute(const std::unordered_map<std::string, at::Tensor>& student_values,
                    const std::unordered_map<std::string, at::Tensor>& teacher_values,
                    const at::Tensor& labels, const std::string& student_logits_name,
                    const std::string& teacher_logits_name);

  /// The projections' trainable tensors (empty before prepare()).
  std::vector<at::Tensor> parameters() const;

  /// Intermediate values the student / teacher must return (for forward_values' `extra`), in
  /// option order without duplicates; the logits are not included.
  std::vector<std::string> student_values_needed() const;
  std::vector<std::string> teacher_values_needed() const;

  /// Projection weights for checkpoints, as "hint:<t>:<s>.weight" / ".bias".
  std::map<std::string, at::Tensor> state() const;
  /// Restores state(): applied now when prepared, otherwise kept and applied by prepare().
  /// Throws InputError for a name no hint owns or a shape that differs.
  void load_state(const std::map<std::string, at::Tensor>& state);

  const DistillLossOptions& options() const { return opts_; }

 private:
  void apply_state(const std::map<std::string, at::Tensor>& state);

  DistillLossOptions opts_;
  bool prepared_ = false;
  std::vector<HintProjection> projections_;  // one per hint, in option order
  std::map<std::string, at::Tensor> pending_state_;
};

}  // namespace pare::distill
