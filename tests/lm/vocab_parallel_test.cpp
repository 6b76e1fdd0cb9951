// Tests for KD against a tensor-parallel LM teacher: its logits left split by vocabulary
// (dist::ShardedModel::forward_split), and distill::vocab_parallel_lm_kd_loss over the blocks, against
// the whole teacher and lm_kd_loss on the whole logits. Two ranks are two threads in one group.
#include <gtest/gtest.h>

#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "core/error.h"
#include "core/module.h"
#include "dist/shard.h"
#include "distill/losses.h"
#include "distill/vocab_parallel.h"
#include "tests/dist_util.h"
#include "tests/lm/lm_fixtures.h"
#include "tests/test_util.h"

using namespace pare;

namespace {

constexpr int64_t kDim = 6, kVocab = 12, kSeq = 5;
const std::vector<int64_t> kRows = {2, 1};  // rank 0 has two windows, rank 1 one

at::Tensor random(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen);
}

// Next tokens of rank r's windows, some not counted.
at::Tensor labels(int r) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(40 + r);
  at::Tensor y = at::randint(0, kVocab, {kRows[r], kSeq}, gen, at::kLong);
  y.select(1, 0).fill_(-100);
  return y;
}

}  // namespace

// Each rank's loss equals lm_kd_loss of its own rows on the whole logits, and the gradients equal
// those of the sum of both ranks' losses (as data parallel training averages them): its hidden
// states', and its head block's.
TEST(VocabParallel, LossAndGradientsEqualTheWholeLogits) {
  const at::Tensor head = random({kDim, kVocab}, 1) * 0.7;
  const at::Tensor teacher = random({3, kSeq, kVocab}, 2) * 2;  // both ranks' rows
  const std::vector<at::Tensor> hidden = {random({2, kSeq, kDim}, 3), random({1, kSeq, kDim}, 4)};
  for (const char* spec : {"fkl", "rkl", "jsd:0.5", "skl:0.1"})
    for (double temperature : {1.0, 2.0})
      for (double alpha : {0.0, 0.6, 1.0}) {
        const int64_t chunk = alpha == 0.6 ? 4 : 0;  // 4: both ranks' 12 counted tokens in 3 chunks
        SCOPED_TRACE(std::string(spec) + " T=" + std::to_string(temperature) + " alpha=" + std::to_string(alpha));
        const auto d = distill::TokenDivergence::parse(spec);
        // The reference: each rank's lm_kd_loss on the whole logits, and the gradients of their sum.
        at::Tensor w = head.clone().requires_grad_();
        std::vector<at::Tensor> h, ref_loss;
        at::Tensor sum = at::zeros({});
        for (int r = 0; r < 2; ++r) {
          h.push_back(hidden[r].clone().requires_grad_());
          ref_loss.push_back(distill::lm_kd_loss(at::matmul(h[r], w), teacher.narrow(0, r == 0 ? 0 : 2, kRows[r]),
                                                 labels(r), d, temperature, alpha));
          sum = sum + ref_loss[r];
        }
        sum.backward();
        pare::testing::on_ranks(2, [&](int r, std::shared_ptr<dist::ProcessGroup> pg) {
          const int64_t block = kVocab / 2, begin = r * block;
          at::Tensor wr = head.clone().requires_grad_(), hr = hidden[r].clone().requires_grad_();
          at::Tensor pred;
          at::Tensor loss = distill::vocab_parallel_lm_kd_loss(
              hr, wr, {teacher.narrow(2, begin, block), kRows, begin}, labels(r), d, temperature, alpha, chunk, *pg,
              &pred);
          loss.backward();
          EXPECT_NEAR(loss.item<double>(), ref_loss[r].item<double>(), 1e-5);
          EXPECT_TRUE(at::allclose(hr.grad(), h[r].grad(), 1e-4, 1e-6)) << (hr.grad() - h[r].grad()).abs().max();
          EXPECT_TRUE(at::allclose(wr.grad().narrow(1, begin, block), w.grad().narrow(1, begin, block), 1e-4, 1e-6));
          EXPECT_EQ(wr.grad().narrow(1, r == 0 ? block : 0, block).abs().max().item<double>(), 0);
          const at::Tensor counted = labels(r) != -100;
          const at::Tensor argmax = at::matmul(hidden[r], head).argmax(-1);
          EXPECT_TRUE(at::equal(pred.masked_select(counted), argmax.masked_select(counted)));
        });
      }
}

TEST(VocabParallel, TopKAndMismatchedBlocksAreRefused) {
  pare::testing::on_ranks(2, [&](int r, std::shared_ptr<dist::ProcessGroup> pg) {
    const at::Tensor head = random({kDim, kVocab}, 1), h = random({kRows[r], kSeq, kDim}, 3);
    const at::Tensor t = random({3, kSeq, kVocab / 2}, 2);
    pare::testing::expect_input_error(
        [&] {
          distill::vocab_parallel_lm_kd_loss(h, head, {t, kRows, r * 6}, labels(r),
                                             distill::TokenDivergence::parse("topk:4"), 1, 1, 0, *pg);
        },
        {"topk:4", "whole vocabulary"});
    pare::testing::expect_input_error(
        [&] {
          distill::vocab_parallel_lm_kd_loss(h, head, {t, {1, 2}, r * 6}, labels(r), distill::TokenDivergence{}, 1,
                                             1, 0, *pg);
        },
        {"teacher's rows"});
    pare::testing::expect_input_error(
        [&] {
          distill::vocab_parallel_lm_kd_loss(h, head, {t, kRows, 9}, labels(r), distill::TokenDivergence{}, 1, 1, 0,
                                             *pg);
        },
        {"block"});
  });
}

// A tensor-parallel LM teacher keeps its logits split: each rank's block, for both ranks' windows,
// is the whole teacher's, with no collective after the head (Llama: two all-reduces a layer,
// attention and MLP, and one for the embedding). The head tied to the embedding too (GPT-2, and a
// tied Llama, whose ranks then hold the table once, by blocks: about half of the weights each).
TEST(VocabParallel, ATensorParallelTeacherGivesItsBlockOfTheWholeLogits) {
  for (const char* family : {"llama", "llama-tied", "gpt2"}) {
    SCOPED_TRACE(family);
    lm::LmConfig c = lm::tiny_config(std::string(family) == "gpt2" ? "gpt2" : "llama");
    c.tie_embeddings |= std::string(family) == "llama-tied";
    const lm::LmModel m = lm::make_model(c, lm::random_weights(c));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
    const at::Tensor x = at::randint(3, c.vocab, {3, 7}, gen, at::kLong);
    at::Tensor whole;
    {
      at::NoGradGuard no_grad;
      whole = core::Module(m.graph, core::Module::Use::kFrozen).forward({x})[0];
    }
    pare::testing::on_ranks(2, [&](int r, std::shared_ptr<dist::ProcessGroup> pg) {
      dist::ShardedModel t(m.graph, dist::TeacherParallel::kTensor, pg, 0, /*split_output=*/true);
      const auto part = t.forward_split(r == 0 ? x.narrow(0, 0, 2) : x.narrow(0, 2, 1));
      const int64_t block = c.vocab / 2;
      EXPECT_EQ(part.begin, r * block);
      EXPECT_EQ(part.rows, (std::vector<int64_t>{2, 1}));
      // One all-reduce of the embedding's partial sums (split by vocabulary as the head), then two a
      // layer; GPT-2's fused QKV projection is split by columns that are not whole heads: the pass
      // gathers it (two gathers more a layer).
      EXPECT_EQ(t.report().collectives, 1 + (c.family->positions == lm::Positions::kLearned ? 4 : 2) * c.layers);
      EXPECT_NE(t.shard().nodes.back().inputs.at(0).find("/local"), std::string::npos);  // no gather at the end
      if (std::string(family) == "llama-tied") {
        EXPECT_LT(t.report().rank_params[r], t.report().params * 0.55);  // norms and RoPE tables whole
        EXPECT_EQ(t.shard().parameter_count(), t.report().rank_params[r]);  // counted as it is held
      }
      EXPECT_TRUE(at::allclose(part.y, whole.narrow(2, part.begin, block), 1e-5, 1e-5))
          << (part.y - whole.narrow(2, part.begin, block)).abs().max();
      EXPECT_THROW(t.forward(x), InternalError);
    });
  }
}
