// A language model as a core::Graph, from an LmConfig and its weights by Hugging Face name: one
// builder for every row of lm/arch.h's table. The graph is standard ONNX (opset 23:
// RMSNormalization, RotaryEmbedding, Attention with grouped KV heads), so pruning, quantization,
// sharding and export see it as any other model.
//
//   input_ids [batch, sequence] int64  ->  logits [batch, sequence, vocab] float32
//   with kv_cache: also past_key.i / past_value.i [batch, kv_heads, past, head_dim] in,
//                  present_key.i / present_value.i out (past + sequence long); positions start at
//                  the past's length.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/graph.h"
#include "lm/arch.h"

namespace pare::lm {

struct BuildOptions {
  bool kv_cache = false;
  /// The weights' and activations' type: the checkpoint's (torch_dtype) unless set. Weights of
  /// another type are converted (a copy); weights of this type are used in place (a mapped
  /// checkpoint stays mapped).
  std::optional<at::ScalarType> dtype;
  /// Makes a tensor the weights lack, by name and shape (a new model: lm::init_weights); without
  /// it a missing tensor is an error.
  std::function<at::Tensor(const std::string& name, const std::vector<int64_t>& shape)> init;
};

/// Builds the graph. `weights` are by Hugging Face name ("model.layers.0.self_attn.q_proj.weight");
/// `what` names their source in errors. Throws InputError naming the tensor when one is missing,
/// has the wrong shape, or is left over (a tensor no role of the row reads).
core::Graph build_graph(const LmConfig& c, const std::map<std::string, at::Tensor>& weights, const BuildOptions& opts,
                        const std::string& what);

/// Where `g`'s logits come from: {its last hidden state, its head's initializer [hidden, vocab]}, the
/// inputs of the MatMul whose product becomes "logits" (through a Cast and an Identity). What the
/// chunked distillation loss multiplies chunk by chunk. Throws InputError naming `what` when "logits"
/// comes from anything else (a head a pass rewrote).
std::pair<std::string, std::string> head_of(const core::Graph& g, const std::string& what);

/// The rotary tables [max_positions, head_dim / 2] (cos, sin) as Hugging Face computes them in
/// float32, llama3 frequency scaling included.
std::pair<at::Tensor, at::Tensor> rotary_tables(const LmConfig& c);

/// at::ScalarType of a torch_dtype name ("bfloat16" -> kBFloat16).
at::ScalarType dtype_of(const std::string& torch_dtype);

}  // namespace pare::lm
