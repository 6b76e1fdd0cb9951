// Tests for on-policy distillation (GKD): lm::student_windows, the student's continuations of the
// windows with its current weights, and distill_lm taking a share of its batches from them.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "core/module.h"
#include "distill/distiller.h"
#include "lm/generate.h"
#include "tests/lm/lm_fixtures.h"
#include "tests/test_util.h"

using namespace pare;

namespace {

at::Tensor windows(int64_t n, int64_t seq) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  return at::randint(3, 40, {n, seq}, gen, at::kLong);  // no EOS (2), so nothing stops early
}

// The token `s` chooses after each row of x [B, t]: the argmax of its whole forward's last logits.
at::Tensor greedy_next(core::Module& s, const at::Tensor& x) {
  at::NoGradGuard no_grad;
  return s.forward({x})[0].select(1, x.size(1) - 1).argmax(-1);
}

}  // namespace

// Greedy, the windows are the prompt and then the student's own choices token by token, from the
// weights it has now (changed after its graph was built), for a RoPE family and for GPT-2 (learned
// positions, the head tied to the embedding).
TEST(OnPolicy, StudentWindowsAreItsGreedyContinuationsWithItsCurrentWeights) {
  for (const char* family : {"llama", "gpt2"}) {
    const lm::LmConfig c = lm::tiny_config(family);
    const lm::LmModel m = lm::make_model(c, lm::random_weights(c));
    core::Module before(m.graph, core::Module::Use::kFrozen), now(m.graph);
    {
      at::NoGradGuard no_grad;
      at::manual_seed(5);
      for (auto& p : now.parameters()) p.add_(at::randn_like(p) * 0.5);
    }
    lm::SamplingOptions greedy;
    greedy.temperature = 0;
    const auto continue_them = lm::student_windows(m, /*prompt=*/3, greedy);
    const at::Tensor x = windows(4, 8);
    const auto [wx, wy] = continue_them(now, x);
    ASSERT_EQ(wx.sizes(), x.sizes());
    ASSERT_EQ(wy.sizes(), x.sizes());
    EXPECT_TRUE(wx.narrow(1, 0, 3).equal(x.narrow(1, 0, 3))) << family;
    EXPECT_TRUE(wy.narrow(1, 0, 2).eq(-100).all().item<bool>()) << family;
    bool differs = false;  // the weights before the change would have chosen otherwise somewhere
    for (int64_t t = 3; t <= 8; ++t) {
      const at::Tensor next = greedy_next(now, wx.narrow(1, 0, t));
      if (t < 8) EXPECT_TRUE(wx.select(1, t).equal(next)) << family << " token " << t;
      EXPECT_TRUE(wy.select(1, t - 1).equal(next)) << family << " target " << t - 1;
      differs = differs || !greedy_next(before, wx.narrow(1, 0, t)).equal(next);
    }
    EXPECT_TRUE(differs) << family << ": the test cannot tell the weights apart";
  }
}

// With a share of 0.5 every second batch is the student's (batches 1, 3 and 5 of 6), with 1 every
// batch; the loss stays finite. A cache cannot score the student's tokens, and a share outside
// [0, 1] is refused naming the option.
TEST(OnPolicy, AShareOfTheBatchesTrainsOnTheStudentsWindows) {
  const lm::LmConfig c = lm::tiny_config("llama");
  const lm::LmModel teacher_model = lm::make_model(c, lm::random_weights(c));
  core::Module teacher(teacher_model.graph, core::Module::Use::kFrozen);
  const at::Tensor x = windows(6, 8);
  const core::TensorDataset data{x, at::cat({x.narrow(1, 1, 7), x.narrow(1, 0, 1)}, 1), "windows"};
  train::TrainerOptions topts;
  topts.epochs(2).batch_size(2).lr(1e-3).seed(3).progress(false);
  for (double share : {0.5, 1.0}) {
    core::Module student(teacher_model.graph);
    student.parameters()[0].data().mul_(0.5);  // not the teacher
    distill::LmDistillOptions o;
    o.divergence = distill::TokenDivergence::parse("jsd:0.5");
    o.chunk_tokens = 0;
    o.on_policy = share;
    std::vector<int64_t> calls;
    const auto continue_them = lm::student_windows(teacher_model, /*prompt=*/4, lm::SamplingOptions{});
    o.student_windows = [&](const core::Module& s, const at::Tensor& batch) {
      calls.push_back(batch.size(0));
      auto made = continue_them(s, batch);
      EXPECT_TRUE(made.second.narrow(1, 0, 3).eq(-100).all().item<bool>());
      return made;
    };
    const auto history = distill::distill_lm(student, &teacher, o, topts, data, nullptr);
    ASSERT_EQ(history.size(), 2u);
    EXPECT_EQ(calls.size(), share == 1.0 ? 6u : 3u) << share;
    for (const auto& e : history) EXPECT_TRUE(std::isfinite(e.train_loss)) << share;
  }
  core::Module student(teacher_model.graph);
  distill::LmDistillOptions o;
  o.on_policy = 1.5;
  o.student_windows = lm::student_windows(teacher_model, 4, lm::SamplingOptions{});
  pare::testing::expect_option_error([&] { distill::distill_lm(student, &teacher, o, topts, data, nullptr); },
                                     "on_policy", {"[0, 1]", "1.5"});
  o.on_policy = 0.5;
  o.student_windows = nullptr;
  pare::testing::expect_option_error([&] { distill::distill_lm(student, &teacher, o, topts, data, nullptr); },
                                     "on_policy", {"student_windows"});
}
