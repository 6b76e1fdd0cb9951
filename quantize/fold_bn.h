// Graph preparation before quantization. BatchNorm folding rewrites Conv -> BatchNormalization and
// Gemm -> BatchNormalization (inference mode) into one Conv / Gemm with scaled weights and a
// shifted bias, so the quantized weight is the one the model actually applies; tied weights read
// through Identity become plain initializers; unused initializers go.
#pragma once

#include "core/graph.h"

namespace pare::quantize {

/// Folds every BatchNormalization whose input comes from a Conv (group any, W [M, C/g, k...]) or a
/// Gemm (output [N, M]) that has no other consumer, when the weights, bias and the BatchNorm's
/// scale, B, mean and var are initializers and the BatchNorm is in inference mode with one output.
/// W' = W * k, b' = (b - mean) * k + B with k = scale / sqrt(var + epsilon) per channel.
/// Initializers left unused are removed. Returns the number of BatchNorms folded.
int fold_batch_norm(core::Graph& g);

/// Exporters write tied weights as Identity(initializer) (torch.onnx does for the cloned layers of
/// an nn.TransformerEncoder): rewires the Identity's readers to the initializer itself, so the
/// weight is a constant that can be quantized, and drops the Identity. Returns how many.
int bypass_constant_identities(core::Graph& g);

/// True when `v` is one of the graph's outputs.
bool is_graph_output(const core::Graph& g, const std::string& v);

/// Removes initializers that no node reads and that are not graph outputs. Returns how many.
int remove_unused_initializers(core::Graph& g);

}  // namespace pare::quantize
