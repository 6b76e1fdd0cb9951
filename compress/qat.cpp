#include "compress/qat.h"

#include <utility>

#include "core/module.h"

namespace pare::compress {

QatRunResult quantization_aware_training(const core::Graph& fp32, const at::Tensor& calib_x,
                                         const core::TensorDataset& train, const core::TensorDataset* val,
                                         const QatRunOptions& opts) {
  quantize::QatModel m = quantize::prepare_qat(fp32, calib_x, opts.qat);
  core::Module student(m.graph);
  QatRunResult r;
  r.history = distill::fine_tune(student, opts.teachers, opts.trainer, train, val);
  r.quantized = quantize::convert_qat(m, student.to_graph(), calib_x);
  if (val) {
    // The written QDQ graph on the validation split: the same numbers as the fake-quant graph.
    core::Module qdq(r.quantized.graph);
    r.accuracy = train::evaluate(qdq, *val, opts.trainer.eval_batch_size_).accuracy;
  }
  return r;
}

}  // namespace pare::compress
