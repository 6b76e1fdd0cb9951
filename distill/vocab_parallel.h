// Token-level KD against a tensor-parallel teacher without gathering its logits (Megatron's
// vocabulary-parallel cross entropy, as ModelOpt distills over tensor-parallel shards): each rank
// holds the teacher's logits for every rank's tokens on one block of the vocabulary, the student
// (data parallel, its own tokens on each rank) shares its last hidden states ([tokens, D], not
// [tokens, V]) and applies its head's same block, and the ranks exchange only [tokens]-sized values:
// the maxima and sums of exponentials that normalize both distributions, the divergence's partial
// sums and the label's logit.
//
//   auto part = sharded.forward_split(x);                          // dist::ShardedModel, split_output
//   at::Tensor loss = vocab_parallel_lm_kd_loss(hidden, head, {part.y, part.rows, part.begin},
//                                               labels, fkl, 1.0, 0.5, 512, sharded.group());
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "distill/losses.h"

namespace pare::dist {
class ProcessGroup;
}

namespace pare::distill {

/// One rank's block of a tensor-parallel teacher's logits.
struct TeacherBlock {
  at::Tensor logits;          ///< [every rank's rows (rank order), ..., block], detached
  std::vector<int64_t> rows;  ///< rows per rank
  int64_t begin = 0;          ///< the block's first token id
};

/// Throws InputError for a divergence the blocks cannot compute: topk:K (its K tokens are chosen
/// over the whole vocabulary, which no rank holds).
void check_vocab_parallel(const TokenDivergence& divergence);

/// This rank's share of lm_kd_loss (its own rows' mean) computed over vocabulary blocks, in chunks of
/// `chunk_tokens` of all ranks' counted tokens (0: one chunk) as chunked_lm_kd_loss does, so that
/// no more than one chunk's block of logits exists at once: `hidden`
/// [rows, ..., D] is the student's last hidden state for this rank's rows, `head` [D, V] its whole
/// LM head, `labels` [rows, ...] its next tokens (-100 not counted). Collective over `pg` (every
/// rank calls it, in the same order; its backward runs collectives too), whose ranks hold the
/// blocks in rank order. The gradients are those of the sum of all ranks' losses, as data-parallel
/// training averages them: the student's head gets its block's, its hidden states their rows'.
/// Equals lm_kd_loss on the whole logits up to rounding. `predictions`, when given, receives the
/// student's argmax per own token. Throws what check_vocab_parallel throws, InputError for shapes
/// that do not fit together, and what lm_kd_loss throws.
at::Tensor vocab_parallel_lm_kd_loss(const at::Tensor& hidden, const at::Tensor& head, const TeacherBlock& teacher,
                                     const at::Tensor& labels, const TokenDivergence& divergence, double temperature,
                                     double alpha, int64_t chunk_tokens, dist::ProcessGroup& pg,
                                     at::Tensor* predictions = nullptr);

}  // namespace pare::distill
