// A federated run from names, as the command line gives them: the server from model specs and
// data set specs, and a client's training set (its own, or one part of a split for experiments).
//
//   federated::ServerDataSpec d;
//   d.val = "fashion-mnist";
//   auto rounds = federated::serve({"mlp:784-100-10"}, server_options, d);
//   core::TensorDataset mine = federated::ClientDataSpec{"fashion-mnist", "dirichlet:0.5", 10, 3}.load();
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/data.h"
#include "federated/server.h"

namespace pare::federated {

/// The server's data sets by spec (core::load_dataset); an empty spec: that use is off.
struct ServerDataSpec {
  std::string val;                 ///< evaluated after every round (its val_split)
  std::string val_split = "test";
  std::string root;                ///< FLTrust: the clean root set (its train split)
  int64_t root_samples = 1000;     ///< the root set's samples used (after a seeded shuffle)
  std::string distill;             ///< FedDF: the unlabeled inputs (its train split; labels are not read)
};

/// The server's data sets, loaded.
struct ServerDataSets {
  std::optional<core::TensorDataset> val, root, distill;
  /// Pointers to those present, for the Server (valid while this lives).
  ServerData view() const;
};

/// Loads the data sets of `spec`; the root set is the first root_samples of its train split after
/// a shuffle seeded with `seed`. Throws InputError naming root_samples when it is out of range.
ServerDataSets load_server_data(const ServerDataSpec& spec, uint64_t seed);

/// Runs a server: loads every model of `models` (zoo spec or ONNX file; model k seeded with
/// o.seed + k) and the data of `data` (root seeded with o.seed + 17), then Server::run.
std::vector<RoundStats> serve(const std::vector<std::string>& models, const ServerOptions& o,
                              const ServerDataSpec& data);

/// A client's training data: the train split of `data`, or with `partition` (iid, dirichlet:ALPHA,
/// shards:K; federated/split.h) only part `index` of `partitions` parts, split with `seed` (the
/// same on every client).
struct ClientDataSpec {
  std::string data, partition;
  int64_t partitions = 0, index = -1;
  uint64_t seed = 0;
  /// Throws InputError naming partitions or partition_index when they do not fit.
  core::TensorDataset load() const;
};

}  // namespace pare::federated
