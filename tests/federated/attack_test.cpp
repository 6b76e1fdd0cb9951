// Byzantine attacks: the update rewrites on small vectors, Gaussian noise by seed and by its
// moments, label flipping, and ALIE's z (checked against a normal table) and update (by hand).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "federated/attack.h"
#include "tests/test_util.h"

namespace fed = pare::federated;

namespace {

std::vector<double> attack_values(const at::Tensor& t) {
  at::Tensor c = t.to(at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// Phi(x), the standard normal CDF, as the reference the inverse must invert.
double attack_phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

}  // namespace

TEST(Attack, NamesRoundTrip) {
  for (const std::string name : {"none", "sign-flip", "scaling", "gaussian", "label-flip", "alie"})
    EXPECT_EQ(fed::attack_name(fed::parse_attack(name)), name);
  EXPECT_EQ(fed::parse_attack("alie"), fed::AttackKind::kAlie);
  pare::testing::expect_input_error([] { fed::parse_attack("sign_flip"); }, {"'sign_flip'", "sign-flip", "alie"});
}

TEST(Attack, SignFlipAndScaling) {
  at::Tensor u = at::tensor(std::vector<float>{1, -2, 3});
  fed::AttackOptions opts;
  // The default flip factor is 4.
  EXPECT_EQ(attack_values(fed::attack_update(fed::AttackKind::kSignFlip, u, opts)), (std::vector<double>{-4, 8, -12}));
  opts.flip = 1;
  EXPECT_EQ(attack_values(fed::attack_update(fed::AttackKind::kSignFlip, u, opts)), (std::vector<double>{-1, 2, -3}));
  opts.flip = 0;
  EXPECT_THROW(fed::attack_update(fed::AttackKind::kSignFlip, u, opts), pare::InputError);
  // The default scale is 10.
  EXPECT_EQ(attack_values(fed::attack_update(fed::AttackKind::kScaling, u, opts)),
            (std::vector<double>{10, -20, 30}));
  opts.scale = -0.5;
  EXPECT_EQ(attack_values(fed::attack_update(fed::AttackKind::kScaling, u, opts)),
            (std::vector<double>{-0.5, 1, -1.5}));
  // none, label-flip and alie leave the update as it is.
  for (auto kind : {fed::AttackKind::kNone, fed::AttackKind::kLabelFlip, fed::AttackKind::kAlie}) {
    at::Tensor out = fed::attack_update(kind, u, opts);
    EXPECT_TRUE(pare::testing::bitwise_equal(out, u));
  }
  EXPECT_EQ(u[0].item<float>(), 1.0f) << "the attack must not change its input";
}

TEST(Attack, GaussianIsSeededNoiseOfTheRightMoments) {
  // d = 10000 draws of N(0, 2^2): the sample mean's standard error is 2 / 100 = 0.02 and the
  // sample std's about 2 / sqrt(2 * 10000) = 0.014; the bounds below are over 4 of those.
  at::Tensor u = at::full({10000}, 5.0f);
  fed::AttackOptions opts;
  opts.sigma = 2;
  opts.seed = 17;
  at::Tensor a = fed::attack_update(fed::AttackKind::kGaussian, u, opts);
  EXPECT_EQ(a.sizes(), u.sizes());
  EXPECT_EQ(a.scalar_type(), at::kFloat);
  EXPECT_NEAR(a.mean().item<double>(), 0.0, 0.1) << "the noise replaces the update, it is not added to it";
  EXPECT_NEAR(a.std().item<double>(), 2.0, 0.06);
  EXPECT_TRUE(pare::testing::bitwise_equal(a, fed::attack_update(fed::AttackKind::kGaussian, u, opts)));
  opts.seed = 18;
  EXPECT_FALSE(pare::testing::bitwise_equal(a, fed::attack_update(fed::AttackKind::kGaussian, u, opts)));
  // The noise takes u's shape; sigma = 0 sends zeros.
  opts.sigma = 0;
  at::Tensor z = fed::attack_update(fed::AttackKind::kGaussian, at::ones({3, 4}), opts);
  EXPECT_EQ(z.sizes(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(z.abs().max().item<double>(), 0.0);
  opts.sigma = -1;
  pare::testing::expect_option_error([&] { fed::attack_update(fed::AttackKind::kGaussian, u, opts); }, "sigma",
                                     {">= 0", "got -1"});
}

TEST(Attack, FlipLabels) {
  // 10 classes: y -> 9 - y.
  at::Tensor y = at::tensor(std::vector<int64_t>{0, 1, 2, 9});
  at::Tensor f = fed::flip_labels(y, 10);
  EXPECT_EQ(f.scalar_type(), at::kLong);
  EXPECT_EQ(attack_values(f), (std::vector<double>{9, 8, 7, 0}));
  // Twice is the identity.
  EXPECT_TRUE(pare::testing::bitwise_equal(fed::flip_labels(f, 10), y));
  pare::testing::expect_input_error([&] { fed::flip_labels(y, 9); }, {"[0, 9)", "[0, 9]"});
  pare::testing::expect_input_error([] { fed::flip_labels(at::zeros({2}), 2); }, {"integer labels"});
}

TEST(Attack, AlieZAgainstANormalTable) {
  // n = 20, f = 4: s = floor(20/2 + 1) - 4 = 11 - 4 = 7, p = (20 - 7) / 20 = 0.65. A normal table
  // has Phi(0.38) = 0.64803 and Phi(0.39) = 0.65173; interpolating,
  // z = 0.38 + 0.01 * (0.65 - 0.64803) / (0.65173 - 0.64803) = 0.38 + 0.01 * 0.5324 = 0.38532.
  const double z20 = fed::alie_z(20, 4);
  EXPECT_NEAR(z20, 0.38532, 2e-5);
  EXPECT_NEAR(attack_phi(z20), 0.65, 1e-13);
  // n = 50, f = 10: s = floor(50/2 + 1) - 10 = 26 - 10 = 16, p = (50 - 16) / 50 = 0.68.
  // Phi(0.46) = 0.67724, Phi(0.47) = 0.68082: z = 0.46 + 0.01 * 0.00276 / 0.00358 = 0.46771
  // (linear interpolation overestimates a little here: the exact value is 0.467699).
  const double z50 = fed::alie_z(50, 10);
  EXPECT_NEAR(z50, 0.46770, 3e-5);
  EXPECT_NEAR(attack_phi(z50), 0.68, 1e-13);
  // n = 2, f = 1: s = 2 - 1 = 1, p = 1/2, z = 0. n = 1000, f = 0: s = 501, p = 499/1000, z
  // slightly below 0. n = 1000, f = 499: s = 2, p = 998/1000, in the upper tail (p > 0.97575)
  // where the approximation changes form.
  EXPECT_NEAR(fed::alie_z(2, 1), 0.0, 1e-15);
  EXPECT_LT(fed::alie_z(1000, 0), 0.0);
  EXPECT_NEAR(attack_phi(fed::alie_z(1000, 0)), 0.499, 1e-13);
  EXPECT_NEAR(attack_phi(fed::alie_z(1000, 499)), 0.998, 1e-13);
}

TEST(Attack, AlieZRefusesImpossibleF) {
  // n = 10, f = 6: s = 6 - 6 = 0, the attackers alone are a majority.
  pare::testing::expect_option_error([] { fed::alie_z(10, 6); }, "byzantine", {"got s = 0 for n = 10, f = 6"});
  pare::testing::expect_option_error([] { fed::alie_z(10, -1); }, "byzantine", {"got -1"});
  // n = 1: s = 1 = n, z = Phi^-1(0) would be -inf.
  pare::testing::expect_option_error([] { fed::alie_z(1, 0); }, "clients", {"got s = 1 for n = 1, f = 0"});
  pare::testing::expect_option_error([] { fed::alie_z(0, 0); }, "clients", {"got 0"});
}

TEST(Attack, AlieUpdateByHand) {
  // H rows (1, 0), (2, 0), (3, 6); n = 20, f = 4, z = 0.3853205 (above).
  //   column 0: mean 2, population variance (1 + 0 + 1) / 3 = 2/3, std 0.8164966
  //             -> 2 - 0.3853205 * 0.8164966 = 2 - 0.3146128 = 1.6853872
  //   column 1: mean 2, variance (4 + 4 + 16) / 3 = 8, std 2.8284271
  //             -> 2 - 0.3853205 * 2.8284271 = 2 - 1.0898509 = 0.9101491
  at::Tensor H = at::tensor(std::vector<float>{1, 0, 2, 0, 3, 6}).reshape({3, 2});
  at::Tensor a = fed::alie_update(H, 20, 4);
  EXPECT_EQ(a.scalar_type(), at::kFloat);
  std::vector<double> v = attack_values(a);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_NEAR(v[0], 1.6853872, 1e-6);
  EXPECT_NEAR(v[1], 0.9101491, 1e-6);
  // One row: std 0, the row itself.
  EXPECT_EQ(attack_values(fed::alie_update(H.narrow(0, 2, 1), 20, 4)), (std::vector<double>{3, 6}));
  pare::testing::expect_input_error([] { fed::alie_update(at::ones({3}), 20, 4); }, {"H [k, d]"});
}
