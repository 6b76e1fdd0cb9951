// Robust aggregation: every rule on small matrices whose results are worked out by hand in the
// comments (pairwise distances, Krum scores step by step, trust scores), and the refusals when n is
// too small for the tolerated f or an option is out of range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "federated/aggregate.h"
#include "tests/test_util.h"

namespace fed = pare::federated;

namespace {

// A float32 matrix [n, d] from its rows.
at::Tensor agg_rows(const std::vector<std::vector<float>>& rows) {
  std::vector<at::Tensor> t;
  for (const auto& r : rows) t.push_back(at::tensor(r, at::kFloat));
  return at::stack(t);
}

std::vector<double> agg_values(const at::Tensor& t) {
  at::Tensor c = t.to(at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

void agg_expect_near(const at::Tensor& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.scalar_type(), at::kFloat);
  std::vector<double> g = agg_values(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "coordinate " << i;
}

// Six clients in 2-D, f = 1: five honest rows near the origin and row 5 far away.
//   r0 (0,0)  r1 (3,0)  r2 (0,1)  r3 (1,1)  r4 (2,3)  r5 (20,20)
// Squared distances:
//   d01 = 9        d02 = 1        d03 = 1+1 = 2   d04 = 4+9 = 13  d05 = 400+400 = 800
//   d12 = 9+1 = 10 d13 = 4+1 = 5  d14 = 1+9 = 10  d15 = 289+400 = 689
//   d23 = 1        d24 = 4+4 = 8  d25 = 400+361 = 761
//   d34 = 1+4 = 5  d35 = 361+361 = 722
//   d45 = 324+289 = 613
// Krum scores, each the sum of the n - f - 2 = 3 smallest distances to the other rows:
//   r0: {9,1,2,13,800}        -> 1+2+9     = 12
//   r1: {9,10,5,10,689}       -> 5+9+10    = 24
//   r2: {1,10,1,8,761}        -> 1+1+8     = 10
//   r3: {2,5,1,5,722}         -> 1+2+5     = 8
//   r4: {13,10,8,5,613}       -> 5+8+10    = 23
//   r5: {800,689,761,722,613} -> 613+689+722 = 2024
at::Tensor agg_krum_example() {
  return agg_rows({{0, 0}, {3, 0}, {0, 1}, {1, 1}, {2, 3}, {20, 20}});
}

}  // namespace

TEST(Aggregate, FedAvgIsTheSampleWeightedMean) {
  at::Tensor U = agg_rows({{1, 2}, {3, 4}, {5, 6}});
  // Weights 1, 1, 2 (sum 4): x = (1 + 3 + 2*5) / 4 = 14/4 = 3.5, y = (2 + 4 + 2*6) / 4 = 18/4 = 4.5
  // (the unweighted mean would be (3, 4)).
  fed::Aggregate a = fed::fedavg(U, {1, 1, 2});
  agg_expect_near(a.update, {3.5, 4.5});
  EXPECT_EQ(a.selected, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(a.scores.empty());
  // Zero weights leave a client out: only row 2 counts.
  agg_expect_near(fed::fedavg(U, {0, 0, 5}).update, {5, 6});
}

TEST(Aggregate, MedianOddAndEvenN) {
  // Odd n = 3: column 0 sorted {1, 2, 3} -> 2; column 1 sorted {-2, 7, 10} -> 7.
  at::Tensor odd = agg_rows({{1, 10}, {3, -2}, {2, 7}});
  agg_expect_near(fed::coordinate_median(odd).update, {2, 7});
  // Even n = 4 (as numpy.median): column 0 sorted {1, 2, 3, 8} -> (2+3)/2 = 2.5; column 1 sorted
  // {-2, 0, 7, 10} -> (0+7)/2 = 3.5.
  at::Tensor even = agg_rows({{1, 10}, {3, -2}, {2, 7}, {8, 0}});
  fed::Aggregate a = fed::coordinate_median(even);
  agg_expect_near(a.update, {2.5, 3.5});
  EXPECT_EQ(a.selected, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(Aggregate, TrimmedMeanDropsTheExtremes) {
  // trim = 1 on 5 rows: column 0 {1, 2, 3, 4, 1000} drops 1 and 1000 -> (2+3+4)/3 = 3;
  // column 1 {-5, 0, 1, 2, 3} drops -5 and 3 -> (0+1+2)/3 = 1.
  at::Tensor U = agg_rows({{4, 0}, {1000, -5}, {2, 3}, {1, 1}, {3, 2}});
  agg_expect_near(fed::trimmed_mean(U, 1).update, {3, 1});
  // The outlier has no effect however large it gets; the plain mean would move with it.
  U[1][0] = 1e6;
  agg_expect_near(fed::trimmed_mean(U, 1).update, {3, 1});
  EXPECT_GT(fed::fedavg(U, {1, 1, 1, 1, 1}).update[0].item<double>(), 1e5);
  // trim = 0 is the plain mean: column 1 (0 - 5 + 3 + 1 + 2) / 5 = 0.2.
  EXPECT_NEAR(fed::trimmed_mean(U, 0).update[1].item<double>(), 0.2, 1e-6);
}

TEST(Aggregate, KrumScoresByHand) {
  at::Tensor s = fed::krum_scores(agg_krum_example(), 1);
  EXPECT_EQ(s.scalar_type(), at::kDouble);
  EXPECT_EQ(agg_values(s), (std::vector<double>{12, 24, 10, 8, 23, 2024}));
  // f = 3 leaves max(0, 6 - 3 - 2) = 1 neighbour: each row's nearest distance.
  // r0: 1, r1: 5, r2: 1, r3: 1, r4: 5, r5: 613.
  EXPECT_EQ(agg_values(fed::krum_scores(agg_krum_example(), 3)), (std::vector<double>{1, 5, 1, 1, 5, 613}));
  // f = 4 leaves none: all scores 0.
  EXPECT_EQ(agg_values(fed::krum_scores(agg_krum_example(), 4)), (std::vector<double>(6, 0.0)));
}

TEST(Aggregate, KrumScoresOverManyColumns) {
  // d = 100000 columns (more than one block of the distance computation): row i is i in every
  // column, so d_ij = (i - j)^2 * d. n = 5, f = 1: 2 neighbours each.
  //   r0: {1, 4, 9, 16} d -> 5d   r1: {1, 1, 4, 9} d -> 2d   r2: {4, 1, 1, 4} d -> 2d
  //   r3: {9, 4, 1, 1} d -> 2d    r4: {16, 9, 4, 1} d -> 5d
  const double d = 100000;
  at::Tensor U = at::arange(5, at::kFloat).unsqueeze(1).expand({5, 100000}).contiguous();
  EXPECT_EQ(agg_values(fed::krum_scores(U, 1)), (std::vector<double>{5 * d, 2 * d, 2 * d, 2 * d, 5 * d}));
  EXPECT_EQ(fed::krum(U, 1).selected, (std::vector<int64_t>{1}));
}

TEST(Aggregate, KrumPicksTheLowestScoreNotTheOutlier) {
  at::Tensor U = agg_krum_example();
  fed::Aggregate a = fed::krum(U, 1);
  // Lowest score 8: row 3, (1, 1).
  EXPECT_EQ(a.selected, (std::vector<int64_t>{3}));
  agg_expect_near(a.update, {1, 1});
  EXPECT_EQ(a.scores, (std::vector<double>{12, 24, 10, 8, 23, 2024}));
  // The plain mean is dragged towards row 5: (26/6, 25/6) = (4.33, 4.17), outside the honest rows'
  // box [0, 3] x [0, 3], whose centroid is (6/5, 5/5) = (1.2, 1).
  fed::Aggregate avg = fed::fedavg(U, std::vector<double>(6, 1.0));
  agg_expect_near(avg.update, {26.0 / 6, 25.0 / 6});
  EXPECT_GT(avg.update[0].item<double>(), 3);
  EXPECT_GT(avg.update[1].item<double>(), 3);
}

TEST(Aggregate, KrumBreaksTiesByLowestIndex) {
  // Two identical pairs, n = 5, f = 1 (2 neighbours). Row 0 (0,0): d01 = 0, d02 = 1, d03 = 1,
  // d04 = 100 -> 0+1 = 1; rows 1, 2, 3 likewise 1; row 4 (10,0): {100, 100, 81, 81} -> 162.
  // Four rows tie at 1: the lowest index, 0, wins.
  at::Tensor U = agg_rows({{0, 0}, {0, 0}, {1, 0}, {1, 0}, {10, 0}});
  EXPECT_EQ(fed::krum(U, 1).selected, (std::vector<int64_t>{0}));
}

TEST(Aggregate, MultiKrumAveragesTheMLowestScores) {
  // Scores 12, 24, 10, 8, 23, 2024: the three lowest are r3 (8), r2 (10), r0 (12);
  // mean of (1,1), (0,1), (0,0) = (1/3, 2/3).
  fed::Aggregate a = fed::multi_krum(agg_krum_example(), 1, 3);
  EXPECT_EQ(a.selected, (std::vector<int64_t>{3, 2, 0}));
  agg_expect_near(a.update, {1.0 / 3, 2.0 / 3});
  EXPECT_EQ(a.scores, (std::vector<double>{12, 24, 10, 8, 23, 2024}));
  // m = 1 is Krum; m = 5 adds r4 (23) and r1 (24) but still leaves out r5:
  // mean of x {1,0,0,2,3} = 6/5, y {1,1,0,3,0} = 5/5.
  agg_expect_near(fed::multi_krum(agg_krum_example(), 1, 1).update, {1, 1});
  fed::Aggregate five = fed::multi_krum(agg_krum_example(), 1, 5);
  EXPECT_EQ(five.selected, (std::vector<int64_t>{3, 2, 0, 4, 1}));
  agg_expect_near(five.update, {1.2, 1.0});
}

// Bulyan, n = 7, f = 1: theta = n - 2f = 5 rows by repeated Krum, then per coordinate the
// beta = theta - 2f = 3 values closest to the median. Row 0 is the attacker.
//   r0 (9,9)  r1 (2,1)  r2 (3,1)  r3 (0,2)  r4 (1,4)  r5 (3,2)  r6 (1,0)
// Squared distances:
//   d01 = 49+64 = 113  d02 = 36+64 = 100  d03 = 81+49 = 130  d04 = 64+25 = 89  d05 = 36+49 = 85
//   d06 = 64+81 = 145
//   d12 = 1   d13 = 4+1 = 5   d14 = 1+9 = 10  d15 = 1+1 = 2   d16 = 1+1 = 2
//   d23 = 9+1 = 10  d24 = 4+9 = 13  d25 = 1   d26 = 4+1 = 5
//   d34 = 1+4 = 5   d35 = 9   d36 = 1+4 = 5
//   d45 = 4+4 = 8   d46 = 16
//   d56 = 4+4 = 8
// Step 1, rows {0..6}, k = 7-1-2 = 4 neighbours:
//   r0 85+89+100+113 = 387  r1 1+2+2+5 = 10  r2 1+1+5+10 = 17  r3 5+5+5+9 = 24
//   r4 5+8+10+13 = 36       r5 1+2+8+8 = 19  r6 2+5+5+8 = 20             -> r1 (10)
// Step 2, rows {0,2,3,4,5,6}, k = 3:
//   r0 85+89+100 = 274  r2 1+5+10 = 16  r3 5+5+9 = 19  r4 5+8+13 = 26  r5 1+8+8 = 17
//   r6 5+5+8 = 18                                                          -> r2 (16)
// Step 3, rows {0,3,4,5,6}, k = 2:
//   r0 85+89 = 174  r3 5+5 = 10  r4 5+8 = 13  r5 8+8 = 16  r6 5+8 = 13    -> r3 (10)
// Step 4, rows {0,4,5,6}, k = 1:
//   r0 85  r4 8  r5 8  r6 8  (a tie: the lowest index)                     -> r4 (8)
// Step 5, rows {0,5,6}, k = 0: every score 0, the lowest index              -> r0, the attacker
// selected = {1, 2, 3, 4, 0}. Per coordinate over (2,1), (3,1), (0,2), (1,4), (9,9):
//   x {2,3,0,1,9}: median 2, |x - 2| = 0,1,2,1,7 -> {2,3,1}, mean 2
//   y {1,1,2,4,9}: median 2, |y - 2| = 1,1,0,2,7 -> {1,1,2}, mean 4/3
// (the attacker's 9s are dropped in both; the middle three by rank would give y = 7/3).
TEST(Aggregate, BulyanByHand) {
  at::Tensor U = agg_rows({{9, 9}, {2, 1}, {3, 1}, {0, 2}, {1, 4}, {3, 2}, {1, 0}});
  fed::Aggregate a = fed::bulyan(U, 1);
  EXPECT_EQ(a.selected, (std::vector<int64_t>{1, 2, 3, 4, 0}));
  agg_expect_near(a.update, {2, 4.0 / 3});
  // scores: step 1's Krum scores over all rows.
  EXPECT_EQ(a.scores, (std::vector<double>{387, 10, 17, 24, 36, 19, 20}));
}

TEST(Aggregate, BulyanNeedsFourFPlusThreeClients) {
  at::Tensor U6 = agg_rows({{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 2}, {3, 3}});
  pare::testing::expect_option_error([&] { fed::bulyan(U6, 1); }, "assume_byzantine",
                                     {"Bulyan needs n >= 4f + 3 clients: got n = 6 for f = 1"});
  // f = 0 on the same rows is allowed: theta = 6 = n, beta = 6, the plain mean of all rows:
  // x (0+1+0+1+2+3)/6 = 7/6, y (0+0+1+1+2+3)/6 = 7/6.
  agg_expect_near(fed::bulyan(U6, 0).update, {7.0 / 6, 7.0 / 6});
}

// FLTrust with g0 = (3, 4), |g0| = 5:
//   u0 (-3,-4)  opposite: cos = -25/25 = -1, trust ReLU(-1) = 0
//   u1 (12,-5)  |u1| = 13, cos = (36 - 20) / (13 * 5) = 16/65, rescaled to 5: (60/13, -25/13)
//   u2 (30,40)  aligned, 10x g0: cos = 1, trust 1, rescaled to 5: (3, 4)
//   u3 (0,0)    norm 0: trust 0
// sum of trust = 16/65 + 1 = 81/65
//   x = (16/65 * 60/13 + 3) / (81/65) = (192/169 + 507/169) * 65/81 = 699*5 / (13*81) = 1165/351
//   y = (16/65 * -25/13 + 4) / (81/65) = (-80/169 + 676/169) * 65/81 = 596*5 / (13*81) = 2980/1053
TEST(Aggregate, FLTrustByHand) {
  at::Tensor U = agg_rows({{-3, -4}, {12, -5}, {30, 40}, {0, 0}});
  at::Tensor g0 = at::tensor(std::vector<float>{3, 4});
  fed::Aggregate a = fed::fltrust(U, g0);
  ASSERT_EQ(a.scores.size(), 4u);
  EXPECT_EQ(a.scores[0], 0);
  EXPECT_NEAR(a.scores[1], 16.0 / 65, 1e-12);
  EXPECT_NEAR(a.scores[2], 1.0, 1e-12);
  EXPECT_EQ(a.scores[3], 0);
  EXPECT_EQ(a.selected, (std::vector<int64_t>{1, 2}));
  agg_expect_near(a.update, {1165.0 / 351, 2980.0 / 1053});
  // Only the aligned row: its direction at g0's norm, (3, 4), not (30, 40).
  agg_expect_near(fed::fltrust(agg_rows({{30, 40}, {-3, -4}}), g0).update, {3, 4});
}

TEST(Aggregate, FLTrustWithNoTrustGivesZeros) {
  // (-3,-4): cos -1; (8,-6): 24 - 24 = 0, cos 0; both ReLU to 0.
  at::Tensor g0 = at::tensor(std::vector<float>{3, 4});
  fed::Aggregate a = fed::fltrust(agg_rows({{-3, -4}, {8, -6}}), g0);
  agg_expect_near(a.update, {0, 0});
  EXPECT_EQ(a.scores, (std::vector<double>{0, 0}));
  EXPECT_TRUE(a.selected.empty());
  // g0 = 0 has no direction: nothing is trusted.
  agg_expect_near(fed::fltrust(agg_rows({{1, 2}}), at::zeros({2})).update, {0, 0});
}

TEST(Aggregate, ClipNormsScalesOnlyLongRows) {
  // Row 0 (3,4) has norm 5 > 2: scaled by 2/5 to (1.2, 1.6). Row 1 (0,1) has norm 1: unchanged.
  at::Tensor U = agg_rows({{3, 4}, {0, 1}});
  EXPECT_EQ(fed::clip_norms(U, 2.0), 1);
  agg_expect_near(U.reshape({-1}), {1.2, 1.6, 0, 1});
  EXPECT_NEAR(U[0].norm().item<double>(), 2.0, 1e-6);
  // Nothing above 10: nothing clipped.
  EXPECT_EQ(fed::clip_norms(U, 10.0), 0);
  pare::testing::expect_option_error([&] { fed::clip_norms(U, 0.0); }, "max_norm", {"must be > 0", "got 0"});
  pare::testing::expect_option_error([&] { fed::clip_norms(U, -1.0); }, "max_norm", {"got -1"});
}

// Bucketing: the buckets are a partition of the rows into ceil(n / s) groups of s (the last
// smaller), each mean is its members' mean, and the same seed gives the same buckets.
TEST(Aggregate, BucketRowsPartitionsTheRowsAndAveragesEachBucket) {
  const at::Tensor U = agg_rows({{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}});
  const fed::Buckets b = fed::bucket_rows(U, 2, 7);
  ASSERT_EQ(b.members.size(), 3u);
  ASSERT_EQ(b.means.sizes(), (at::IntArrayRef{3, 2}));
  std::vector<int64_t> seen;
  for (size_t k = 0; k < b.members.size(); ++k) {
    EXPECT_EQ(b.members[k].size(), k < 2 ? 2u : 1u) << "bucket " << k;
    std::vector<double> want(2, 0.0);
    for (int64_t i : b.members[k]) {
      seen.push_back(i);
      for (int j = 0; j < 2; ++j) want[j] += double(2 * i + j) / double(b.members[k].size());  // row i is (2i, 2i+1)
    }
    agg_expect_near(b.means[int64_t(k)], want);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(fed::bucket_rows(U, 2, 7).members, b.members);
  // Another seed gives another grouping for at least one of a few seeds (5 rows: 15 pairings).
  bool differs = false;
  for (uint64_t seed = 8; seed < 16; ++seed) differs |= fed::bucket_rows(U, 2, seed).members != b.members;
  EXPECT_TRUE(differs);
  // s >= n: one bucket, the plain mean (1+2+3+10)/4 = 4; s = 1: every row alone.
  agg_expect_near(fed::bucket_rows(agg_rows({{1}, {2}, {3}, {10}}), 4, 0).means[0], {4.0});
  agg_expect_near(fed::bucket_rows(agg_rows({{1}, {2}, {3}, {10}}), 9, 0).means[0], {4.0});
  EXPECT_EQ(fed::bucket_rows(U, 1, 3).members.size(), 5u);
  pare::testing::expect_option_error([&] { fed::bucket_rows(U, 0, 0); }, "bucket", {"must be >= 1", "got 0"});
}

// Nearest-neighbour mixing, rows {0}, {1}, {2}, {10}, f = 1: each row becomes the mean of its
// n - f = 3 nearest rows, itself included. Squared distances from 0: 1, 4, 100; from 1: 1, 1, 81;
// from 2: 4, 1, 64; from 10: 100, 81, 64. So
//   0 -> {0, 1, 2} = 1;  1 -> {1, 0, 2} = 1;  2 -> {2, 1, 0} = 1;  10 -> {10, 2, 1} = 13/3,
// and the median of the mixed rows is 1 where the median of the rows is (1 + 2) / 2 = 1.5.
// Ties go to the lower index: with k = 2, row {1} is as near to {0} as to {2} and takes {0}.
TEST(Aggregate, MixNearestAveragesEachRowsNearestNeighbours) {
  const at::Tensor U = agg_rows({{0}, {1}, {2}, {10}});
  const at::Tensor M = fed::mix_nearest(U, 1);
  ASSERT_EQ(M.sizes(), U.sizes());
  agg_expect_near(M.reshape({-1}), {1.0, 1.0, 1.0, 13.0 / 3.0});
  agg_expect_near(fed::coordinate_median(M).update, {1.0});
  agg_expect_near(fed::coordinate_median(U).update, {1.5});
  agg_expect_near(fed::mix_nearest(agg_rows({{0}, {1}, {2}}), 1).reshape({-1}), {0.5, 0.5, 1.5});
  // In 2-D the neighbours are chosen by the whole row's L2 distance, not per coordinate:
  // (0,0) (0,3) (4,0) (4,3), f = 1, k = 3: (0,0)'s farthest is (4,3) (25), so it becomes
  // ((0,0) + (0,3) + (4,0)) / 3 = (4/3, 1).
  agg_expect_near(fed::mix_nearest(agg_rows({{0, 0}, {0, 3}, {4, 0}, {4, 3}}), 1)[0], {4.0 / 3.0, 1.0});
  // f = 0: every row is the plain mean.
  agg_expect_near(fed::mix_nearest(U, 0).reshape({-1}), {3.25, 3.25, 3.25, 3.25});
  pare::testing::expect_option_error([&] { fed::mix_nearest(U, 2); }, "assume_byzantine",
                                     {"nearest-neighbour mixing needs n >= 2f + 1 clients: got n = 4 for f = 2"});
}

TEST(Aggregate, RefusesTooFewClientsForF) {
  at::Tensor U4 = agg_rows({{0, 0}, {1, 0}, {0, 1}, {1, 1}});
  // Krum with f = 1 needs n >= 2*1 + 3 = 5.
  pare::testing::expect_option_error([&] { fed::krum(U4, 1); }, "assume_byzantine",
                                     {"Krum needs n >= 2f + 3 clients: got n = 4 for f = 1"});
  pare::testing::expect_option_error([&] { fed::multi_krum(U4, 1, 2); }, "assume_byzantine",
                                     {"Multi-Krum needs n >= 2f + 3", "got n = 4 for f = 1"});
  pare::testing::expect_option_error([&] { fed::krum(U4, -1); }, "assume_byzantine", {"must be >= 0", "got -1"});
  // The trimmed mean needs n > 2 * trim: n = 4, trim = 2 is refused, trim = 1 is fine.
  pare::testing::expect_option_error([&] { fed::trimmed_mean(U4, 2); }, "trim",
                                     {"n > 2 * trim", "got n = 4 for trim = 2"});
  pare::testing::expect_option_error([&] { fed::trimmed_mean(U4, -1); }, "trim", {"got -1"});
  EXPECT_NO_THROW(fed::trimmed_mean(U4, 1));
  // Multi-Krum's m must lie in [1, n].
  at::Tensor U5 = agg_krum_example().narrow(0, 0, 5);
  pare::testing::expect_option_error([&] { fed::multi_krum(U5, 1, 0); }, "multi_krum_m",
                                     {"[1, n]", "got m = 0 for n = 5"});
  pare::testing::expect_option_error([&] { fed::multi_krum(U5, 1, 6); }, "multi_krum_m", {"got m = 6 for n = 5"});
}

TEST(Aggregate, RefusesBadWeightsAndShapes) {
  at::Tensor U = agg_rows({{1, 2}, {3, 4}, {5, 6}});
  pare::testing::expect_input_error([&] { fed::fedavg(U, {1, -1, 1}); }, {">= 0", "weight 1 is -1"});
  pare::testing::expect_input_error([&] { fed::fedavg(U, {0, 0, 0}); }, {"positive sum"});
  pare::testing::expect_input_error([&] { fed::fedavg(U, {1, 1}); }, {"one weight per client", "2 weights", "n = 3"});
  pare::testing::expect_input_error([&] { fed::coordinate_median(at::ones({4})); }, {"U [n, d]", "1-D"});
  pare::testing::expect_input_error([&] { fed::coordinate_median(at::ones({0, 3})); }, {"n >= 1"});
  pare::testing::expect_input_error([&] { fed::coordinate_median(at::ones({2, 2}, at::kLong)); }, {"floating"});
  pare::testing::expect_input_error([&] { fed::fltrust(U, at::ones({3})); }, {"size d = 2", "[3]"});
}

TEST(Aggregate, UpdateIsFloat32ForDoubleInput) {
  at::Tensor U = agg_rows({{1, 2}, {3, 4}}).to(at::kDouble);
  EXPECT_EQ(fed::coordinate_median(U).update.scalar_type(), at::kFloat);
  EXPECT_EQ(fed::fedavg(U, {1, 1}).update.scalar_type(), at::kFloat);
}

