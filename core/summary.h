// What `pare inspect` shows about a Graph: inputs/outputs, parameters, bytes, FLOPs per sample,
// op histogram, a per-layer table and sparsity; for a file also its size on disk and which
// initializers it stores sparse. Quantized graphs are described by what they store: a layer whose
// weight comes through DequantizeLinear (or FakeQuantize, MatMulInteger, MatMulNBits) shows that
// weight's shape and sparsity (codes equal to their zero point are zeros), and the quantization
// ops themselves count no FLOPs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"

namespace pare::core {

/// One node that holds weights.
struct LayerSummary {
  std::string name, op;
  std::vector<int64_t> weight_shape;  ///< of the first weight input (as stored: integer codes of a QDQ layer)
  std::vector<int64_t> output_shape;  ///< at batch 1
  int64_t params = 0, flops = 0;
  int64_t weight_elements = 0, zeros = 0;  ///< of the weight matrices/kernels (not biases)
  /// Share of the weight elements that are zero.
  double sparsity() const { return weight_elements ? double(zeros) / weight_elements : 0; }
};

/// The whole model.
struct ModelSummary {
  std::vector<ValueInfo> inputs, outputs;
  int64_t params = 0, flops_per_sample = 0, weight_elements = 0, weight_zeros = 0;
  int64_t bytes = 0;         ///< of the initializers in memory (dense)
  int64_t initializers = 0;  ///< how many
  int64_t file_bytes = 0;    ///< size of the model file (summarize_model of a file; 0 otherwise)
  std::vector<std::string> sparse_initializers;  ///< those the file stores as sparse_initializer
  int64_t quantized_params = 0;  ///< of `params`: integer weights (read by DequantizeLinear,
                                 ///< MatMulInteger, MatMulNBits); quantization scales are not counted
  int64_t opset = 0, nodes = 0;
  std::map<std::string, int64_t> op_histogram;
  std::vector<LayerSummary> layers;  ///< nodes that hold weights, in graph order
  std::map<std::string, std::string> metadata;
  /// Share of the weight elements (matrices and kernels) that are zero.
  double sparsity() const { return weight_elements ? double(weight_zeros) / weight_elements : 0; }
};

/// FLOPs of each node of `g` (in node order) with the value sizes of a probe (probe_shapes).
std::vector<int64_t> node_flops(const Graph& g, const std::map<std::string, std::vector<int64_t>>& shapes);

/// Summarises `g`; FLOPs and output shapes come from a probe run at batch 1.
ModelSummary summarize(const Graph& g);

/// "NAME: [a,b] -> [c,d]" for every layer of `after` whose weight shape differs from the layer of
/// the same name in `before` (what channel pruning changed), in `after`'s order.
std::vector<std::string> weight_shape_changes(const ModelSummary& before, const ModelSummary& after);
/// Summarises an ONNX file (adding its size and sparse initializers) or a zoo spec (weights
/// seeded with `seed`). Throws InputError as load_model does.
ModelSummary summarize_model(const std::string& path_or_spec, uint64_t seed = 0);
/// The summary as `pare inspect --json` prints it.
nlohmann::json to_json(const ModelSummary& s);
/// The human-readable report.
std::string to_text(const ModelSummary& s);

}  // namespace pare::core
