// quantize/gptq: the grids, RTN, and GPTQ's error feedback: the same codes as RTN when the inputs
// are uncorrelated (nothing to feed back), a smaller output error than RTN when they are
// correlated, codes always on the grid, act-order changing the order and not the groups.
#include "quantize/gptq.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace pare::quantize {
namespace {

// Inputs whose channels are correlated (`mixing` of fewer sources), as activations are.
at::Tensor correlated_inputs(int64_t tokens, const at::Tensor& mixing) {
  return at::randn({tokens, mixing.size(0)}).matmul(mixing) + 0.05 * at::randn({tokens, mixing.size(1)});
}

TEST(Grid, SymmetricInt4IsQ4_0sChoiceOfScale) {
  at::Tensor w = at::zeros({1, 32});
  w[0][3] = 2.0;
  w[0][7] = -1.0;
  const Grid g = symmetric_grid(w, 4, 32);
  EXPECT_FLOAT_EQ(g.scale.item<float>(), -0.25f);  // the signed max 2.0 becomes code 0, i.e. -8
  const at::Tensor codes = rtn(w, g);
  EXPECT_EQ(codes[0][3].item<int>(), 0);
  EXPECT_EQ(codes[0][7].item<int>(), 12);  // -1 / -0.25 = 4, + 8
  EXPECT_EQ(codes[0][0].item<int>(), 8);
  EXPECT_TRUE(at::equal(grid_values(codes, g), w));
}

TEST(Grid, SymmetricInt8KeepsCodesWithinPlusMinus127) {
  at::manual_seed(1);
  const at::Tensor w = at::randn({4, 64});
  const Grid g = symmetric_grid(w, 8, 32);
  const at::Tensor codes = rtn(w, g);
  EXPECT_LE(codes.abs().max().item<int>(), 127);
  EXPECT_LE((grid_values(codes, g) - w).abs().max().item<float>(), g.scale.abs().max().item<float>() * 0.51f);
  // 64 columns in groups of 48: a second, shorter group of 16.
  const Grid short_last = symmetric_grid(w, 4, 48);
  EXPECT_EQ(short_last.scale.sizes(), at::IntArrayRef({4, 2}));
  EXPECT_TRUE(at::equal(short_last.scale.select(1, 1), symmetric_grid(w.narrow(1, 48, 16), 4, 16).scale.squeeze(1)));
}

TEST(Gptq, EqualsRoundToNearestWhenTheInputsAreUncorrelated) {
  at::manual_seed(2);
  const at::Tensor w = at::randn({16, 64});
  Grid g = symmetric_grid(w, 4, 32);
  const at::Tensor h = at::eye(64) * 3.0;  // X^T X of orthogonal inputs: no error to feed back
  EXPECT_TRUE(at::equal(gptq(w, h, g), rtn(w, g)));
}

TEST(Gptq, LowersTheOutputErrorOfCorrelatedInputsBelowRoundToNearest) {
  at::manual_seed(3);
  const at::Tensor w = at::randn({32, 128}), mixing = at::randn({32, 128});
  const at::Tensor h = hessian(correlated_inputs(1024, mixing));
  const at::Tensor held_out = hessian(correlated_inputs(1024, mixing));  // inputs GPTQ did not see
  for (const int64_t group : {32, 128}) {
    for (const bool act_order : {false, true}) {
      for (const bool regrid : {false, true}) {
        Grid g = symmetric_grid(w, 4, group);
        GptqOptions opts;
        opts.act_order = act_order;
        opts.block = 48;  // blocks that do not divide the columns: the lazy updates cross them
        if (regrid) opts.regrid = [](const at::Tensor& cols) { return symmetric_grid(cols, 4, cols.size(1)); };
        const at::Tensor codes = gptq(w, h, g, opts);
        EXPECT_GE(codes.min().item<int>(), 0);
        EXPECT_LE(codes.max().item<int>(), 15);
        const Grid fixed = symmetric_grid(w, 4, group);
        for (const at::Tensor& inputs : {h, held_out}) {
          const double ours = output_sqnr_db(w, grid_values(codes, g), inputs);
          const double nearest = output_sqnr_db(w, grid_values(rtn(w, fixed), fixed), inputs);
          EXPECT_GT(ours, nearest + 3.0) << "group " << group << " act_order " << act_order << " regrid " << regrid;
        }
      }
    }
  }
}

TEST(Gptq, RegridMakesEachGroupsGridFromTheWeightsAsUpdated) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({16, 96}), mixing = at::randn({24, 96});
  const at::Tensor h = hessian(correlated_inputs(512, mixing));
  Grid g = symmetric_grid(w, 4, 32);
  const Grid original = symmetric_grid(w, 4, 32);
  GptqOptions opts;
  opts.act_order = false;  // groups visited in order, whole in each block of 128
  opts.regrid = [](const at::Tensor& cols) { return symmetric_grid(cols, 4, cols.size(1)); };
  const at::Tensor codes = gptq(w, h, g, opts);
  // The first group is reached before any update: its grid is the original one; the later groups'
  // grids follow the updated weights, so they differ.
  EXPECT_TRUE(at::equal(g.scale.select(1, 0), original.scale.select(1, 0)));
  EXPECT_FALSE(at::equal(g.scale.narrow(1, 1, 2), original.scale.narrow(1, 1, 2)));
  // The values are those of the grid written back: rounding them on it again changes nothing.
  const at::Tensor q = grid_values(codes, g);
  EXPECT_TRUE(at::allclose(q, grid_values(rtn(q, g), g)));
  // An identity Hessian feeds nothing back: regrid changes nothing and GPTQ is RTN.
  Grid plain = symmetric_grid(w, 4, 32);
  EXPECT_TRUE(at::equal(gptq(w, at::eye(96), plain, opts), rtn(w, original)));
  EXPECT_TRUE(at::equal(plain.scale, original.scale));
}

TEST(Gptq, LeavesColumnsNoInputReachedAtZero) {
  at::manual_seed(4);
  const at::Tensor w = at::randn({8, 64});
  at::Tensor x = at::randn({256, 64});
  x.select(1, 5).zero_();
  Grid g = symmetric_grid(w, 4, 32);
  const at::Tensor codes = gptq(w, hessian(x), g);
  EXPECT_TRUE(at::equal(codes.select(1, 5), at::full({8}, 8, at::kInt)));  // code 8 is 0 on Q4_0's grid
}

}  // namespace
}  // namespace pare::quantize
