// What `pare inspect` shows about a Graph: inputs/outputs, parameters, bytes, FLOPs per sample,
// op histogram, a per-layer table and sparsity.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"

namespace pare::core {

struct LayerSummary {
  std::string name, op;
  std::vector<int64_t> weight_shape;  ///< of the first weight input
  std::vector<int64_t> output_shape;  ///< at batch 1
  int64_t params = 0, flops = 0;
  int64_t weight_elements = 0, zeros = 0;  ///< of the weight matrices/kernels (not biases)
  double sparsity() const { return weight_elements ? double(zeros) / weight_elements : 0; }
};

struct ModelSummary {
  std::vector<ValueInfo> inputs, outputs;
  int64_t params = 0, bytes = 0, flops_per_sample = 0, weight_elements = 0, weight_zeros = 0;
  int64_t quantized_params = 0;  ///< of `params`: integer weights (read by DequantizeLinear,
                                 ///< MatMulInteger, MatMulNBits); quantization scales are not counted
  int64_t opset = 0, nodes = 0;
  std::map<std::string, int64_t> op_histogram;
  std::vector<LayerSummary> layers;  ///< nodes that hold weights, in graph order
  std::map<std::string, std::string> metadata;
  double sparsity() const { return weight_elements ? double(weight_zeros) / weight_elements : 0; }
};

/// FLOPs of each node of `g` (in node order) with the value sizes of a probe (probe_shapes).
std::vector<int64_t> node_flops(const Graph& g, const std::map<std::string, std::vector<int64_t>>& shapes);

/// Summarises `g`; FLOPs and output shapes come from a probe run at batch 1.
ModelSummary summarize(const Graph& g);
nlohmann::json to_json(const ModelSummary& s);
/// The human-readable report.
std::string to_text(const ModelSummary& s);

}  // namespace pare::core
