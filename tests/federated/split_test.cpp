// Client splits: each covers every index exactly once and repeats for the same seed; Dirichlet
// skew grows as alpha shrinks; label-sorted shards limit the labels per client; malformed specs
// and impossible requests are refused with messages that name them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "federated/split.h"
#include "tests/test_util.h"

namespace fed = pare::federated;

namespace {

// Labels 0, 1, ..., classes - 1, 0, 1, ... (interleaved, so a split must sort them itself).
at::Tensor split_labels(int64_t classes, int64_t per_class) {
  return at::arange(classes * per_class, at::kLong).remainder(classes);
}

// Every index of [0, n) exactly once over all clients.
::testing::AssertionResult split_covers(const fed::Split& s, int64_t n) {
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (size_t c = 0; c < s.size(); ++c)
    for (int64_t i : s[c]) {
      if (i < 0 || i >= n) return ::testing::AssertionFailure() << "client " << c << " holds index " << i;
      if (seen[i]++) return ::testing::AssertionFailure() << "index " << i << " given twice";
    }
  for (int64_t i = 0; i < n; ++i)
    if (!seen[i]) return ::testing::AssertionFailure() << "index " << i << " given to no client";
  return ::testing::AssertionSuccess();
}

// Per client: label -> how many of its samples carry it.
std::vector<std::map<int64_t, int64_t>> split_label_counts(const fed::Split& s, const at::Tensor& labels) {
  auto y = labels.accessor<int64_t, 1>();
  std::vector<std::map<int64_t, int64_t>> out(s.size());
  for (size_t c = 0; c < s.size(); ++c)
    for (int64_t i : s[c]) ++out[c][y[i]];
  return out;
}

std::vector<size_t> split_sizes(const fed::Split& s) {
  std::vector<size_t> out;
  for (const auto& c : s) out.push_back(c.size());
  return out;
}

}  // namespace

TEST(Split, IidCoversEveryIndexOnceInNearEqualParts) {
  // 103 = 10 * 10 + 3: the first three clients take 11, the other seven 10.
  fed::Split s = fed::iid_split(103, 10, 1);
  ASSERT_EQ(s.size(), 10u);
  EXPECT_TRUE(split_covers(s, 103));
  EXPECT_EQ(split_sizes(s), (std::vector<size_t>{11, 11, 11, 10, 10, 10, 10, 10, 10, 10}));
  // A permutation, not the identity cut into blocks.
  std::vector<int64_t> first(s[0].begin(), s[0].end()), block(11);
  for (int64_t i = 0; i < 11; ++i) block[i] = i;
  std::sort(first.begin(), first.end());
  EXPECT_NE(first, block);
}

TEST(Split, SameSeedGivesTheSameSplit) {
  at::Tensor y = split_labels(10, 50);
  EXPECT_EQ(fed::iid_split(500, 7, 42), fed::iid_split(500, 7, 42));
  EXPECT_NE(fed::iid_split(500, 7, 42), fed::iid_split(500, 7, 43));
  EXPECT_EQ(fed::dirichlet_split(y, 5, 0.5, 42), fed::dirichlet_split(y, 5, 0.5, 42));
  EXPECT_NE(fed::dirichlet_split(y, 5, 0.5, 42), fed::dirichlet_split(y, 5, 0.5, 43));
  EXPECT_EQ(fed::shard_split(y, 5, 2, 42), fed::shard_split(y, 5, 2, 42));
  EXPECT_TRUE(split_covers(fed::dirichlet_split(y, 5, 0.5, 42), 500));
  EXPECT_TRUE(split_covers(fed::shard_split(y, 5, 2, 42), 500));
}

TEST(Split, DirichletSmallAlphaSkewsLabels) {
  // 10 classes x 100 samples over 10 clients. With alpha = 0.05 a class's proportions put nearly
  // all of it on one or two clients, so most clients hold a few classes in any number; an IID
  // split gives every client every class (about 10 samples each).
  at::Tensor y = split_labels(10, 100);
  fed::Split s = fed::dirichlet_split(y, 10, 0.05, 7, /*min_size=*/1);
  EXPECT_TRUE(split_covers(s, 1000));
  int few = 0;
  for (const auto& counts : split_label_counts(s, y)) {
    int big = 0;  // classes with at least 10 of this client's samples
    for (auto [label, k] : counts) big += k >= 10;
    few += big <= 3;
  }
  EXPECT_GE(few, 7) << "clients holding at most 3 classes in any number (>= 10 samples)";
  for (const auto& counts : split_label_counts(fed::iid_split(1000, 10, 7), y)) EXPECT_EQ(counts.size(), 10u);
}

TEST(Split, DirichletLargeAlphaIsNearUniform) {
  // alpha = 1000: each proportion is 1/10 within about 0.003, so each client gets about
  // 100 / 10 = 10 samples of each class; the floor of the cumulative cut moves a count by at most 1.
  at::Tensor y = split_labels(10, 100);
  fed::Split s = fed::dirichlet_split(y, 10, 1000.0, 3);
  EXPECT_TRUE(split_covers(s, 1000));
  for (const auto& counts : split_label_counts(s, y)) {
    EXPECT_EQ(counts.size(), 10u);
    for (auto [label, k] : counts) {
      EXPECT_GE(k, 8) << "label " << label;
      EXPECT_LE(k, 12) << "label " << label;
    }
  }
}

TEST(Split, DirichletRespectsMinSize) {
  at::Tensor y = split_labels(10, 100);
  for (int64_t min_size : {10, 40, 60}) {
    fed::Split s = fed::dirichlet_split(y, 10, 0.5, 11, min_size);
    EXPECT_TRUE(split_covers(s, 1000));
    for (size_t k : split_sizes(s)) EXPECT_GE(static_cast<int64_t>(k), min_size);
  }
  // 10 clients of at least 101 samples need 1010 > 1000: refused before any draw.
  pare::testing::expect_option_error([&] { fed::dirichlet_split(y, 10, 0.5, 11, 101); }, "min_size",
                                     {"need 1010 samples", "has 1000"});
  // alpha = 0.01 puts each class on about one client: 90 samples for each of 10 clients does not
  // happen in 1000 draws.
  pare::testing::expect_option_error([&] { fed::dirichlet_split(y, 10, 0.01, 11, 90); }, "alpha",
                                     {"1000 draws", "min_size = 90"});
}

TEST(Split, ShardsGiveEachClientAtMostTwoLabels) {
  // 10 classes x 20 samples, 10 clients x 2 shards: 20 shards of 200 / 20 = 10 samples. Sorted by
  // label, class c fills positions [20c, 20c + 20), i.e. exactly shards 2c and 2c + 1, so every
  // shard holds one label: a client's two shards hold at most two, and a label reaches at most
  // two clients.
  at::Tensor y = split_labels(10, 20);
  fed::Split s = fed::shard_split(y, 10, 2, 5);
  EXPECT_TRUE(split_covers(s, 200));
  std::map<int64_t, std::set<size_t>> clients_of;
  auto counts = split_label_counts(s, y);
  for (size_t c = 0; c < s.size(); ++c) {
    EXPECT_EQ(s[c].size(), 20u);
    EXPECT_LE(counts[c].size(), 2u) << "client " << c;
    for (auto [label, k] : counts[c]) {
      EXPECT_EQ(k % 10, 0) << "client " << c << " has part of a shard of label " << label;
      clients_of[label].insert(c);
    }
  }
  for (auto& [label, cs] : clients_of) EXPECT_LE(cs.size(), 2u) << "label " << label;
}

TEST(Split, ShardRemainderGoesToTheLastShard) {
  // n = 23, one label (sorting keeps index order), 2 clients x 2 shards: shard size 23 / 4 = 5,
  // shards [0,5) [5,10) [10,15) [15,23) (the last takes the 3 left over). The client with the last
  // shard has 8 + 5 = 13 samples, the other 5 + 5 = 10.
  fed::Split s = fed::shard_split(at::zeros({23}, at::kLong), 2, 2, 9);
  EXPECT_TRUE(split_covers(s, 23));
  std::vector<size_t> sizes = split_sizes(s);
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<size_t>{10, 13}));
  const auto& big = s[0].size() == 13 ? s[0] : s[1];
  for (int64_t i = 15; i < 23; ++i) EXPECT_NE(std::find(big.begin(), big.end(), i), big.end()) << i;
}

TEST(Split, SpecAppliesTheNamedSplit) {
  at::Tensor y = split_labels(10, 30);
  EXPECT_EQ(fed::split_by_spec("iid", y, 6, 4), fed::iid_split(300, 6, 4));
  EXPECT_EQ(fed::split_by_spec("dirichlet:0.5", y, 6, 4), fed::dirichlet_split(y, 6, 0.5, 4));
  EXPECT_EQ(fed::split_by_spec("dirichlet:1e3", y, 6, 4), fed::dirichlet_split(y, 6, 1000.0, 4));
  EXPECT_EQ(fed::split_by_spec("shards:2", y, 6, 4), fed::shard_split(y, 6, 2, 4));
}

TEST(Split, BadSpecsAreRefusedByName) {
  at::Tensor y = split_labels(10, 30);
  for (const std::string spec : {"dirichlet:0", "dirichlet:x", "dirichlet:-1", "dirichlet:", "dirichlet:inf",
                                 "dirichlet:0.5x", "shards:0", "shards:1.5", "shards:", "shards:-2", "foo", "",
                                 "IID", "dirichlet"}) {
    SCOPED_TRACE(spec);
    pare::testing::expect_input_error([&] { fed::split_by_spec(spec, y, 6, 4); }, {"split spec '" + spec + "'"});
  }
  pare::testing::expect_input_error([&] { fed::split_by_spec("foo", y, 6, 4); },
                                    {"iid", "dirichlet:ALPHA", "shards:K"});
}

TEST(Split, RefusesImpossibleRequests) {
  at::Tensor y = split_labels(10, 3);
  pare::testing::expect_option_error([&] { fed::iid_split(30, 0, 1); }, "clients", {"at least 1", "got 0"});
  pare::testing::expect_option_error([&] { fed::iid_split(3, 5, 1); }, "clients", {"5 clients for 3 samples"});
  pare::testing::expect_option_error([&] { fed::dirichlet_split(y, 3, 0.0, 1); }, "alpha", {"> 0", "got 0"});
  pare::testing::expect_option_error([&] { fed::shard_split(y, 3, 0, 1); }, "shards_per_client", {"got 0"});
  // 4 clients x 8 shards = 32 shards for 30 samples.
  pare::testing::expect_option_error([&] { fed::shard_split(y, 4, 8, 1); }, "shards_per_client",
                                     {"32 samples", "has 30"});
  pare::testing::expect_input_error([&] { fed::shard_split(at::tensor(std::vector<int64_t>{0, -1, 2}), 1, 1, 1); },
                                    {"labels >= 0", "sample 1 is -1"});
  pare::testing::expect_input_error([&] { fed::shard_split(at::zeros({4}), 1, 1, 1); }, {"integer class labels"});
}
