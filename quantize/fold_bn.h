// Graph preparation before quantization. BatchNorm folding rewrites Conv -> BatchNormalization and
// Gemm -> BatchNormalization (inference mode) into one Conv / Gemm with scaled weights and a
// shifted bias, so the quantized weight is the one the model actually applies. (Tied weights and
// unused initializers: core::bypass_constant_identities, core::remove_unused_initializers.)
#pragma once

#include "core/graph.h"

namespace pare::quantize {

/// Folds every BatchNormalization whose input comes from a Conv (group any, W [M, C/g, k...]) or a
/// Gemm (output [N, M]) that has no other consumer, when the weights, bias and the BatchNorm's
/// scale, B, mean and var are initializers and the BatchNorm is in inference mode with one output.
/// W' = W * k, b' = (b - mean) * k + B with k = scale / sqrt(var + epsilon) per channel.
/// Initializers left unused are removed. Returns the number of BatchNorms folded.
int fold_batch_norm(core::Graph& g);

}  // namespace pare::quantize
