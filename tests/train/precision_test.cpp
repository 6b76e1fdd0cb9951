// Mixed precision on the CPU (bf16 autocast: AVX-512 BF16 here), and the device plumbing a CPU can
// check. The CUDA side is tests/gpu.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "core/device.h"
#include "core/zoo.h"
#include "distill/teacher.h"
#include "train/trainer.h"
#include "tests/test_util.h"

using namespace pare;

using pare::testing::two_blobs;
using pare::testing::relative_error;

// A bf16 teacher's logits against fp32 on the same batch. bf16 keeps 8 significant bits (a relative
// rounding of 2^-9 = 0.2% per value); the cnn's convolutions and Gemms accumulate in fp32 inside the
// kernels, so the error stays within a few times that after five layers: we allow 2%, and the
// predicted classes must agree on almost every sample.
TEST(Bf16Teacher, LogitsAgreeWithFp32WithinTolerance) {
  engine::TorchEngine teacher(core::build_zoo_model("cnn", 3), "cnn");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  at::Tensor x = at::rand({256, 1, 28, 28}, gen);
  at::Tensor fp32 = teacher.logits(x);
  at::Tensor bf16;
  {
    core::AutocastScope amp(at::kCPU, core::Precision::kBf16);
    bf16 = teacher.logits(x);
  }
  const double err = relative_error(bf16, fp32);
  RecordProperty("relative_error", std::to_string(err));
  EXPECT_GT(err, 0) << "autocast did not change the arithmetic";
  EXPECT_LT(err, 2e-2);
  const double agree = bf16.argmax(1).eq(fp32.argmax(1)).to(at::kDouble).mean().item<double>();
  EXPECT_GE(agree, 0.95) << "relative error " << err;
}

TEST(Trainer, Bf16TrainsWithFp32MasterWeights) {
  auto train = two_blobs(512, 1), test = two_blobs(256, 2);
  auto run = [&](core::Precision p) {
    core::Module m(core::build_zoo_model("mlp:784-16-2", 0));
    auto h = train::Trainer(m, train::TrainerOptions().epochs(2).batch_size(32).seed(1).precision(p).progress(false))
                 .fit(train, &test);
    EXPECT_GT(h.back().val_accuracy, 0.9);
    for (const auto& w : m.parameters()) EXPECT_EQ(w.scalar_type(), at::kFloat);
    return m.parameters()[0].detach().clone();
  };
  const at::Tensor bf16 = run(core::Precision::kBf16), fp32 = run(core::Precision::kFp32);
  EXPECT_FALSE(at::equal(bf16, fp32)) << "bf16 trained the same weights as fp32: autocast was not on";
  EXPECT_LT(relative_error(bf16, fp32), 0.1);
}

TEST(TrainerOptions, Fp16OnTheCpuIsRefusedNamingThePrecision) {
  pare::testing::expect_input_error(
      [] { train::TrainerOptions().precision(core::Precision::kFp16).validate(); },
      {"precision", "fp16 runs on CUDA only"});
}

TEST(Trainer, ExplicitCpuDeviceIsTheDefaultBitForBit) {
  auto train = two_blobs(128, 1);
  auto run = [&](bool explicit_cpu) {
    core::Module m(core::build_zoo_model("mlp:784-8-2", 5));
    auto opts = train::TrainerOptions().epochs(1).batch_size(16).seed(3).progress(false);
    if (explicit_cpu) opts.device(core::parse_device("cpu"));
    train::Trainer(m, opts).fit(train, nullptr);
    return m.parameters()[0].detach().clone();
  };
  EXPECT_TRUE(at::equal(run(true), run(false)));
}
