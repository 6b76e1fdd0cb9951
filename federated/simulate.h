// A federated simulation on one machine (pare federate simulate): the training set is split among
// N clients (each part written as DIR/data/client-K.{x,y}.npy), then one server and the N clients
// run as processes of the pare executable (`pare federate server` and `pare federate client`,
// core/process.h: by default this executable, which is pare itself on the command line), the first `byzantine` clients attacking. The server's log goes to stderr, each
// client's to DIR/logs/client-K.log; the server's state to DIR/server/.
//
//   federated::SimulateOptions o;
//   o.models = {"mlp:784-100-10"}; o.data = "fashion-mnist"; o.out = "sim"; o.clients = 10;
//   o.byzantine = 2; o.attack = "sign-flip"; o.server.agg.name = "median";
//   o.pare = "/usr/local/bin/pare";              // from a program of one's own
//   auto r = federated::simulate(o);             // r.last.val_accuracy
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "federated/attack.h"
#include "federated/round_state.h"
#include "federated/server.h"

namespace pare::federated {

struct SimulateOptions {
  std::vector<std::string> models;  ///< the server's models (zoo spec or ONNX file; feddf: one per architecture)
  /// Rounds, aggregation, local training, FedDF; simulate sets dir, address, port_file and clients.
  ServerOptions server;
  std::string data;                 ///< its train split is divided among the clients, its val_split evaluated
  std::string val_split = "test";
  int64_t root_samples = 1000;      ///< FLTrust: samples of data's train split the server holds
  int threads = 0;                  ///< the server's intra-op threads (0: 2; each client has 1)
  std::string partition = "dirichlet:0.5";  ///< iid, dirichlet:ALPHA or shards:K
  std::string out;                  ///< the run folder: data/, logs/, server/
  int64_t clients = 10;
  int64_t byzantine = 0;            ///< attacking clients (the first ones)
  int64_t train_samples = 0;        ///< training samples used (0: all)
  int64_t distill_samples = 5000;   ///< feddf: samples held out from the clients, unlabeled, as the server's distillation set
  std::string attack = "none";      ///< parse_attack's names
  AttackOptions attack_opts;        ///< its seed is each attacker's own (server.seed + K)
  std::string pare;                 ///< the pare executable the processes run (empty: this executable)
};

/// What a simulation gave.
struct SimulateResult {
  std::string model;       ///< DIR/server/model.onnx
  std::string rounds_log;  ///< DIR/server/rounds.jsonl
  RoundStats last;         ///< its last round
  int failed_clients = 0;  ///< clients that did not exit cleanly
};

/// Runs the simulation to its end. Throws InputError naming the option for options that do not
/// fit (before any process starts), Error when the server fails.
SimulateResult simulate(const SimulateOptions& o);

}  // namespace pare::federated
