// Weight-only quantization: rewrites MatMul(x, W) and Gemm(x, W[, C]) with a constant 2-D weight
// into com.microsoft MatMulNBits (ONNX Runtime's block-wise 4-bit MatMul; opset-21 int4
// DequantizeLinear is beyond the ONNX 1.12 schema pare writes against): W^T [N, K] in blocks of
// `group` values along K, symmetric int4 codes (-8..7, stored as 0..15 with the default zero
// point 8) packed two per byte, one float32 scale per block. Activations stay fp32.
//
//   WeightOnlyResult r = quantize_weight_only(g, WeightOnlyOptions().group(64));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph.h"

namespace pare::quantize {

struct WeightOnlyOptions {
  /// Values per scale along K: a power of two >= 16 (ORT's MatMulNBits requirement).
  WeightOnlyOptions& group(int64_t v) { group_ = v; return *this; }
  /// Node names or op types left alone.
  WeightOnlyOptions& exclude(std::vector<std::string> v) { exclude_ = std::move(v); return *this; }

  int64_t group_ = 32;
  std::vector<std::string> exclude_;
};

/// One rewritten node.
struct WeightOnlyLayer {
  std::string node, op, weight;
  int64_t k = 0, n = 0;
  double weight_sqnr_db = 0;  ///< fp32 weight vs its int4 reading
};

struct WeightOnlyResult {
  core::Graph graph;
  std::vector<WeightOnlyLayer> layers;
  int64_t fp32_bytes = 0, quantized_bytes = 0;  ///< initializer bytes before / after
  /// A table for the terminal.
  std::string to_text() const;
};

/// Rewrites every eligible MatMul/Gemm (constant 2-D float weight; Gemm with transA = 0 and
/// alpha = 1; a Gemm bias C of shape [N] or scalar becomes an Add). Throws InputError for an
/// already quantized model, a bad group size, or an exclude entry that names nothing.
WeightOnlyResult quantize_weight_only(const core::Graph& fp32, const WeightOnlyOptions& opts);

}  // namespace pare::quantize
