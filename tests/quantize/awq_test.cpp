// quantize/awq: the scale search protects the input channels that carry large activations (lower
// output error than RTN, never higher), and the clip search never raises a group's output error
// above that of its full range.
#include "quantize/awq.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "quantize/gptq.h"
#include "tests/test_util.h"

namespace pare::quantize {
namespace {

// Output error of `q` against `w` over the inputs of h, relative to the output.
double relative_error(const at::Tensor& w, const at::Tensor& q, const at::Tensor& h) {
  const at::Tensor d = (w - q).to(at::kDouble), wd = w.to(at::kDouble), hd = h.to(at::kDouble);
  return (d.matmul(hd) * d).sum().item<double>() / (wd.matmul(hd) * wd).sum().item<double>();
}

at::Tensor rounded(const at::Tensor& w, int64_t group, const at::Tensor& shrink = {}) {
  const Grid g = symmetric_grid(w, 4, group, shrink);
  return grid_values(rtn(w, g), g);
}

TEST(Awq, ScalesUpTheChannelsWithLargeActivations) {
  at::manual_seed(11);
  const at::Tensor w = at::randn({64, 128});
  at::Tensor x = at::randn({2048, 128});
  x.narrow(1, 0, 4).mul_(30.0);  // four outlier channels, as LLM activations have
  const at::Tensor h = hessian(x), abs_mean = x.abs().mean(0);
  const AwqScale a = awq_scale(w, abs_mean, h, 4, 32);
  EXPECT_GT(a.alpha, 0.0);
  EXPECT_LT(a.error, 0.8 * a.rtn_error);
  EXPECT_GT(a.scales.narrow(0, 0, 4).min().item<float>(), a.scales.narrow(0, 4, 124).max().item<float>());
  // What the caller gets by scaling, rounding and scaling back is the error reported.
  EXPECT_NEAR(relative_error(w, rounded(w * a.scales, 32) / a.scales, h), a.error, 1e-6);
  EXPECT_NEAR(relative_error(w, rounded(w, 32), h), a.rtn_error, 1e-6);
}

TEST(Awq, ScalesAlikeChannelsOnlyByTheWeights) {
  at::manual_seed(12);
  const at::Tensor w = at::randn({16, 64});
  const AwqScale a = awq_scale(w, at::full({64}, 0.7), at::eye(64), 4, 32);
  EXPECT_LE(a.error, a.rtn_error);
  // Without duo scaling every exponent gives scales of one: only the weights' statistic can differ.
  if (!a.duo) EXPECT_TRUE(at::allclose(a.scales, at::ones({64})));
  EXPECT_NEAR(relative_error(w, rounded(w * a.scales, 32) / a.scales, at::eye(64)), a.error, 1e-6);
}

TEST(Awq, AWeightOfZerosKeepsScalesOfOne) {
  const AwqScale a = awq_scale(at::zeros({4, 32}), at::rand({32}), at::eye(32), 4, 32);
  EXPECT_TRUE(at::equal(a.scales, at::ones({32})));
  EXPECT_EQ(a.alpha, 0.0);
}

TEST(Awq, ClippingNeverRaisesAGroupsErrorAndCutsOutliers) {
  at::manual_seed(13);
  at::Tensor w = at::randn({32, 96});
  w[0][5] = 12.0;  // one weight far out in row 0's first group: its range wastes levels on the rest
  const at::Tensor h = hessian(at::randn({1024, 96}));
  const at::Tensor shrink = awq_clip(w, h, 4, 32);
  ASSERT_EQ(shrink.sizes(), at::IntArrayRef({32, 3}));
  EXPECT_LE(shrink.max().item<float>(), 1.0f);
  EXPECT_GE(shrink.min().item<float>(), 0.55f - 1e-6f);
  const at::Tensor full = w - rounded(w, 32), clipped = w - rounded(w, 32, shrink);
  for (int64_t g = 0; g < 3; ++g) {
    const at::Tensor hg = h.narrow(0, g * 32, 32).narrow(1, g * 32, 32);
    const at::Tensor ef = (full.narrow(1, g * 32, 32).matmul(hg) * full.narrow(1, g * 32, 32)).sum(1);
    const at::Tensor ec = (clipped.narrow(1, g * 32, 32).matmul(hg) * clipped.narrow(1, g * 32, 32)).sum(1);
    EXPECT_TRUE((ec <= ef * (1 + 1e-5) + 1e-7).all().item<bool>()) << "group " << g;
  }
  EXPECT_LT(relative_error(w, rounded(w, 32, shrink), h), relative_error(w, rounded(w, 32), h));
}

TEST(Awq, ShrinkMultipliesTheGroupsRange) {
  at::Tensor w = at::zeros({1, 32});
  w[0][3] = 2.0;
  const Grid g = symmetric_grid(w, 4, 32, at::full({1, 1}, 0.5));
  EXPECT_FLOAT_EQ(g.scale.item<float>(), -0.125f);  // -(2.0 * 0.5) / 8
  EXPECT_EQ(rtn(w, g)[0][3].item<int>(), 0);        // 2.0 is clipped to the lowest level, 1.0
  EXPECT_THROW(symmetric_grid(w, 4, 32, at::ones({1, 2})), InputError);
}

}  // namespace
}  // namespace pare::quantize
