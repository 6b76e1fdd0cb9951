// pare federate server: runs the rounds of a federated training over gRPC. Clients pull their
// work (federated/federation.proto): each round the server samples clients among those it has
// heard from recently, hands them the global model, waits until all answered or the round's
// deadline passed, refuses every update that does not fit the model (and says why in the round
// log), aggregates the others robustly, evaluates, and checkpoints, so a killed server resumes at
// its last finished round. Its parts: the gRPC service (federated/service.h), the round state and
// its checkpoint (federated/round_state.h), the aggregation rules (federated/rules.h) and FedDF
// (federated/feddf.h); from names as the command line gives them: federated/launch.h.
//
//   federated::ServerOptions o;
//   o.rounds = 30; o.clients = 20; o.dir = "fed-run"; o.agg.name = "multi-krum"; o.agg.assume_byzantine = 4;
//   auto rounds = federated::Server(core::load_model("mlp:784-100-10", 1), o, &test_set, nullptr).run();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data.h"
#include "core/graph.h"
#include "federated/local.h"
#include "federated/round_state.h"
#include "federated/rules.h"
#include "federated/tls.h"

namespace pare::federated {

struct ServerOptions {
  /// "fedavg": one model, every client trains it. "feddf" (Lin et al. 2020): one model per
  /// architecture (clients say which they train); each round the updates of each architecture are
  /// aggregated, then every model is distilled from the ensemble of all the round's client models
  /// on the server's unlabeled distillation set.
  std::string mode = "fedavg";
  std::string ensemble = "mean";  ///< feddf: how client logits combine: mean, median or trimmed-mean (agg.trim)
  int64_t distill_epochs = 1, distill_batch = 128;
  double distill_lr = 1e-3, distill_temperature = 1;
  /// feddf: this share of the distillation set is held out and, each round, every model keeps the
  /// epoch (0: the aggregate before distillation, then 1..distill_epochs) whose predictions agree
  /// best with the ensemble's there; FedDF's early stopping. 0: no hold-out, the last epoch is kept.
  double distill_val = 0;
  std::string address = "127.0.0.1:0";  ///< host:port to listen on (port 0: any free port)
  std::string port_file;                ///< written (atomically) with the port once listening
  TlsOptions tls;                       ///< certificate and key (and the clients' CA for mutual TLS); none: plaintext
  std::string dir;                      ///< state: checkpoint, rounds.jsonl, the final model
  int64_t rounds = 10;
  int64_t clients = 1;       ///< clients to wait for before the first round
  int64_t per_round = 0;     ///< clients sampled per round (0: every live client)
  int64_t min_clients = 1;   ///< fewer answers than this: the round is skipped, the model kept
  double round_timeout = 120;  ///< seconds a round waits for its clients
  double join_timeout = 300;   ///< seconds to wait for `clients` before the first round
  int64_t max_message_mb = 512;
  uint64_t seed = 0;
  bool quiet = false;
  LocalTraining local;
  AggregatorOptions agg;
  /// The server's step (FedAvgM, Hsu et al. 2019): v = server_momentum * v + a, where a is the
  /// round's aggregate, then the model moves by server_lr * v. The defaults (1, 0) apply a as it is.
  /// v is kept per model and checkpointed; a skipped round leaves it and the model as they are.
  double server_lr = 1, server_momentum = 0;
  void validate() const;
};

/// The server's own data sets (each may be null when its use is off).
struct ServerData {
  const core::TensorDataset* val = nullptr;  ///< evaluated after every round
  /// FLTrust's clean root set, on which the server trains each round for as many steps as a
  /// client of the round's mean size (so for several epochs of the small root set).
  const core::TensorDataset* root = nullptr;
  /// FedDF's distillation inputs (labels, if any, are never read).
  const core::TensorDataset* distill = nullptr;
};

class Server {
 public:
  /// `models`: the initial global model (fedavg: exactly one), or one per architecture (feddf).
  /// Throws InputError for options that do not fit them or a data set a mode needs and lacks.
  Server(std::vector<core::Graph> models, ServerOptions opts, ServerData data);
  Server(core::Graph initial, ServerOptions opts, const core::TensorDataset* val, const core::TensorDataset* root);
  ~Server();
  /// Runs the remaining rounds (all, or those after the checkpoint in `dir`), tells the clients
  /// that the run is over, and writes DIR/model.onnx (feddf: model-K.onnx for each other model).
  /// Returns every round's stats.
  std::vector<RoundStats> run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pare::federated
