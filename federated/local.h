// A client's local training in one round: the global model, trained on the client's own data with
// train::Trainer (also what FLTrust's server runs on its root data set).
#pragma once

#include <cstdint>
#include <string>

#include "core/data.h"
#include "core/graph.h"
#include "federated/update.h"

namespace pare::federated {

/// How clients train in a round; the server sends it with each task.
struct LocalTraining {
  int64_t epochs = 1, batch_size = 32;
  double lr = 0.05, momentum = 0.9;
  std::string optimizer = "sgd";
  /// KD from the round's global model (a teacher that keeps a client near what all clients
  /// learnt): the KD term's weight (0: cross entropy alone) and temperature.
  double kd_alpha = 0, kd_temperature = 2;
};

struct LocalResult {
  Tensors update;  ///< trained state minus the global state (federated/update.h)
  double train_loss = 0, seconds = 0;
};

/// Trains a copy of `global` on `data` (labels needed) from `seed` and returns its update; with
/// kd_alpha > 0 it distils from `global` itself (distill::distill) as it trains.
/// Throws InputError when the data does not fit the model, Error when the loss diverges.
LocalResult train_local(const core::Graph& global, const Layout& layout, const core::TensorDataset& data,
                        const LocalTraining& how, uint64_t seed);

}  // namespace pare::federated
