// Tests for dist/: the per-rank shard of an epoch, World from the environment.
#include "dist/ddp.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <numeric>

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
