// Quantization-aware training: rewrites an fp32 graph into a fake-quant graph (FakeQuantize
// nodes, domain "pare", exactly where quantize_static puts QuantizeLinear/DequantizeLinear pairs:
// weights, int32 biases and activations, with the same calibrated starting parameters), which
// core::Module trains like any graph (straight-through gradients, LSQ scales on request), and
// converts the trained graph into the very QDQ graph quantize_static writes.
//
// BatchNorm is folded into the preceding Conv/Gemm before the fake-quant ops go in, so training
// sees, and adjusts, the folded weights that will be quantized (the BatchNorm statistics no longer
// move; that is how BatchNorm is handled in QAT here).
//
//   QatModel m = prepare_qat(fp32, calib_x, QatOptions().ptq(PtqOptions().weight_bits(4)));
//   core::Module student(m.graph);
//   ... train student (train::Trainer, with or without a teacher) ...
//   PtqResult r = convert_qat(m, student.to_graph(), calib_x);   // standard ONNX QDQ
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>

#include "core/graph.h"
#include "quantize/ptq.h"

namespace pare::quantize {

/// Op type and domain of the fake-quant op (registered in core/ops_quant.cpp).
constexpr const char* kFakeQuantOp = "FakeQuantize";
constexpr const char* kFakeQuantDomain = "pare";

struct QatOptions {
  /// Placement, calibration, weight bits and scheme: as for quantize_static.
  QatOptions& ptq(PtqOptions v) { ptq_ = std::move(v); return *this; }
  /// Train the scales too (LSQ); otherwise they stay as calibrated.
  QatOptions& learn_scales(bool v) { learn_scales_ = v; return *this; }

  PtqOptions ptq_;
  bool learn_scales_ = false;
};

/// A fake-quant graph to train and what converting it back needs.
struct QatModel {
  core::Graph graph;         ///< the fake-quant graph: train this
  core::Graph prepared;      ///< the fp32 graph the plan refers to (BatchNorm folded)
  QuantPlan plan;
  Calibration calibration;   ///< starting activation parameters
  std::map<WeightKey, QuantParams> weights;               ///< starting weight parameters
  std::map<std::string, std::string> activation_scale;    ///< root value -> scale initializer
  std::map<WeightKey, std::string> weight_scale;          ///< weight -> scale initializer
  QatOptions opts;
};

/// Plans and calibrates `fp32` on `calib_x` as quantize_static does and inserts FakeQuantize
/// nodes instead of QDQ pairs. Throws InputError as quantize_static does.
QatModel prepare_qat(const core::Graph& fp32, const at::Tensor& calib_x, const QatOptions& opts);

/// Converts `trained` (m.graph with trained weights and, with learn_scales, scales: what
/// core::Module::to_graph returns) into the QDQ graph whose outputs equal the fake-quant graph's;
/// the report's SQNR compares with the trained weights in fp32 on `calib_x`. Throws InputError when
/// `trained` lacks an initializer of m.graph.
PtqResult convert_qat(const QatModel& m, const core::Graph& trained, const at::Tensor& calib_x);

}  // namespace pare::quantize
