// The server's state between rounds: the global model(s), the server momentum's velocity per
// model and the log of the rounds so far; written to the server's folder after every round, so
// that a killed server resumes at its last finished round.
//
//   DIR/round-R.onnx (round-R-K.onnx for each of several models), DIR/round-R.velocity.npy (with
//   server momentum), DIR/server.json ("pare.federated.server/1": those files and the round log),
//   DIR/rounds.jsonl (one line per round, as RoundStats)
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "federated/update.h"

namespace pare::federated {

/// What one round did (a line of rounds.jsonl).
struct RoundStats {
  int64_t round = 0;
  std::vector<std::string> sampled, answered;
  std::vector<std::pair<std::string, std::string>> refused;  ///< client, reason
  std::vector<std::string> selected;  ///< the clients whose updates the aggregator used
  std::vector<double> scores;         ///< the aggregator's per-answer scores (Krum, FLTrust)
  int64_t clipped = 0;
  bool skipped = false;
  std::vector<double> model_accuracy;  ///< feddf: every model's val accuracy (val_accuracy: model 0's)
  std::vector<int64_t> distill_kept;   ///< feddf with distill_val: the epoch each model kept
  std::string skip_reason;
  double val_accuracy = -1, val_loss = -1, seconds = 0, train_loss = 0;
};

/// `line` of rounds.jsonl as RoundStats; throws InputError naming `what` for a line that is not one.
RoundStats parse_round(const std::string& line, const std::string& what);

/// A client's accepted update of the open round.
struct Answer {
  std::string client;
  int64_t arch = 0;  ///< the model it trained (feddf: its architecture)
  Tensors update;
  int64_t num_samples = 0;
  double train_loss = 0;
};

struct RoundState {
  std::vector<core::Graph> models;   ///< the global model, or one per architecture (feddf)
  std::vector<Layout> layouts;       ///< per model
  std::vector<at::Tensor> velocity;  ///< per model: the server momentum's v (undefined: zero)
  std::vector<RoundStats> history;   ///< the rounds done

  explicit RoundState(std::vector<core::Graph> initial);

  /// Moves model `k` by the round's aggregate `a` (FedAvgM): v = momentum * v + a (with momentum
  /// 0, v = a and no velocity is kept), then the model by lr * v.
  void step(size_t k, const at::Tensor& a, double lr, double momentum);

  /// Writes the state after the last round of `history` (round 0: the initial models) into `dir`:
  /// the models and velocities, then server.json naming them with the round log, then
  /// rounds.jsonl; then removes the previous round's files. A crash between the writes leaves
  /// server.json naming files that exist.
  void checkpoint(const std::string& dir) const;

  /// Loads the checkpoint in `dir`, if there is one (returns whether there was). Throws InputError
  /// for a folder that holds another run's state (other models, another format), saying to
  /// remove it.
  bool resume(const std::string& dir);

 private:
  /// round-R.onnx for the one model, round-R-K.onnx for each of several (`ext`: the file's ending).
  std::string model_file(int64_t r, size_t k, const char* ext = ".onnx") const;
};

}  // namespace pare::federated
