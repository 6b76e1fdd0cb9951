// --backend: which c10d backend a job's ranks use, and the refusals a CPU build gives.
#include <gtest/gtest.h>

#include "dist/world.h"
#include "tests/test_util.h"

using namespace pare;

TEST(Backend, AutoIsGlooOnTheCpuAndGlooIsAlwaysThere) {
  EXPECT_EQ(dist::parse_backend("auto", at::kCPU), dist::Backend::kGloo);
  EXPECT_EQ(dist::parse_backend("gloo", at::kCPU), dist::Backend::kGloo);
  EXPECT_STREQ(dist::backend_name(dist::Backend::kNccl), "NCCL");
}

TEST(Backend, NcclIsRefusedWithoutItOrOnTheCpu) {
  if (!dist::nccl_built())
    pare::testing::expect_option_error([] { dist::parse_backend("nccl", at::kCPU); }, "backend",
                                       {"built without c10d's NCCL", "use gloo"});
  else
    pare::testing::expect_input_error([] { dist::parse_backend("nccl", at::kCPU); },
                                      {"backend", "CUDA tensors", "cpu"});
  pare::testing::expect_input_error([] { dist::parse_backend("mpi", at::kCPU); }, {"auto, gloo or nccl", "mpi"});
}
