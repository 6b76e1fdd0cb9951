// Dynamic quantization: rewrites Gemm/MatMul with a constant 2-D weight into the form ONNX
// Runtime's own quantize_dynamic writes, with int8 weights (symmetric, per output channel by
// default) and the activation's uint8 scale and zero point computed at run time from each batch:
//
//   x -> DynamicQuantizeLinear -> (x_q, x_scale, x_zp)
//   MatMulInteger(x_q, W_q, x_zp) -> Cast(float) -> Mul(x_scale * w_scale) [-> Add(bias)] -> y
//
// No calibration data is needed. ONNX Runtime fuses this into its int8 DynamicQuantizeMatMul
// kernel; pare runs it op by op with the exact integer arithmetic.
//
//   DynamicResult r = quantize_dynamic(g, DynamicOptions().per_channel(true));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph.h"
#include "quantize/weight_only.h"

namespace pare::quantize {

struct DynamicOptions {
  /// Weight scales per output channel (default) or per tensor.
  DynamicOptions& per_channel(bool v) { per_channel_ = v; return *this; }
  /// Node names or op types left in fp32.
  DynamicOptions& exclude(std::vector<std::string> v) { exclude_ = std::move(v); return *this; }

  bool per_channel_ = true;
  std::vector<std::string> exclude_;
};

/// The rewritten graph, its layers (weight SQNR of the int8 weights) and the nodes kept in fp32.
using DynamicResult = RewriteResult;

/// Rewrites every MatMul(x, W) and Gemm(x, W[, C]) (transA = 0, alpha = beta = 1) with a constant
/// 2-D float weight. Throws InputError for an already quantized model, an opset below 13 (per-axis
/// scales), or an exclude entry that names nothing.
DynamicResult quantize_dynamic(const core::Graph& fp32, const DynamicOptions& opts);

}  // namespace pare::quantize
