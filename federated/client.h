// pare federate client: polls the server for work, trains the global model on its own data for the
// rounds it is sampled in, and sends back its update (never the data). It survives a server
// restart: while the server cannot be reached it retries, for up to `server_timeout` seconds.
// For experiments a client can be Byzantine (federated/attack.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/data.h"
#include "federated/attack.h"
#include "federated/tls.h"

namespace pare::federated {

struct ClientOptions {
  std::string server = "127.0.0.1:50051";  ///< host:port
  std::string id;                          ///< the client's name, stable over restarts
  TlsOptions tls;                          ///< the server's CA (and a certificate for mutual TLS); none: plaintext
  int64_t architecture = 0;                ///< which of the server's models it trains (feddf)
  double server_timeout = 120;             ///< seconds without the server before giving up
  int64_t max_message_mb = 512;
  bool quiet = false;
  AttackKind attack = AttackKind::kNone;
  AttackOptions attack_opts;
  /// ALIE: the folder the colluding attackers share (each writes its honest update there and reads
  /// the others'), the number of attackers, and the number of clients per round.
  std::string collude_dir;
  int64_t colluders = 1, round_clients = 1;
  void validate() const;
};

/// What a client did.
struct ClientStats {
  int64_t rounds_trained = 0, refused = 0;
};

/// Runs until the server says the run is over. `data`: the client's training set (labels needed).
/// Throws Error when the server stays unreachable for `server_timeout` seconds.
ClientStats run_client(const ClientOptions& opts, core::TensorDataset data);

}  // namespace pare::federated
