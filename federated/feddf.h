// FedDF (Lin et al. 2020, "Ensemble distillation for robust model fusion in federated learning"):
// after each round's aggregation, every global model (one per architecture) is distilled from the
// ensemble of all the round's client models on the server's unlabeled distillation set, so that
// models of different architectures learn from each other's clients.
#pragma once

#include <vector>

#include "core/data.h"
#include "core/graph.h"
#include "federated/round_state.h"
#include "federated/server.h"

namespace pare::federated {

/// Distils every model of `state` from the ensemble of the round's client models (each client's
/// round model, `before[arch]`, plus its update) on `inputs` (its labels are never read: the
/// ensemble's argmax stands in for them). The ensemble combines logits per o.ensemble (trimmed
/// mean: o.agg.trim), and trains with o.distill_* and a seed of o.seed and the round. With
/// o.distill_val > 0 the last share of the set is held out and each model keeps the epoch (0:
/// the aggregate as it stands) that agrees best with the ensemble there; st.distill_kept gets it.
void feddf_distill(RoundState& state, const std::vector<core::Graph>& before, const std::vector<Answer>& got,
                   const ServerOptions& o, const core::TensorDataset& inputs, RoundStats& st);

}  // namespace pare::federated
