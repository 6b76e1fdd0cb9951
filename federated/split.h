// How a data set is divided among federated clients: IID, by Dirichlet label proportions
// (non-IID, Hsu et al. 2019) or by label-sorted shards (McMahan et al. 2017). Each split returns
// one list of sample indices per client; every index appears exactly once over all clients, and
// the same (labels, clients, parameter, seed) gives the same split.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pare::federated {

using Split = std::vector<std::vector<int64_t>>;

/// A random permutation cut into `clients` near-equal parts.
Split iid_split(int64_t n, int64_t clients, uint64_t seed);

/// For each class c, proportions p_c ~ Dirichlet(alpha, ..., alpha) over the clients; class c's
/// samples (shuffled) go to the clients in those proportions. Redrawn (next seed) until every
/// client holds at least `min_size` samples, at most 1000 times; then InputError. Smaller alpha:
/// more skew. Needs alpha > 0, clients >= 1, labels int64 [n] >= 0.
Split dirichlet_split(const at::Tensor& labels, int64_t clients, double alpha, uint64_t seed,
                      int64_t min_size = 10);

/// Sorts the samples by label, cuts them into clients * shards_per_client equal shards and gives
/// each client shards_per_client shards at random (the remainder of n goes to the last shard).
Split shard_split(const at::Tensor& labels, int64_t clients, int64_t shards_per_client, uint64_t seed);

/// Parses a split spec: "iid", "dirichlet:ALPHA" or "shards:K" and applies it. Throws InputError
/// naming the spec when it is malformed.
Split split_by_spec(const std::string& spec, const at::Tensor& labels, int64_t clients, uint64_t seed);

}  // namespace pare::federated
