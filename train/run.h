// What every training job sets up before the Trainer's loop, from plain values: the thread count,
// the device and precision, the process group when started by `pare launch` or torchrun, and the
// data (train and validation splits, the input normalisation recorded in the model's metadata as
// "pare.normalize", augmentation). `pare train`, `pare distill`, `pare prune` and `pare quantize
// --qat` fill one from their flags; a C++ program fills it directly.
//
//   train::RunSetup run;
//   run.data = "fashion-mnist", run.normalize = "0.2860,0.3530";
//   train::TrainerOptions opts = run.start();             // connects the ranks under a launcher
//   core::TensorDataset train_set, val_set;
//   const core::TensorDataset* val = run.load_data(train_set, val_set, graph, opts);
#pragma once

#include <string>

#include "core/data.h"
#include "core/graph.h"
#include "train/trainer.h"

namespace pare::train {

struct RunSetup {
  std::string data;                    ///< fashion-mnist[:DIR] or npy:X.npy,Y.npy
  std::string normalize;               ///< "MEAN,STD" (per channel: "M1,M2,M3,S1,S2,S3"); "" none
  std::string val_split = "test";      ///< the split evaluated after each epoch
  std::string augment;                 ///< core::parse_augment's spec; "" none
  std::string device = "auto", precision = "fp32", backend = "auto";
  double timeout = 300;                ///< seconds a rank waits for the others
  TrainerOptions trainer = TrainerOptions().batch_size(128).epochs(5);
  bool quiet = false, no_val = false;
  int threads = 0;                     ///< intra-op threads (0: libtorch's default)

  /// Sets the thread count, resolves the device, precision and backend, connects the ranks under a
  /// launcher (WORLD_SIZE > 1: data parallel), and returns the validated trainer options.
  TrainerOptions start() const;
  /// Loads the train split into `train` and, unless no_val, the validation split into `val`;
  /// applies `normalize` to both and records it in `model`'s metadata; sets `opts`' augmentation
  /// from `augment` (checked against the data). Returns &val or nullptr.
  const core::TensorDataset* load_data(core::TensorDataset& train, core::TensorDataset& val, core::Graph& model,
                                       TrainerOptions& opts) const;
};

/// Sets libtorch's intra-op thread count (0 keeps its default).
void set_threads(int threads);

}  // namespace pare::train
