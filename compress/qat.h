// Quantization-aware training: quantize/ prepares the fake-quant graph from a calibration and
// converts it back to standard QDQ; train/ trains it between the two, distilling from teachers
// (distill/) when given, on the labels otherwise. `pare quantize --qat` is this call.
//
//   compress::QatRunOptions opts;
//   opts.qat.ptq(quantize::PtqOptions().weight_bits(4));
//   opts.trainer.epochs(2).lr(1e-4);
//   opts.teachers.specs = {"teacher.onnx"};
//   compress::QatRunResult r = compress::quantization_aware_training(fp32, calib_x, train_set, &val_set, opts);
//   core::save_onnx(r.quantized.graph, "model.int8.onnx");
#pragma once

#include <vector>

#include "core/data.h"
#include "core/graph.h"
#include "distill/distiller.h"
#include "quantize/ptq.h"
#include "quantize/qat.h"
#include "train/trainer.h"

namespace pare::compress {

struct QatRunOptions {
  quantize::QatOptions qat;          ///< where the QDQ pairs go, their bits, whether scales train
  train::TrainerOptions trainer = train::TrainerOptions().epochs(1).lr(1e-4);
  distill::TeacherSource teachers;   ///< none: cross entropy on the labels
};

struct QatRunResult {
  quantize::PtqResult quantized;            ///< the QDQ graph and its per-layer report
  std::vector<train::EpochStats> history;   ///< per epoch, of the fake-quant graph
  double accuracy = -1;                     ///< the QDQ graph on `val`; -1 without one
};

/// Calibrates `fp32` on `calib_x`, trains the fake-quant graph on `train` (evaluating on `val`),
/// and converts it to QDQ. Under data parallelism every rank returns the same result.
QatRunResult quantization_aware_training(const core::Graph& fp32, const at::Tensor& calib_x,
                                         const core::TensorDataset& train, const core::TensorDataset* val,
                                         const QatRunOptions& opts);

}  // namespace pare::compress
