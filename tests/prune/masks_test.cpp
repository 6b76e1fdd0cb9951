// Unstructured and N:M masks, schedules, and masks kept applied while weights are updated.
#include <ATen/core/grad_mode.h>

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/graph.h"
#include "core/module.h"
#include "core/zoo.h"
#include "prune/masks.h"
#include "prune/schedule.h"
#include "tests/test_util.h"

using namespace pare;
using namespace pare::core;
using namespace pare::prune;
using pare::testing::expect_input_error;
using pare::testing::expect_option_error;

namespace {

int64_t zeros(const at::Tensor& t) { return t.numel() - t.count_nonzero().item<int64_t>(); }

// x[N,8] -> Gemm a (W [16,8], transB) -> Relu -> MatMul (W [16,8]) -> y; weights of very
// different scales so that a global threshold and per-layer fractions differ.
Graph two_layers() {
  Graph g;
  g.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 8}});
  at::manual_seed(3);
  // |a.w| in [1, 2), |b.w| below 0.01.
  g.initializers["a.w"] = (at::rand({16, 8}) + 1) * at::randn({16, 8}).sign();
  g.initializers["a.b"] = at::randn({16});
  g.initializers["b.w"] = at::randn({16, 8}).clamp(-1, 1) * 0.01;
  g.add_node("Gemm", {"x", "a.w", "a.b"}, {"h"}, {{"transB", int64_t{1}}}, "a");
  g.add_node("Relu", {"h"}, {"r"}, {}, "relu");
  g.add_node("MatMul", {"r", "b.w"}, {"y"}, {}, "b");
  g.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 8}});
  return g;
}

}  // namespace

TEST(FindTargets, FollowsWeightFacetsAndExclusions) {
  Graph g = two_layers();
  auto t = find_targets(g);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].weight, "a.w");
  EXPECT_EQ(t[0].in_axis, 1);  // Gemm transB=1: W is [out, in]
  EXPECT_EQ(t[1].weight, "b.w");
  EXPECT_EQ(t[1].in_axis, 0);  // MatMul: W is [in, out]
  EXPECT_EQ(find_targets(g, {"b"}).size(), 1u);
  expect_option_error([&] { find_targets(g, {"nope"}); }, "exclude", {"exclude 'nope'", "no node", "a, b"});
  expect_input_error([&] { find_targets(g, {"relu"}); }, {"'relu'", "no prunable weight"});
}

TEST(MagnitudeMasks, PerLayerRemovesTheSmallestFractionOfEachLayer) {
  Graph g = two_layers();
  auto t = find_targets(g);
  Masks m = compute_masks(lookup_in(g), t, MaskOptions().sparsity(0.75));
  for (auto& tg : t) {
    at::Tensor w = g.initializers[tg.weight], mask = m.at(tg.weight);
    EXPECT_EQ(zeros(mask), 96);  // 75% of 128
    // Every pruned |w| is at most every kept |w|.
    EXPECT_LE(w.abs().masked_select(mask.eq(0)).max().item<float>(),
              w.abs().masked_select(mask.ne(0)).min().item<float>());
  }
  apply_masks(g, m);
  EXPECT_EQ(zeros(g.initializers["a.w"]), 96);
  EXPECT_EQ(zeros(g.initializers["a.b"]), 0);  // biases are not pruned
}

TEST(MagnitudeMasks, GlobalUsesOneThresholdAcrossLayers) {
  Graph g = two_layers();
  auto t = find_targets(g);
  Masks m = compute_masks(lookup_in(g), t, MaskOptions().sparsity(0.5).global(true));
  // 128 of 256 weights go; the small-scale layer goes first and entirely.
  EXPECT_EQ(zeros(m.at("a.w")) + zeros(m.at("b.w")), 128);
  EXPECT_EQ(zeros(m.at("b.w")), 128);
  EXPECT_EQ(zeros(m.at("a.w")), 0);
}

TEST(MagnitudeMasks, RejectsSparsityOutsideZeroOne) {
  Graph g = two_layers();
  auto t = find_targets(g);
  expect_option_error([&] { compute_masks(lookup_in(g), t, MaskOptions().sparsity(1.5)); }, "sparsity", {"sparsity must", "1.5"});
  expect_option_error([&] { compute_masks(lookup_in(g), t, MaskOptions().sparsity(-0.1)); }, "sparsity", {"sparsity must"});
  expect_input_error([&] { MaskOptions().method(MaskMethod::kNM).n(5).m(4).validate(); }, {"n <= m"});
}

TEST(NMMasks, EveryGroupOfMConsecutiveInputWeightsHasAtMostN) {
  Graph g = two_layers();
  // Conv weights [out, in, kh, kw] too: groups run along the input channels.
  g.initializers["c.w"] = at::randn({6, 8, 3, 3});
  Graph conv;
  conv.inputs.push_back({"x", at::kFloat, {Dim::sym("N"), 8, 5, 5}});
  conv.initializers["c.w"] = at::randn({6, 8, 3, 3});
  conv.add_node("Conv", {"x", "c.w"}, {"y"}, {}, "c");
  conv.outputs.push_back({"y", at::kFloat, {Dim::sym("N"), 6, 3, 3}});
  for (Graph* gr : {&g, &conv}) {
    auto t = find_targets(*gr);
    for (auto& tg : t) EXPECT_FALSE(satisfies_nm(gr->initializers[tg.weight], tg.in_axis, 2, 4)) << tg.node;
    apply_masks(*gr, compute_masks(lookup_in(*gr), t, MaskOptions().method(MaskMethod::kNM)));
    for (auto& tg : t) {
      at::Tensor w = gr->initializers[tg.weight];
      EXPECT_TRUE(satisfies_nm(w, tg.in_axis, 2, 4)) << tg.node;
      EXPECT_EQ(zeros(w), w.numel() / 2) << tg.node;
    }
  }
  // The Gemm's weight is [out, in]: along the other axis the pattern does not hold.
  EXPECT_FALSE(satisfies_nm(g.initializers["a.w"], 0, 2, 4));
}

TEST(NMMasks, SkipsLayersWhoseInputIsNotAMultipleOfM) {
  Graph g = two_layers();
  std::vector<std::string> skipped;
  Masks m = compute_masks(lookup_in(g), find_targets(g), MaskOptions().method(MaskMethod::kNM).n(1).m(3), &skipped);
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(skipped, (std::vector<std::string>{"a", "b"}));
}

TEST(SparsitySchedule, GradualFollowsZhuGuptaCubic) {
  auto s = SparsitySchedule::gradual(0.9, 0.1, 10, 5, 4);  // updates at 10, 14, ..., 30
  EXPECT_DOUBLE_EQ(s.at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.at(10), 0.1);
  for (int64_t t = 10; t <= 30; t += 4) {
    const double frac = 1.0 - (t - 10) / 20.0;
    EXPECT_NEAR(s.at(t), 0.9 + (0.1 - 0.9) * frac * frac * frac, 1e-12) << t;
    EXPECT_TRUE(s.updates_at(t));
    EXPECT_FALSE(s.updates_at(t + 1));
    EXPECT_DOUBLE_EQ(s.at(t + 1), s.at(t));  // constant between updates
  }
  EXPECT_DOUBLE_EQ(s.at(1000), 0.9);
  EXPECT_FALSE(s.updates_at(34));
  EXPECT_EQ(s.last_update(), 30);
}

TEST(SparsitySchedule, OneShotAndIterative) {
  auto o = SparsitySchedule::one_shot(0.8);
  EXPECT_TRUE(o.updates_at(0));
  EXPECT_FALSE(o.updates_at(1));
  EXPECT_DOUBLE_EQ(o.at(0), 0.8);
  auto it = SparsitySchedule::iterative(0.8, 4, 0, 100);  // 0.2 more every 25 steps
  EXPECT_DOUBLE_EQ(it.at(0), 0.2);
  EXPECT_DOUBLE_EQ(it.at(24), 0.2);
  EXPECT_DOUBLE_EQ(it.at(25), 0.4);
  EXPECT_DOUBLE_EQ(it.at(99), 0.8);
  EXPECT_TRUE(it.updates_at(75));
  EXPECT_FALSE(it.updates_at(100));
  expect_input_error([] { SparsitySchedule::gradual(0.5, 0.6, 0, 1, 1); }, {"initial sparsity"});
}

TEST(MaskedPruning, PrunedWeightsStayZeroWhileTrainingAndSparsityFollowsTheSchedule) {
  Module m(build_zoo_model("mlp:16-32-8-4", 1));
  auto targets = find_targets(m.graph());
  MaskedPruning p(m, targets, MaskOptions().global(true), SparsitySchedule::gradual(0.8, 0.0, 0, 4, 2));
  p.start();
  at::manual_seed(0);
  at::Tensor x = at::rand({32, 16}), y = at::randint(0, 4, {32}, at::kLong);
  double last = 0;
  for (int64_t step = 1; step <= 10; ++step) {
    m.train();
    at::Tensor loss = at::cross_entropy_loss(m.forward({x})[0], y);
    for (auto& q : m.parameters())
      if (q.grad().defined()) q.mutable_grad().zero_();
    loss.backward();
    {
      at::NoGradGuard ng;
      for (auto& q : m.parameters()) q.add_(q.grad(), -0.5);  // SGD: would revive pruned weights
    }
    p.after_step(step);
    auto r = measure_sparsity(lookup_in(m), targets);
    const int64_t want = static_cast<int64_t>(std::floor(p.target() * r.elements + 1e-9));
    EXPECT_EQ(r.zeros, want) << "step " << step;
    EXPECT_GE(r.sparsity() + 1e-12, last) << "step " << step;
    last = r.sparsity();
  }
  EXPECT_NEAR(last, 0.8, 1e-3);
}

TEST(MaskedPruning, AResumedRunTakesItsMasksFromTheRestoredWeights) {
  Module m(build_zoo_model("mlp:16-32-8-4", 1));
  auto targets = find_targets(m.graph());
  MaskedPruning first(m, targets, MaskOptions().global(true), SparsitySchedule::one_shot(0.6));
  first.start();
  // A second run over the restored weights: its schedule prunes nothing by itself before step 50.
  MaskedPruning resumed(m, targets, MaskOptions().global(true), SparsitySchedule::gradual(0.9, 0.0, 50, 1, 10));
  resumed.start();
  resumed.resume_from_weights();
  resumed.before_step();
  {
    at::NoGradGuard ng;
    for (auto& q : m.parameters()) q.add_(1.0);  // an update that would revive every pruned weight
  }
  resumed.after_step(7);
  auto r = measure_sparsity(lookup_in(m), targets);
  EXPECT_EQ(r.zeros, static_cast<int64_t>(std::floor(0.6 * r.elements + 1e-9)));
}
