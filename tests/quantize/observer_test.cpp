// Quantization parameters, fake quantization and the calibration observers.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "core/op_registry.h"
#include "quantize/observer.h"
#include "tests/test_util.h"

namespace pare::quantize {
namespace {

// Mean squared error of fake-quantizing x with the range an observer picked.
double mse_with(const at::Tensor& x, std::pair<double, double> range, QScheme s) {
  return (fake_quantize(x, params_from_range(range, s)) - x).pow(2).mean().item<double>();
}

std::pair<double, double> calibrate(CalibMethod m, QScheme s, const at::Tensor& x, double pct = 99.99) {
  Observer obs(m, s, pct);
  for (const auto& b : x.split(1000)) obs.observe_range(b);
  if (obs.needs_histogram())
    for (const auto& b : x.split(1000)) obs.observe_histogram(b);
  return obs.range();
}

TEST(QuantParams, AsymmetricUint8RangeContainsZeroExactly) {
  QuantParams p = params_from_range({-1.0, 3.0}, QScheme::kAsymmetricUInt8);
  EXPECT_FLOAT_EQ(p.scale.item<float>(), 4.0f / 255.0f);
  EXPECT_EQ(p.zero_point.scalar_type(), at::kByte);
  EXPECT_EQ(p.zero_point.item<int64_t>(), 64);  // round(1 / (4/255)) = round(63.75)
  at::Tensor zero = at::zeros({1});
  EXPECT_EQ(fake_quantize(zero, p).item<float>(), 0.0f);
  // A positive-only range is widened to 0: zero point 0.
  EXPECT_EQ(params_from_range({0.5, 2.0}, QScheme::kAsymmetricUInt8).zero_point.item<int64_t>(), 0);
  EXPECT_EQ(params_from_range({0.0, 0.0}, QScheme::kAsymmetricUInt8).scale.item<float>(), 1.0f);
}

TEST(QuantParams, SymmetricInt8UsesTheLargerSide) {
  QuantParams p = params_from_range({-2.0, 1.0}, QScheme::kSymmetricInt8);
  EXPECT_FLOAT_EQ(p.scale.item<float>(), 2.0f / 127.0f);
  EXPECT_EQ(p.zero_point.scalar_type(), at::kChar);
  EXPECT_EQ(p.zero_point.item<int64_t>(), 0);
}

TEST(QuantParams, WeightScalesPerChannelAndPerTensor) {
  at::Tensor w = at::tensor({1.f, -2.f, 0.5f, 0.25f, 0.f, 0.f}).reshape({3, 2});
  QuantParams pc = weight_params(w, 0);
  ASSERT_EQ(pc.scale.sizes(), (std::vector<int64_t>{3}));
  EXPECT_FLOAT_EQ(pc.scale[0].item<float>(), 2.f / 127);
  EXPECT_FLOAT_EQ(pc.scale[1].item<float>(), 0.5f / 127);
  EXPECT_FLOAT_EQ(pc.scale[2].item<float>(), 1.f / 127);  // an all-zero channel
  at::Tensor q = quantize_tensor(w, pc);
  EXPECT_EQ(q.scalar_type(), at::kChar);
  EXPECT_EQ(q[0][1].item<int64_t>(), -127);
  EXPECT_EQ(q[1][0].item<int64_t>(), 127);
  QuantParams pt = weight_params(w, -1);
  EXPECT_EQ(pt.scale.dim(), 0);
  EXPECT_FLOAT_EQ(pt.scale.item<float>(), 2.f / 127);
  QuantParams ax1 = weight_params(w, 1);
  EXPECT_FLOAT_EQ(ax1.scale[0].item<float>(), 1.f / 127);
  EXPECT_FLOAT_EQ(ax1.scale[1].item<float>(), 2.f / 127);
}

TEST(QuantParams, FakeQuantizeAgreesBitForBitWithTheOnnxOps) {
  at::manual_seed(3);
  at::Tensor x = at::randn({4, 5, 3});
  QuantParams p = weight_params(x, 1);
  core::Node n;
  n.op_type = "QuantizeLinear";
  n.name = "q";
  n.inputs = {"x", "s", "z"};
  n.outputs = {"y"};
  n.attrs["axis"] = int64_t{1};
  const auto& reg = core::OpRegistry::global();
  at::Tensor q = reg.get("QuantizeLinear").forward(n, {x, p.scale, p.zero_point}, {}).at(0);
  EXPECT_TRUE(q.equal(quantize_tensor(x, p)));
  n.op_type = "DequantizeLinear";
  at::Tensor d = reg.get("DequantizeLinear").forward(n, {q, p.scale, p.zero_point}, {}).at(0);
  EXPECT_TRUE(d.equal(fake_quantize(x, p)));
}

TEST(Sqnr, IsInfiniteForEqualTensorsAndTwentyDbForTenPercentNoise) {
  at::Tensor x = at::ones({100});
  EXPECT_TRUE(std::isinf(sqnr_db(x, x)));
  EXPECT_NEAR(sqnr_db(x, x * 1.1), 20.0, 1e-4);
}

TEST(Observer, MinMaxCoversEveryBatch) {
  Observer obs(CalibMethod::kMinMax, QScheme::kAsymmetricUInt8);
  obs.observe_range(at::tensor({0.5f, 2.f}));
  obs.observe_range(at::tensor({-1.5f, 1.f}));
  EXPECT_EQ(obs.range(), std::make_pair(-1.5, 2.0));
  Observer sym(CalibMethod::kMinMax, QScheme::kSymmetricInt8);
  sym.observe_range(at::tensor({-1.5f, 2.f}));
  EXPECT_EQ(sym.range(), std::make_pair(-2.0, 2.0));
}

TEST(Observer, PercentileClipsARareOutlier) {
  at::manual_seed(1);
  at::Tensor x = at::cat({at::rand({20000}), at::full({1}, 100.f)});
  auto r = calibrate(CalibMethod::kPercentile, QScheme::kAsymmetricUInt8, x, 99.9);
  EXPECT_EQ(r.first, 0.0);
  EXPECT_GT(r.second, 0.95);
  EXPECT_LT(r.second, 1.2);
  EXPECT_EQ(calibrate(CalibMethod::kMinMax, QScheme::kAsymmetricUInt8, x).second, 100.0);
}

TEST(Observer, MseRangeHasNoLargerErrorThanMinMaxOnAHeavyTail) {
  at::manual_seed(2);
  // Laplace-distributed values: a long thin tail that min-max wastes levels on.
  at::Tensor u = at::rand({50000}) - 0.5;
  at::Tensor x = -at::sign(u) * at::log1p(-2 * u.abs() + 1e-7);
  auto mm = calibrate(CalibMethod::kMinMax, QScheme::kSymmetricInt8, x);
  auto ms = calibrate(CalibMethod::kMse, QScheme::kSymmetricInt8, x);
  EXPECT_LT(ms.second, mm.second);
  EXPECT_LT(mse_with(x, ms, QScheme::kSymmetricInt8), mse_with(x, mm, QScheme::kSymmetricInt8));
}

TEST(Observer, EntropyPicksAThresholdInsideTheRangeForGaussianDataWithOutliers) {
  at::manual_seed(4);
  at::Tensor x = at::cat({at::randn({50000}), at::full({3}, 40.f)});
  auto r = calibrate(CalibMethod::kEntropy, QScheme::kSymmetricInt8, x);
  EXPECT_EQ(r.first, -r.second);
  // Far below the outliers, and not below the bulk of a standard normal.
  EXPECT_GT(r.second, 2.5);
  EXPECT_LT(r.second, 10.0);
  EXPECT_LT(mse_with(x.narrow(0, 0, 50000), r, QScheme::kSymmetricInt8),
            mse_with(x.narrow(0, 0, 50000), calibrate(CalibMethod::kMinMax, QScheme::kSymmetricInt8, x),
                     QScheme::kSymmetricInt8));
}

TEST(Observer, ParsesMethodsAndRejectsUnknownOnes) {
  EXPECT_EQ(parse_calib_method("entropy"), CalibMethod::kEntropy);
  EXPECT_STREQ(calib_method_name(parse_calib_method("mse")), "mse");
  pare::testing::expect_input_error([] { parse_calib_method("kl"); },
                                    {"minmax, percentile, entropy or mse", "'kl'"});
}

}  // namespace
}  // namespace pare::quantize
