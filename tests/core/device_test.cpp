// Devices and precisions as --device / --precision name them, on the libtorch this build has.
#include <gtest/gtest.h>

#include "core/device.h"
#include "core/torch_compat.h"
#include "tests/test_util.h"

using namespace pare;
using pare::testing::expect_input_error;

TEST(Device, CpuAndAutoWithoutAGpu) {
  EXPECT_TRUE(core::parse_device("cpu").is_cpu());
  if (!compat::cuda_available()) EXPECT_TRUE(core::parse_device("auto", 3).is_cpu());
}

TEST(Device, CudaOnABuildWithoutItIsRefusedSayingWhy) {
  if (compat::cuda_built()) GTEST_SKIP() << "this libtorch has CUDA (tests/gpu covers it)";
  for (const char* spec : {"cuda", "cuda:0", "cuda:1"})
    pare::testing::expect_option_error([&] { core::parse_device(spec); }, "device", {spec, "without CUDA", "use cpu"});
}

// The ordinary build (PyTorch's CUDA wheel) on a machine without a GPU.
TEST(Device, CudaWithoutAGpuIsRefusedSayingWhy) {
  if (!compat::cuda_built()) GTEST_SKIP() << "this libtorch has no CUDA (the test above covers it)";
  if (compat::cuda_available()) GTEST_SKIP() << "this machine has a GPU (tests/gpu covers it)";
  for (const char* spec : {"cuda", "cuda:0", "cuda:1"})
    pare::testing::expect_option_error([&] { core::parse_device(spec); }, "device", {spec, "sees no GPU"});
  EXPECT_TRUE(core::parse_device("auto").is_cpu());
}

TEST(Device, AnIndexPastTheLastGpuIsRefused) {
  if (!compat::cuda_available()) GTEST_SKIP() << "no GPU";
  const int n = compat::cuda_device_count();
  EXPECT_EQ(core::parse_device("cuda:0").index(), 0);
  EXPECT_EQ(core::parse_device("cuda", n - 1).index(), n - 1);  // LOCAL_RANK picks the GPU
  expect_input_error([&] { core::parse_device("cuda:" + std::to_string(n)); }, {"does not exist"});
  expect_input_error([&] { core::parse_device("cuda", n); }, {"LOCAL_RANK"});
}

TEST(Device, BadSpellingsAreRefusedListingTheChoices) {
  for (const char* spec : {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:99999", "cpu:0", ""})
    expect_input_error([&] { core::parse_device(spec); }, {"cpu, cuda, cuda:N or auto"});
}

TEST(Precision, NamesRoundTripAndFp16NeedsCuda) {
  for (const char* name : {"fp32", "bf16", "fp16"})
    EXPECT_STREQ(core::precision_name(core::parse_precision(name)), name);
  EXPECT_EQ(core::precision_dtype(core::Precision::kBf16), at::kBFloat16);
  pare::testing::expect_option_error([] { core::parse_precision("int8"); }, "precision", {"fp32, bf16 or fp16"});
  pare::testing::expect_option_error([] { core::check_precision(core::Precision::kFp16, at::kCPU); }, "precision",
                                     {"fp16 runs on CUDA only", "bf16"});
  core::check_precision(core::Precision::kBf16, at::kCPU);  // no throw
}

TEST(AutocastScope, MatmulsRunInBf16InsideAndStateIsRestored) {
  at::Tensor a = at::rand({8, 16}), b = at::rand({16, 4});
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
  {
    core::AutocastScope amp(at::kCPU, core::Precision::kBf16);
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
    {
      core::AutocastScope off(at::kCPU, core::Precision::kFp32);  // fp32 changes nothing
      EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
    }
  }
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
  EXPECT_FALSE(compat::autocast_state(at::kCPU).enabled);
}
