#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/module.h"
#include "core/tensor_io.h"
#include "core/zoo.h"
#include "distill/losses.h"

using namespace pare;
using distill::HintProjection;

namespace {

at::Tensor randn(at::IntArrayRef shape, uint64_t seed, double scale = 1.0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen) * scale;
}

at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }

// Explicit Hinton KD in float64: sum_ij q_ij (log q_ij - log p_ij) / N * T^2.
double kd_reference(const at::Tensor& s, const at::Tensor& t, double T) {
  at::Tensor s64 = s.detach().to(at::kDouble), t64 = t.detach().to(at::kDouble);
  at::Tensor q = at::softmax(t64 / T, 1), log_q = at::log_softmax(t64 / T, 1);
  at::Tensor log_p = at::log_softmax(s64 / T, 1);
  return ((q * (log_q - log_p)).sum() / s.size(0) * T * T).item<double>();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

}  // namespace

// ---- kd_loss / mixed_kd_loss -----------------------------------------------------------------------

TEST(KdLoss, MatchesExplicitFormula) {
  for (double T : {1.0, 2.0, 4.0, 7.5}) {
    at::Tensor s = randn({16, 10}, 1, 3.0), t = randn({16, 10}, 2, 3.0);
    at::Tensor loss = distill::kd_loss(s, t, T);
    EXPECT_EQ(loss.dim(), 0);
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    EXPECT_NEAR(loss.item<double>(), kd_reference(s, t, T), 1e-5) << "T=" << T;
  }
}

TEST(KdLoss, ZeroWhenStudentEqualsTeacher) {
  at::Tensor s = randn({8, 5}, 3, 4.0);
  EXPECT_NEAR(distill::kd_loss(s, s.clone(), 4.0).item<double>(), 0.0, 1e-6);
  EXPECT_GT(distill::kd_loss(s, randn({8, 5}, 4), 4.0).item<double>(), 1e-3);
}

TEST(KdLoss, GradientIsAnalyticAndReachesStudentOnly) {
  const double T = 3.0;
  at::Tensor s = leaf(randn({6, 7}, 5, 2.0)), t = leaf(randn({6, 7}, 6, 2.0));
  distill::kd_loss(s, t, T).backward();
  at::Tensor expected = (at::softmax(s.detach() / T, 1) - at::softmax(t.detach() / T, 1)) * T / s.size(0);
  ASSERT_TRUE(s.grad().defined());
  EXPECT_LT((s.grad() - expected).abs().max().item<double>(), 1e-6);
  EXPECT_FALSE(t.grad().defined()) << "the teacher's logits must be detached";
}

TEST(KdLoss, GradientMatchesFiniteDifferences) {
  const double T = 2.0, eps = 1e-2;
  at::Tensor s0 = randn({3, 4}, 7), t = randn({3, 4}, 8);
  at::Tensor s = leaf(s0);
  distill::kd_loss(s, t, T).backward();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      at::Tensor plus = s0.clone(), minus = s0.clone();
      plus[i][j] += eps;
      minus[i][j] -= eps;
      double fd = (kd_reference(plus, t, T) - kd_reference(minus, t, T)) / (2 * eps);
      EXPECT_NEAR(s.grad()[i][j].item<double>(), fd, 1e-4) << i << "," << j;
    }
}

TEST(KdLoss, ComputesInFloat32WhateverTheInputDtype) {
  at::Tensor s = randn({4, 3}, 9), t = randn({4, 3}, 10);
  at::Tensor a = distill::kd_loss(s.to(at::kDouble), t.to(at::kHalf).to(at::kDouble), 2.0);
  at::Tensor b = distill::kd_loss(s, t.to(at::kHalf), 2.0);
  EXPECT_EQ(a.scalar_type(), at::kFloat);
  EXPECT_EQ(a.item<float>(), b.item<float>());
}

TEST(KdLoss, RejectsBadTemperatureAndShapes) {
  at::Tensor s = randn({4, 3}, 1), t = randn({4, 3}, 2);
  EXPECT_NE(error_of([&] { distill::kd_loss(s, t, 0.0); }).find("temperature must be"), std::string::npos);
  EXPECT_NE(error_of([&] { distill::kd_loss(s, t, -1.0); }).find("-1"), std::string::npos);
  EXPECT_NE(error_of([&] { distill::kd_loss(s, randn({4, 5}, 2), 1.0); }).find("[4, 5]"), std::string::npos);
  EXPECT_NE(error_of([&] { distill::kd_loss(randn({4}, 1), randn({4}, 2), 1.0); }).find("[N, C]"),
            std::string::npos);
}

TEST(MixedKdLoss, AlphaZeroIsCrossEntropyAndAlphaOneIsKd) {
  at::Tensor s = randn({8, 5}, 11, 2.0), t = randn({8, 5}, 12, 2.0);
  at::Tensor y = at::randint(0, 5, {8}, at::make_generator<at::CPUGeneratorImpl>(13), at::kLong);
  at::Tensor ce = at::cross_entropy_loss(s, y);
  at::Tensor kd = distill::kd_loss(s, t, 4.0);
  EXPECT_TRUE(at::equal(distill::mixed_kd_loss(s, t, y, 4.0, 0.0), ce));
  EXPECT_TRUE(at::equal(distill::mixed_kd_loss(s, t, y, 4.0, 1.0), kd));
  EXPECT_TRUE(at::equal(distill::mixed_kd_loss(s, t, at::Tensor(), 4.0, 1.0), kd)) << "alpha=1 needs no labels";
  EXPECT_NEAR(distill::mixed_kd_loss(s, t, y, 4.0, 0.3).item<double>(),
              0.3 * kd.item<double>() + 0.7 * ce.item<double>(), 1e-6);
}

TEST(MixedKdLoss, RejectsBadAlphaAndLabels) {
  at::Tensor s = randn({4, 3}, 1), t = randn({4, 3}, 2);
  at::Tensor y = at::tensor({0, 1, 2, 1}, at::kLong);
  EXPECT_NE(error_of([&] { distill::mixed_kd_loss(s, t, y, 2.0, 1.5); }).find("alpha"), std::string::npos);
  EXPECT_NE(error_of([&] { distill::mixed_kd_loss(s, t, at::Tensor(), 2.0, 0.5); }).find("requires labels"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::mixed_kd_loss(s, t, at::tensor({0, 1, 3, 1}, at::kLong), 2.0, 0.5); })
                .find("[0, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::mixed_kd_loss(s, t, y.view({2, 2}), 2.0, 0.5); }).find("[N]"),
            std::string::npos);
}

// ---- mse / cosine ----------------------------------------------------------------------------------

TEST(LogitsMseLoss, MeanOfSquaredDifferences) {
  at::Tensor s = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({2, 2});
  at::Tensor t = at::tensor({1.0f, 0.0f, 3.0f, 0.0f}).view({2, 2});
  EXPECT_FLOAT_EQ(distill::logits_mse_loss(s, t).item<float>(), (4.0f + 16.0f) / 4.0f);
  EXPECT_NE(error_of([&] { distill::logits_mse_loss(s, t.view({4})); }).find("same shape"), std::string::npos);
}

TEST(CosineLoss, OneMinusCosineAveragedOverRows) {
  at::Tensor s = at::tensor({1.0f, 0.0f, 0.0f, 1.0f, 2.0f, 2.0f}).view({3, 2});
  at::Tensor t = at::tensor({3.0f, 0.0f, 1.0f, 0.0f, -1.0f, -1.0f}).view({3, 2});
  // cos = 1, 0, -1  ->  1 - cos = 0, 1, 2
  EXPECT_NEAR(distill::cosine_loss(s, t).item<double>(), 1.0, 1e-6);
  // Rows of rank-4 values are flattened: a scaled copy is at distance 0.
  at::Tensor f = randn({2, 3, 4, 4}, 3);
  EXPECT_NEAR(distill::cosine_loss(f, f * 2.5).item<double>(), 0.0, 1e-6);
  at::Tensor fs = leaf(f);
  distill::cosine_loss(fs, randn({2, 3, 4, 4}, 4)).backward();
  EXPECT_GT(fs.grad().abs().sum().item<double>(), 0.0);
}

// ---- attention transfer ----------------------------------------------------------------------------

TEST(AttentionTransferLoss, ZeroForEqualMapsPositiveOtherwise) {
  at::Tensor a = at::softmax(randn({2, 4, 5, 5}, 1, 2.0), -1);
  at::Tensor b = at::softmax(randn({2, 4, 5, 5}, 2, 2.0), -1);
  EXPECT_NEAR(distill::attention_transfer_loss(a, a.clone()).item<double>(), 0.0, 1e-6);
  at::Tensor s = leaf(a);
  at::Tensor loss = distill::attention_transfer_loss(s, b);
  // KL(b || a) per row, mean over the 2*4*5 rows.
  double expected = ((b * (b.log() - a.log())).sum() / 40).item<double>();
  EXPECT_NEAR(loss.item<double>(), expected, 1e-6);
  loss.backward();
  EXPECT_GT(s.grad().abs().sum().item<double>(), 0.0);
}

TEST(AttentionTransferLoss, AveragesOverHeadsWhenHeadCountsDiffer) {
  at::Tensor t = at::softmax(randn({2, 6, 4, 4}, 3), -1);
  at::Tensor s = at::softmax(randn({2, 2, 4, 4}, 4), -1);
  at::Tensor tm = t.mean(1, true), sm = s.mean(1, true);
  double expected = ((tm * (tm.log() - sm.log())).sum() / 8).item<double>();
  EXPECT_NEAR(distill::attention_transfer_loss(s, t).item<double>(), expected, 1e-6);
  // Same average over heads: zero loss even though the heads differ.
  EXPECT_NEAR(distill::attention_transfer_loss(tm.expand({2, 3, 4, 4}), t).item<double>(), 0.0, 1e-6);
  EXPECT_NE(error_of([&] { distill::attention_transfer_loss(s, at::softmax(randn({2, 6, 5, 5}, 3), -1)); })
                .find("sequence lengths"),
            std::string::npos);
}

TEST(AttentionTransferLoss, FiniteWhenStudentUnderflows) {
  at::Tensor t = at::full({1, 1, 2, 2}, 0.5);
  at::Tensor s = at::tensor({1.0f, 0.0f, 0.0f, 1.0f}).view({1, 1, 2, 2});
  EXPECT_TRUE(std::isfinite(distill::attention_transfer_loss(s, t).item<double>()));
}

// ---- hints -----------------------------------------------------------------------------------------

TEST(HintProjection, LinearForFlatAndSequenceValues) {
  HintProjection p(randn({4, 8}, 1), randn({4, 16}, 2), 7);
  EXPECT_EQ(p.kind(), HintProjection::Kind::kLinear);
  EXPECT_EQ(p.project(randn({3, 8}, 3)).sizes(), at::IntArrayRef({3, 16}));
  ASSERT_EQ(p.parameters().size(), 2u);
  EXPECT_EQ(p.parameters()[0].sizes(), at::IntArrayRef({16, 8}));
  EXPECT_LE(p.parameters()[0].abs().max().item<double>(), 1.0 / std::sqrt(8.0));

  HintProjection q(randn({2, 5, 8}, 1), randn({2, 5, 12}, 2), 7);
  EXPECT_EQ(q.kind(), HintProjection::Kind::kLinear);
  EXPECT_EQ(q.project(randn({2, 5, 8}, 3)).sizes(), at::IntArrayRef({2, 5, 12}));
  EXPECT_NE(error_of([&] { HintProjection(randn({2, 5, 8}, 1), randn({2, 6, 12}, 2), 0); }).find("sequence length"),
            std::string::npos);
  EXPECT_NE(error_of([&] { q.project(randn({2, 5, 9}, 3)); }).find("[2, 5, 9]"), std::string::npos);
}

TEST(HintProjection, Conv1x1AndPoolingForImages) {
  HintProjection p(randn({2, 4, 8, 8}, 1), randn({2, 6, 4, 4}, 2), 3);
  EXPECT_EQ(p.kind(), HintProjection::Kind::kConv1x1);
  EXPECT_EQ(p.project(randn({2, 4, 8, 8}, 3)).sizes(), at::IntArrayRef({2, 6, 4, 4}));
  EXPECT_EQ(p.parameters()[0].sizes(), at::IntArrayRef({6, 4, 1, 1}));

  // Same channels, different spatial size: pooling only.
  HintProjection q(randn({2, 4, 8, 8}, 1), randn({2, 4, 2, 2}, 2), 3);
  EXPECT_EQ(q.kind(), HintProjection::Kind::kIdentity);
  at::Tensor x = randn({2, 4, 8, 8}, 4);
  EXPECT_TRUE(at::allclose(q.project(x), at::adaptive_avg_pool2d(x, {2, 2})));
  EXPECT_NE(error_of([&] { HintProjection(randn({2, 4, 8, 8}, 1), randn({2, 16}, 2), 0); }).find("same rank"),
            std::string::npos);
}

TEST(HintProjection, IdentityWhenShapesMatch) {
  HintProjection p(randn({2, 3, 8}, 1), randn({2, 3, 8}, 2), 0);
  EXPECT_EQ(p.kind(), HintProjection::Kind::kIdentity);
  EXPECT_TRUE(p.parameters().empty());
  at::Tensor x = randn({2, 3, 8}, 3);
  EXPECT_TRUE(at::equal(p.project(x), x));
  EXPECT_NEAR(distill::hint_loss(x, x.clone(), p).item<double>(), 0.0, 0.0);
}

TEST(HintProjection, ParametersAndStudentGetGradients) {
  HintProjection p(randn({4, 3, 6, 6}, 1), randn({4, 5, 3, 3}, 2), 9);
  at::Tensor s = leaf(randn({4, 3, 6, 6}, 3));
  at::Tensor t = leaf(randn({4, 5, 3, 3}, 4));
  at::Tensor loss = distill::hint_loss(s, t, p);
  loss.backward();
  for (const auto& w : p.parameters()) {
    ASSERT_TRUE(w.grad().defined());
    EXPECT_GT(w.grad().abs().sum().item<double>(), 0.0);
  }
  EXPECT_GT(s.grad().abs().sum().item<double>(), 0.0);
  EXPECT_FALSE(t.grad().defined());
  // Matches the explicit computation.
  at::Tensor ref = at::conv2d(at::adaptive_avg_pool2d(s.detach(), {3, 3}), p.parameters()[0].detach(),
                              p.parameters()[1].detach());
  EXPECT_NEAR(loss.item<double>(), (ref - t.detach()).pow(2).mean().item<double>(), 1e-6);
}

TEST(HintProjection, SeededAndRestoredFromState) {
  at::Tensor s = randn({2, 8}, 1), t = randn({2, 4}, 2);
  HintProjection a(s, t, 5), b(s, t, 5), c(s, t, 6);
  EXPECT_TRUE(at::equal(a.parameters()[0], b.parameters()[0]));
  EXPECT_FALSE(at::equal(a.parameters()[0], c.parameters()[0]));
  at::Tensor handle = c.parameters()[0];
  c.load_state(a.state());
  EXPECT_TRUE(at::equal(handle, a.parameters()[0])) << "loaded in place, optimizer handles stay valid";
  EXPECT_TRUE(at::equal(c.parameters()[1], a.parameters()[1]));
  EXPECT_NE(error_of([&] { c.load_state({{"weight", at::zeros({4, 9})}, {"bias", at::zeros({4})}}); })
                .find("[4, 9]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.load_state({{"weight", at::zeros({4, 8})}}); }).find("\"bias\""), std::string::npos);
}

// ---- options and the combined loss -----------------------------------------------------------------

TEST(DistillLossOptions, DefaultsAndValidation) {
  distill::DistillLossOptions o;
  EXPECT_EQ(o.temperature_, 4.0);
  EXPECT_EQ(o.alpha_, 0.9);
  EXPECT_NEAR(o.ce_weight(), 0.1, 1e-12);
  EXPECT_NO_THROW(o.validate());
  auto err = [](const distill::DistillLossOptions& opts) { return error_of([&] { opts.validate(); }); };
  EXPECT_NE(err(distill::DistillLossOptions().temperature(0)).find("temperature"), std::string::npos);
  EXPECT_NE(err(distill::DistillLossOptions().temperature(-2)).find("temperature"), std::string::npos);
  EXPECT_NE(err(distill::DistillLossOptions().alpha(-0.1)).find("alpha"), std::string::npos);
  EXPECT_NE(err(distill::DistillLossOptions().alpha(1.1)).find("alpha"), std::string::npos);
  EXPECT_NE(err(distill::DistillLossOptions().mse_weight(-1)).find("MSE weight"), std::string::npos);
  EXPECT_NE(err(distill::DistillLossOptions().cosine_weight(-1)).find("cosine"), std::string::npos);
  EXPECT_NE(err(distill::DistillLossOptions().hint("a", "b", -1)).find("hint weight"), std::string::npos);
  EXPECT_NE(err(distill::DistillLossOptions().attention("a", "b", -1)).find("attention weight"), std::string::npos);
  EXPECT_NE(err(distill::DistillLossOptions().hint("a", "")).find("value name"), std::string::npos);
  EXPECT_NE(err(distill::DistillLossOptions().hint("a", "b").hint("a", "b")).find("twice"), std::string::npos);
  EXPECT_THROW(distill::DistillLoss(distill::DistillLossOptions().alpha(2)), InputError);
}

TEST(DistillLoss, DefaultIsTheMixedKdLoss) {
  at::Tensor s = randn({8, 10}, 1, 2.0), t = randn({8, 10}, 2, 2.0);
  at::Tensor y = at::randint(0, 10, {8}, at::make_generator<at::CPUGeneratorImpl>(3), at::kLong);
  distill::DistillLoss loss(distill::DistillLossOptions().temperature(3).alpha(0.7));
  auto parts = loss.compute({{"logits", s}}, {{"out", t}}, y, "logits", "out");
  EXPECT_TRUE(at::equal(parts.total, distill::mixed_kd_loss(s, t, y, 3, 0.7)));
  EXPECT_EQ(parts.parts.size(), 2u);
  EXPECT_NEAR(parts.parts.at("kd"), distill::kd_loss(s, t, 3).item<double>(), 1e-7);
  EXPECT_NEAR(parts.parts.at("ce"), at::cross_entropy_loss(s, y).item<double>(), 1e-7);
  EXPECT_TRUE(loss.student_values_needed().empty());
  EXPECT_NE(error_of([&] { loss.compute({{"logits", s}}, {{"out", t}}, y, "logits", "logits"); })
                .find("teacher value \"logits\". However, the teacher returned only: out"),
            std::string::npos);
}

TEST(DistillLoss, CombinesEveryTermOnTransformers) {
  // A 4-head d=32 teacher and a 2-head d=16 student: attention maps averaged over heads, hints
  // through a linear map 16 -> 32.
  core::Module teacher(core::build_zoo_model("transformer:vocab=30,d=32,heads=4,layers=1,classes=3,seq=6", 1));
  core::Module student(core::build_zoo_model("transformer:vocab=30,d=16,heads=2,layers=1,classes=3,seq=6", 2));
  auto opts = distill::DistillLossOptions()
                  .temperature(2)
                  .alpha(0.5)
                  .mse_weight(0.1)
                  .cosine_weight(0.2)
                  .hint("layer0.ffn_residual", "layer0.ffn_residual", 0.5)
                  .attention("layer0.attn.softmax", "layer0.attn.softmax", 2.0)
                  .seed(11);
  distill::DistillLoss loss(opts);
  EXPECT_EQ(loss.student_values_needed(), (std::vector<std::string>{"layer0.ffn_residual", "layer0.attn.softmax"}));
  EXPECT_EQ(loss.teacher_values_needed(), loss.student_values_needed());

  at::Tensor x = at::randint(0, 30, {4, 6}, at::make_generator<at::CPUGeneratorImpl>(4), at::kLong);
  at::Tensor y = at::tensor({0, 1, 2, 1}, at::kLong);
  auto tv = teacher.forward_values({x}, loss.teacher_values_needed());
  auto sv = student.forward_values({x}, loss.student_values_needed());
  EXPECT_TRUE(loss.parameters().empty());
  loss.prepare(sv, tv);
  ASSERT_EQ(loss.parameters().size(), 2u);
  EXPECT_EQ(loss.parameters()[0].sizes(), at::IntArrayRef({32, 16}));

  auto parts = loss.compute(sv, tv, y, "logits", "logits");
  const std::string hint = "hint:layer0.ffn_residual:layer0.ffn_residual";
  const std::string attn = "attn:layer0.attn.softmax:layer0.attn.softmax";
  ASSERT_EQ(parts.parts.size(), 6u);
  double expected = 0.5 * parts.parts.at("kd") + 0.5 * parts.parts.at("ce") + 0.1 * parts.parts.at("mse") +
                    0.2 * parts.parts.at("cosine") + 0.5 * parts.parts.at(hint) + 2.0 * parts.parts.at(attn);
  EXPECT_NEAR(parts.total.item<double>(), expected, 1e-5);
  EXPECT_GT(parts.parts.at(attn), 0.0);

  parts.total.backward();
  for (const auto& w : loss.parameters()) EXPECT_GT(w.grad().abs().sum().item<double>(), 0.0);
  for (const auto& w : teacher.parameters()) EXPECT_FALSE(w.grad().defined());
  int with_grad = 0;
  for (const auto& w : student.parameters()) with_grad += w.grad().defined();
  EXPECT_EQ(with_grad, static_cast<int>(student.parameters().size()));

  // Checkpoint round trip: a fresh loss with another seed takes the saved projection.
  auto state = loss.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_TRUE(state.count(hint + ".weight"));
  distill::DistillLoss restored(distill::DistillLossOptions(opts).seed(99));
  restored.load_state(state);  // before prepare: applied by prepare
  restored.prepare(sv, tv);
  EXPECT_TRUE(at::equal(restored.parameters()[0], loss.parameters()[0]));
  EXPECT_NE(error_of([&] { restored.load_state({{"hint:a:b.weight", at::zeros({1})}}); }).find("hint:a:b.weight"),
            std::string::npos);
}

TEST(DistillLoss, NamesTheHintThatCannotBeBridged) {
  distill::DistillLoss loss(distill::DistillLossOptions().hint("t_feat", "s_feat"));
  std::string msg = error_of([&] { loss.prepare({{"s_feat", randn({2, 4}, 1)}}, {{"t_feat", randn({2, 3, 4}, 2)}}); });
  EXPECT_NE(msg.find("hint:t_feat:s_feat"), std::string::npos) << msg;
  EXPECT_NE(msg.find("same rank"), std::string::npos) << msg;
}

// ---- peer check, driven by tests/peer/kd_loss_test.sh ----------------------------------------------
//
// PARE_KD_PEER_DIR holds cases.txt ("name temperature alpha" per line) and <name>.s.npy, .t.npy
// (float32 logits [N, C]) and .y.npy (int64 labels). Writes <name>.kd.npy, .kd_grad.npy, .mixed.npy
// and .mixed_grad.npy (the losses and their gradients wrt the student logits) for PyTorch to check.
TEST(KdLossPeer, FromFiles) {
  const char* dir_env = std::getenv("PARE_KD_PEER_DIR");
  if (!dir_env || !*dir_env) GTEST_SKIP() << "PARE_KD_PEER_DIR is unset (tests/peer/kd_loss_test.sh sets it)";
  const std::string dir = dir_env;
  std::ifstream cases(dir + "/cases.txt");
  ASSERT_TRUE(cases) << "cannot read " << dir << "/cases.txt";
  std::string line;
  int n = 0;
  while (std::getline(cases, line)) {
    std::istringstream is(line);
    std::string name;
    double T = 0, alpha = 0;
    if (!(is >> name >> T >> alpha)) continue;
    const std::string base = dir + "/" + name;
    at::Tensor s = core::load_npy(base + ".s.npy"), t = core::load_npy(base + ".t.npy");
    at::Tensor y = core::load_npy(base + ".y.npy");

    at::Tensor sk = leaf(s);
    at::Tensor kd = distill::kd_loss(sk, t, T);
    kd.backward();
    core::save_npy(kd.detach(), base + ".kd.npy");
    core::save_npy(sk.grad(), base + ".kd_grad.npy");

    at::Tensor sm = leaf(s);
    at::Tensor mixed = distill::mixed_kd_loss(sm, t, y, T, alpha);
    mixed.backward();
    core::save_npy(mixed.detach(), base + ".mixed.npy");
    core::save_npy(sm.grad(), base + ".mixed_grad.npy");
    ++n;
  }
  EXPECT_GT(n, 0) << "no cases in " << dir << "/cases.txt";
}

// ---- Language models: token_divergence and lm_kd_loss ------------------------------------------------

namespace {

using distill::TokenDivergence;

double divergence(const at::Tensor& s, const at::Tensor& t, const std::string& spec, double T = 1.0,
                  const at::Tensor& mask = {}) {
  return distill::token_divergence(s, t, mask, TokenDivergence::parse(spec), T).item<double>();
}

}  // namespace

TEST(TokenDivergence, ParsesAndPrintsEverySpelling) {
  for (const char* spec : {"fkl", "rkl", "jsd:0.5", "jsd:0", "skl:0.1", "topk:64"})
    EXPECT_EQ(TokenDivergence::parse(spec).str(), spec);
  EXPECT_EQ(TokenDivergence::parse("jsd").str(), "jsd:0.5");  // TRL's default beta
  EXPECT_EQ(TokenDivergence::parse("skl").str(), "skl:0.1");  // DistiLLM's default alpha
  EXPECT_NE(error_of([] { TokenDivergence::parse("kl"); }).find("pare knows fkl, rkl"), std::string::npos);
  EXPECT_NE(error_of([] { TokenDivergence::parse("jsd:1.5"); }).find("BETA must be a number in [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([] { TokenDivergence::parse("skl:x"); }).find("ALPHA"), std::string::npos);
  EXPECT_NE(error_of([] { TokenDivergence::parse("topk:0"); }).find("topk:K"), std::string::npos);
  EXPECT_NE(error_of([] { TokenDivergence::parse("topk"); }).find("topk:K"), std::string::npos);
  EXPECT_NE(error_of([] { TokenDivergence::parse("fkl:1"); }).find("takes no argument"), std::string::npos);
}

TEST(TokenDivergence, ForwardKlIsHintonKdWithoutTheTemperatureSquared) {
  at::Tensor s = randn({6, 50}, 1, 2.0), t = randn({6, 50}, 2, 2.0);
  for (double T : {1.0, 2.0}) EXPECT_NEAR(divergence(s, t, "fkl", T), kd_reference(s, t, T) / (T * T), 1e-5);
  // Reverse KL is forward KL with the roles exchanged.
  EXPECT_NEAR(divergence(s, t, "rkl"), kd_reference(t, s, 1.0), 1e-5);
}

TEST(TokenDivergence, SpecialCasesAgree) {
  at::Tensor s = randn({2, 5, 40}, 3, 3.0), t = randn({2, 5, 40}, 4, 3.0);
  const double fkl = divergence(s, t, "fkl"), rkl = divergence(s, t, "rkl");
  EXPECT_GT(fkl, 0.1);
  EXPECT_GT(std::abs(fkl - rkl), 1e-3);  // the two directions differ on these logits
  EXPECT_DOUBLE_EQ(divergence(s, t, "jsd:0"), fkl);
  EXPECT_DOUBLE_EQ(divergence(s, t, "jsd:1"), rkl);
  EXPECT_DOUBLE_EQ(divergence(s, t, "skl:0"), fkl);
  EXPECT_DOUBLE_EQ(divergence(s, t, "skl:1"), 0.0);
  EXPECT_NEAR(divergence(s, t, "topk:40"), fkl, 1e-6);
  // JSD(0.5) is symmetric and bounded by log 2; the skew KL lies below the plain KL.
  const double jsd = divergence(s, t, "jsd:0.5");
  EXPECT_NEAR(jsd, divergence(t, s, "jsd:0.5"), 1e-6);
  EXPECT_GT(jsd, 0);
  EXPECT_LT(jsd, std::log(2.0));
  EXPECT_LT(divergence(s, t, "skl:0.1"), fkl);
  EXPECT_NEAR(divergence(s, s, "jsd:0.3"), 0.0, 1e-6);
}

TEST(TokenDivergence, TopKMergesTheTailIntoOneBucket) {
  at::Tensor s = randn({8, 100}, 5, 2.0), t = randn({8, 100}, 6, 2.0);
  // Merging outcomes never increases a KL divergence, and more buckets approach the full one.
  double last = 0;
  for (int k : {1, 4, 16, 64, 99}) {
    const double v = divergence(s, t, "topk:" + std::to_string(k));
    EXPECT_GE(v, last - 1e-6) << "topk:" << k;
    last = v;
  }
  EXPECT_LE(last, divergence(s, t, "fkl") + 1e-6);
  // topk:1 by hand: the teacher's best token and everything else.
  at::Tensor ls = at::log_softmax(s, -1).to(at::kDouble), lt = at::log_softmax(t, -1).to(at::kDouble);
  at::Tensor best = t.argmax(-1, /*keepdim=*/true);
  at::Tensor pt = lt.gather(-1, best).exp(), ps = ls.gather(-1, best).exp();
  at::Tensor ref = pt * (pt.log() - ps.log()) + (1 - pt) * ((1 - pt).log() - (1 - ps).log());
  EXPECT_NEAR(divergence(s, t, "topk:1"), ref.mean().item<double>(), 1e-5);
}

TEST(TokenDivergence, CountsOnlyMaskedTokensAndOnlyTheStudentLearns) {
  at::Tensor s = randn({2, 4, 30}, 7), t = randn({2, 4, 30}, 8);
  at::Tensor mask = at::zeros({2, 4}, at::kBool);
  mask.index_put_({0, 1}, true);
  mask.index_put_({1, 3}, true);
  at::Tensor rows_s = at::stack({s[0][1], s[1][3]}), rows_t = at::stack({t[0][1], t[1][3]});
  for (const char* spec : {"fkl", "rkl", "jsd:0.5", "skl:0.1", "topk:5"}) {
    EXPECT_NEAR(divergence(s, t, spec, 2.0, mask), divergence(rows_s, rows_t, spec, 2.0), 1e-6) << spec;
  }
  at::Tensor sl = leaf(s), tl = leaf(t);
  distill::token_divergence(sl, tl, mask, TokenDivergence::parse("jsd:0.5"), 1.0).backward();
  EXPECT_FALSE(tl.grad().defined());
  EXPECT_GT(sl.grad()[0][1].abs().sum().item<double>(), 0);
  EXPECT_EQ(sl.grad()[0][0].abs().sum().item<double>(), 0);  // a token not counted gets no gradient
  // Nothing counted: 0, and a gradient of 0.
  at::Tensor none = at::zeros({2, 4}, at::kBool), sn = leaf(s);
  at::Tensor zero = distill::token_divergence(sn, t, none, TokenDivergence::parse("fkl"), 1.0);
  zero.backward();
  EXPECT_EQ(zero.item<double>(), 0);
  EXPECT_EQ(sn.grad().abs().sum().item<double>(), 0);
}

TEST(TokenDivergence, RejectsBadShapesAndMasks) {
  at::Tensor s = randn({2, 4, 30}, 7);
  const auto fkl = TokenDivergence::parse("fkl");
  EXPECT_NE(error_of([&] { distill::token_divergence(s, randn({2, 4, 31}, 1), {}, fkl, 1); }).find("same shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::token_divergence(randn({30}, 1), randn({30}, 2), {}, fkl, 1); }).find("rank >= 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::token_divergence(s, s, at::ones({2, 4}), fkl, 1); }).find("bool mask"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::token_divergence(s, s, {}, fkl, 0); }).find("temperature"), std::string::npos);
}

TEST(LmKdLoss, MixesTheScaledDivergenceWithNextTokenCrossEntropy) {
  at::Tensor s = randn({2, 5, 20}, 9, 2.0), t = randn({2, 5, 20}, 10, 2.0);
  at::Tensor y = at::randint(0, 20, {2, 5}, at::make_generator<at::CPUGeneratorImpl>(11));
  y.index_put_({0, 0}, -100);  // a prompt token
  y.index_put_({1, 4}, -100);  // padding
  const auto jsd = TokenDivergence::parse("jsd:0.5");
  const double T = 2.0;
  const double kd = distill::token_divergence(s, t, y != -100, jsd, T).item<double>();
  const double ce = at::cross_entropy_loss(s.reshape({-1, 20}), y.reshape({-1}), {}, at::Reduction::Mean, -100)
                        .item<double>();
  EXPECT_NEAR(distill::lm_kd_loss(s, t, y, jsd, T, 1.0).item<double>(), T * T * kd, 1e-5);
  EXPECT_NEAR(distill::lm_kd_loss(s, t, y, jsd, T, 0.0).item<double>(), ce, 1e-5);
  EXPECT_NEAR(distill::lm_kd_loss(s, t, y, jsd, T, 0.7).item<double>(), 0.7 * T * T * kd + 0.3 * ce, 1e-5);
  EXPECT_EQ(distill::lm_kd_loss(s, t, at::full({2, 5}, -100, at::kLong), jsd, T, 0.5).item<double>(), 0);
  EXPECT_NE(error_of([&] { distill::lm_kd_loss(s, t, at::full({2, 5}, 20, at::kLong), jsd, T, 0.5); })
                .find("labels in [0, 20) or -100"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::lm_kd_loss(s, t, y.reshape({-1}), jsd, T, 0.5); }).find("leading shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::lm_kd_loss(s, t, y, jsd, T, 1.5); }).find("alpha"), std::string::npos);
}

// The chunked loss equals the plain one on the whole logits, value and gradients, for every
// divergence, alpha and chunk size, with prompt and padding tokens masked out; a tied head (a view of
// the embedding) gets its gradient through the view.
TEST(ChunkedLmKdLoss, EqualsThePlainLossAndItsGradients) {
  const int64_t D = 16, Dt = 12, V = 50;
  const at::Tensor hs = randn({2, 7, D}, 21), hs_t = randn({2, 7, Dt}, 22);
  const at::Tensor embed = randn({V, D}, 23, 0.5), head_t = randn({Dt, V}, 24, 0.5);
  at::Tensor y = at::randint(0, V, {2, 7}, at::make_generator<at::CPUGeneratorImpl>(25));
  y.index_put_({0, 0}, -100);
  y.index_put_({0, 1}, -100);
  y.index_put_({1, 6}, -100);
  int cases = 0;
  for (const char* spec : {"fkl", "rkl", "jsd:0.5", "skl:0.1", "topk:5"})
    for (double alpha : {0.0, 0.5, 1.0})
      for (double T : {1.0, 2.0})
        for (int64_t chunk : {1, 3, 100}) {
          const auto d = TokenDivergence::parse(spec);
          at::Tensor h1 = leaf(hs), e1 = leaf(embed), h2 = leaf(hs), e2 = leaf(embed);
          const at::Tensor plain = distill::lm_kd_loss(at::matmul(h1, e1.t()), at::matmul(hs_t, head_t), y, d, T, alpha);
          plain.backward();
          at::Tensor pred;
          const at::Tensor chunked = distill::chunked_lm_kd_loss(h2, e2.t(), hs_t, head_t, y, d, T, alpha, chunk, &pred);
          (chunked * 3.0).backward();  // backward scales by the incoming gradient
          const std::string what = std::string(spec) + " alpha " + std::to_string(alpha) + " T " +
                                   std::to_string(T) + " chunk " + std::to_string(chunk);
          EXPECT_NEAR(chunked.item<double>(), plain.item<double>(), 1e-5 * std::max(1.0, plain.item<double>())) << what;
          EXPECT_LE((h2.grad() - 3.0 * h1.grad()).abs().max().item<double>(), 3e-5) << what;
          EXPECT_LE((e2.grad() - 3.0 * e1.grad()).abs().max().item<double>(), 3e-5) << what;
          EXPECT_TRUE(pred.equal(at::matmul(hs, embed.t()).argmax(-1))) << what;
          ++cases;
        }
  EXPECT_EQ(cases, 90);
}

TEST(ChunkedLmKdLoss, NoCountedTokenGivesZeroAndBadShapesAreRefused) {
  const auto fkl = TokenDivergence::parse("fkl");
  at::Tensor h = leaf(randn({1, 4, 8}, 31)), w = leaf(randn({8, 10}, 32));
  const at::Tensor ht = randn({1, 4, 6}, 33), wt = randn({6, 10}, 34);
  const at::Tensor none = at::full({1, 4}, -100, at::kLong);
  const at::Tensor loss = distill::chunked_lm_kd_loss(h, w, ht, wt, none, fkl, 1.0, 0.5, 2);
  EXPECT_EQ(loss.item<double>(), 0);
  loss.backward();
  EXPECT_EQ(h.grad().abs().sum().item<double>(), 0);
  const at::Tensor y = at::zeros({1, 4}, at::kLong);
  EXPECT_NE(error_of([&] { distill::chunked_lm_kd_loss(h, w, ht, randn({6, 11}, 35), y, fkl, 1, 0.5, 2); })
                .find("same vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::chunked_lm_kd_loss(h, w, randn({1, 5, 6}, 36), wt, y, fkl, 1, 0.5, 2); })
                .find("same leading shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::chunked_lm_kd_loss(h, w, ht, wt, y.reshape({-1}), fkl, 1, 0.5, 2); })
                .find("leading shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::chunked_lm_kd_loss(h, w, ht, wt, y, fkl, 1, 0.5, 0); }).find("at least 1 token"),
            std::string::npos);
  EXPECT_NE(error_of([&] { distill::chunked_lm_kd_loss(h, w, ht, wt, y + 10, fkl, 1, 0.5, 2); })
                .find("labels in [0, 10)"),
            std::string::npos);
}

// The C++ side of tests/peer/lm_kd_loss_test.sh: TRL's GKDTrainer.generalized_jsd_loss on the same
// logits. Reads DIR/cases.txt ("name beta T" per line) and DIR/<name>.{s,t,y}.npy; writes the loss
// and its gradient wrt the student as DIR/<name>.{loss,grad}.npy.
namespace {
// The sparse teacher of dense logits t [..., V] at T: its top k tokens (in any order) with exact
// log-probabilities and the rest's mass.
distill::SparseTeacher sparse_of(const at::Tensor& t, int64_t k, double T) {
  const at::Tensor lt = at::log_softmax(t / T, -1);
  auto [values, ids] = lt.topk(k, -1);
  const at::Tensor flip = at::arange(k - 1, -1, -1, at::kLong);  // ascending order: the order must not matter
  ids = ids.index_select(-1, flip);
  values = values.index_select(-1, flip);
  const at::Tensor rest = at::logsumexp(lt.scatter(-1, ids, -std::numeric_limits<double>::infinity()), {-1}, true);
  return {ids, at::cat({values, rest}, -1)};
}
}  // namespace

TEST(SparseLmKdLoss, TopKCacheEqualsTopKDivergenceOfTheWholeTeacher) {
  const at::Tensor s = randn({2, 6, 40}, 41, 2.0), t = randn({2, 6, 40}, 42, 2.0);
  at::Tensor y = at::randint(0, 40, {2, 6}, at::make_generator<at::CPUGeneratorImpl>(43));
  y.index_put_({1, 2}, -100);
  for (int64_t k : {1, 5, 39})
    for (double T : {1.0, 2.0})
      for (double alpha : {0.5, 1.0}) {
        const std::string what =
            "k " + std::to_string(k) + " T " + std::to_string(T) + " alpha " + std::to_string(alpha);
        at::Tensor s1 = leaf(s), s2 = leaf(s);
        const at::Tensor dense = distill::lm_kd_loss(s1, t, y, TokenDivergence::parse("topk:" + std::to_string(k)), T,
                                                     alpha);
        const at::Tensor sparse =
            distill::lm_kd_loss(s2, sparse_of(t, k, T), y, TokenDivergence::parse("fkl"), T, alpha);
        dense.backward();
        sparse.backward();
        EXPECT_NEAR(sparse.item<double>(), dense.item<double>(), 1e-5) << what;
        EXPECT_LE((s2.grad() - s1.grad()).abs().max().item<double>(), 1e-6) << what;
      }
  // Every token named, nothing in the rest: the whole forward KL (and reverse, and JSD).
  for (const char* spec : {"fkl", "rkl", "jsd:0.5"}) {
    const auto d = TokenDivergence::parse(spec);
    EXPECT_NEAR(distill::lm_kd_loss(s, sparse_of(t, 40, 1.0), y, d, 1.0, 1.0).item<double>(),
                distill::lm_kd_loss(s, t, y, d, 1.0, 1.0).item<double>(), 1e-5) << spec;
  }
}

TEST(SparseLmKdLoss, SampledCountsGiveTheEmpiricalForwardKlAndPaddingIsIgnored) {
  const at::Tensor s = randn({3, 20}, 44);
  // Row 0 drew token 3 twice and 7 once; row 1 token 0 three times; row 2 tokens 19, 4, 5 (padding -1 last).
  const at::Tensor ids = at::tensor({3, 7, -1, 0, -1, -1, 19, 4, 5}, at::kLong).reshape({3, 3});
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor lp = at::tensor({std::log(2 / 3.), std::log(1 / 3.), -inf, -inf, 0.0, -inf, -inf, -inf,
                                    std::log(1 / 3.), std::log(1 / 3.), std::log(1 / 3.), -inf},
                                   at::kFloat)
                             .reshape({3, 4});
  const at::Tensor y = at::tensor({1, 2, 3}, at::kLong);
  at::Tensor sl = leaf(s);
  const at::Tensor loss = distill::lm_kd_loss(sl, {ids, lp}, y, TokenDivergence::parse("fkl"), 1.0, 1.0);
  loss.backward();
  const at::Tensor ls = at::log_softmax(s.to(at::kDouble), -1);
  auto term = [&](int r, int tok, double p) { return p * (std::log(p) - ls[r][tok].item<double>()); };
  const double ref = (term(0, 3, 2 / 3.) + term(0, 7, 1 / 3.) + term(1, 0, 1.0) + term(2, 19, 1 / 3.) +
                      term(2, 4, 1 / 3.) + term(2, 5, 1 / 3.)) / 3;
  EXPECT_NEAR(loss.item<double>(), ref, 1e-5);
  // The gradient is (softmax(s) - counts / K) / rows: unbiased for the teacher's.
  at::Tensor target = at::zeros({3, 20}, at::kDouble);
  target[0][3] = 2 / 3.;
  target[0][7] = 1 / 3.;
  target[1][0] = 1.0;
  for (int tok : {19, 4, 5}) target[2][tok] = 1 / 3.;
  EXPECT_LE((sl.grad().to(at::kDouble) - (ls.exp() - target) / 3).abs().max().item<double>(), 1e-6);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

TEST(SparseLmKdLoss, ChunkedEqualsPlainAndBadShapesAreRefused) {
  const int64_t D = 16, V = 50;
  const at::Tensor hs = randn({2, 7, D}, 45), embed = randn({V, D}, 46, 0.5), t = randn({2, 7, V}, 47, 2.0);
  at::Tensor y = at::randint(0, V, {2, 7}, at::make_generator<at::CPUGeneratorImpl>(48));
  y.index_put_({0, 0}, -100);
  for (const char* spec : {"fkl", "rkl", "jsd:0.5", "skl:0.1", "topk:3"})
    for (int64_t chunk : {1, 3, 100}) {
      const auto d = TokenDivergence::parse(spec);
      const auto teacher = sparse_of(t, 8, 2.0);
      at::Tensor h1 = leaf(hs), e1 = leaf(embed), h2 = leaf(hs), e2 = leaf(embed);
      const at::Tensor plain = distill::lm_kd_loss(at::matmul(h1, e1.t()), teacher, y, d, 2.0, 0.5);
      plain.backward();
      const at::Tensor chunked = distill::chunked_lm_kd_loss(h2, e2.t(), teacher, y, d, 2.0, 0.5, chunk);
      chunked.backward();
      const std::string what = std::string(spec) + " chunk " + std::to_string(chunk);
      EXPECT_NEAR(chunked.item<double>(), plain.item<double>(), 1e-5 * std::max(1.0, plain.item<double>())) << what;
      EXPECT_LE((h2.grad() - h1.grad()).abs().max().item<double>(), 1e-5) << what;
      EXPECT_LE((e2.grad() - e1.grad()).abs().max().item<double>(), 1e-5) << what;
    }
  const auto fkl = TokenDivergence::parse("fkl");
  const auto teacher = sparse_of(t, 8, 1.0);
  const at::Tensor logits = at::matmul(hs, embed.t());
  EXPECT_NE(error_of([&] { distill::lm_kd_loss(logits, {teacher.ids, teacher.ids}, y, fkl, 1, 0.5); })
                .find("sparse teacher"), std::string::npos);
  EXPECT_NE(error_of([&] {
              distill::lm_kd_loss(at::matmul(hs, embed.t()).narrow(1, 0, 3), teacher, y.narrow(1, 0, 3), fkl, 1, 0.5);
            }).find("sparse teacher"), std::string::npos);
}

TEST(LmKdLossPeer, FromFiles) {
  const char* dir_env = std::getenv("PARE_LM_KD_PEER_DIR");
  if (!dir_env || !*dir_env) GTEST_SKIP() << "PARE_LM_KD_PEER_DIR is unset (tests/peer/lm_kd_loss_test.sh sets it)";
  const std::string dir = dir_env;
  std::ifstream cases(dir + "/cases.txt");
  ASSERT_TRUE(cases) << "cannot read " << dir << "/cases.txt";
  std::string line;
  int n = 0;
  while (std::getline(cases, line)) {
    std::istringstream is(line);
    std::string name, beta;
    double T = 0;
    if (!(is >> name >> beta >> T)) continue;
    const std::string base = dir + "/" + name;
    at::Tensor s = leaf(core::load_npy(base + ".s.npy")), t = core::load_npy(base + ".t.npy");
    at::Tensor y = core::load_npy(base + ".y.npy");
    at::Tensor loss = distill::token_divergence(s, t, y != -100, TokenDivergence::parse("jsd:" + beta), T);
    loss.backward();
    core::save_npy(loss.detach(), base + ".loss.npy");
    core::save_npy(s.grad(), base + ".grad.npy");
    ++n;
  }
  EXPECT_GT(n, 0) << "no cases in " << dir << "/cases.txt";
}
