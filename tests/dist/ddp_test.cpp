// Tests for dist/: the per-rank shard of an epoch, World from the environment.
#include "dist/ddp.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <numeric>

#include "tests/dist_util.h"
#include "tests/test_util.h"

using namespace pare;
using pare::testing::expect_input_error;

TEST(ShardOrder, RanksTogetherTakeEachGlobalBatch) {
  std::vector<int64_t> order(103);
  std::iota(order.rbegin(), order.rend(), 0);  // any permutation will do
  const int64_t B = 12;
  for (int world : {1, 2, 3, 4}) {
    std::vector<std::vector<int64_t>> shards;
    for (int r = 0; r < world; ++r) shards.push_back(dist::shard_order(order, B, r, world));
    // Full global batches: rank r's b-th batch of B/world is slice r of global batch b.
    const int64_t per = B / world, full = 103 / B;
    for (int64_t b = 0; b < full; ++b)
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < per; ++i)
          EXPECT_EQ(shards[r][b * per + i], order[b * B + r * per + i]) << world << " " << b << " " << r;
    // The tail of 7 is split as evenly as possible, and nothing is lost or repeated.
    size_t total = 0;
    for (auto& s : shards) total += s.size();
    EXPECT_EQ(total, 103u) << world;
    for (auto& s : shards) EXPECT_LE(s.size() - static_cast<size_t>(full * per), 7u / world + 1);
  }
}

TEST(ShardOrder, ATailShorterThanTheWorldIsDroppedAndBadBatchesRejected) {
  std::vector<int64_t> order(10);
  std::iota(order.begin(), order.end(), 0);
  // Batch 3 over 3 ranks: three full batches, and the tail of 1 sample is dropped on every rank.
  for (int r = 0; r < 3; ++r) EXPECT_EQ(dist::shard_order(order, 3, r, 3).size(), 3u);
  expect_input_error([&] { dist::shard_order(order, 5, 0, 2); }, {"batch size 5", "multiple of the world size 2"});
}

TEST(World, ReadsTorchrunsVariablesAndRejectsBadOnes) {
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "2", 1);
  ::setenv("LOCAL_RANK", "0", 1);
  ::setenv("MASTER_PORT", "29999", 1);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", "3", 1);
  dist::World w = dist::World::from_env();
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.master_port, 29999);
  EXPECT_TRUE(w.use_agent_store);
  EXPECT_EQ(w.restart_count, 3);
  EXPECT_TRUE(w.distributed());
  ::setenv("RANK", "4", 1);
  expect_input_error([] { dist::World::from_env(); }, {"RANK=4", "WORLD_SIZE=4"});
  ::setenv("RANK", "x", 1);
  expect_input_error([] { dist::World::from_env(); }, {"RANK", "'x'"});
  for (const char* v : {"WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
                        "TORCHELASTIC_RESTART_COUNT"})
    ::unsetenv(v);
  EXPECT_FALSE(dist::World::from_env().distributed());
}

// What one rank sends: each bucket's gradients in fp32 times the rank's samples (a parameter the
// loss did not reach counts as zero), the first bucket followed by the sample count. Which device
// the buckets are made on is checked in tests/gpu (CudaGradientSync): no device a CPU machine has
// shows the defect found there (a CPU sample count joined to CUDA gradients); at::cat on the meta
// device accepts a CPU tensor among meta ones, so a meta test passed with the defect in place.
TEST(GradientSync, PacksBucketsWeightedBySamplesWithTheCountInTheFirst) {
  std::vector<at::Tensor> params = {at::zeros({2, 2}), at::zeros({3}, at::kBFloat16), at::zeros({2})};
  params[0].mutable_grad() = at::arange(4, at::kFloat).view({2, 2});
  params[1].mutable_grad() = at::full({3}, 0.5, at::kBFloat16);
  dist::GradientSync sync(nullptr, params, /*bucket_bytes=*/12);  // buckets {2, 1} and {0}
  ASSERT_EQ(sync.buckets(), 2u);
  const std::vector<at::Tensor> flats = sync.pack(3);
  ASSERT_EQ(flats.size(), 2u);
  EXPECT_TRUE(at::equal(flats[0], at::tensor({0.f, 0.f, 1.5f, 1.5f, 1.5f, 3.f})));
  EXPECT_TRUE(at::equal(flats[1], at::tensor({0.f, 3.f, 6.f, 9.f})));
}

// Two ranks (threads with a Gloo group) average their gradients weighted by their samples; the same
// check runs on CUDA tensors in tests/gpu (CudaGradientSync).
TEST(GradientSync, TwoRanksAverageWeightedBySamples) {
  pare::testing::expect_gradient_sync_averages(at::kCPU, dist::Backend::kGloo);
}
