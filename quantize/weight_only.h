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

/// One Gemm/MatMul whose weight a rewrite quantized (weight-only here, dynamic in dynamic.h).
struct RewrittenLayer {
  std::string node, op, weight;
  int64_t k = 0, n = 0;
  double weight_sqnr_db = 0;  ///< fp32 weight vs its quantized reading
};

/// What a weight rewrite did.
struct RewriteResult {
  core::Graph graph;
  std::vector<RewrittenLayer> layers;
  std::vector<std::string> skipped;             ///< "Conv 'c1': ..." and the like
  int64_t fp32_bytes = 0, quantized_bytes = 0;  ///< initializer bytes before / after
  std::string done;                             ///< for the summary line: "to int4"
  /// A table for the terminal.
  std::string to_text() const;
};
using WeightOnlyResult = RewriteResult;

WeightOnlyResult quantize_weight_only(const core::Graph& fp32, const WeightOnlyOptions& opts);

}  // namespace pare::quantize
