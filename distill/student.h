// Students derived from their teacher: keep a subset of a deep model's repeated layers, with the
// teacher's weights (as DistilBERT keeps every other layer of BERT).
//
//   core::Graph teacher = core::load_model("teacher.onnx");
//   core::Graph student = distill::derive_student(teacher, "from-teacher:layers=0,2,4");
//
// The layers are the graph's repeated blocks, recognised by node names with a layer index:
// "layer3.attn.q" (pare's zoo), "/encoder/layers.3/self_attn/MatMul" (PyTorch's exporter),
// "blocks.3.mlp" or "h.3.attn" (timm, GPT-2). A block may be dropped when the value flowing into
// it and the one flowing out have the same shape (a residual stream): its consumers then read its
// input instead. Kept blocks keep their names and weights, so hints pair them directly
// (`--hint layer4.ffn_residual:layer4.ffn_residual`).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/graph.h"

namespace pare::distill {

/// True for "from-teacher:..." student specs.
bool is_derived_spec(const std::string& spec);

/// The layers "from-teacher:layers=0,2,4" keeps: {0, 2, 4}. Throws InputError naming the spec unless
/// they are distinct non-negative indices in ascending order, at least one.
std::vector<int64_t> derived_layers(const std::string& spec);

/// The repeated blocks of a graph: the family of node names with the most distinct layer
/// indices, e.g. prefix "layer" with indices 0..5 for nodes "layer0.*" .. "layer5.*".
struct LayerBlocks {
  std::string prefix;                        ///< name part before the index ("layer", "/layers.")
  std::map<int64_t, std::vector<int>> nodes;  ///< layer index -> indices into Graph::nodes
};

/// Finds the repeated blocks. Throws InputError when the graph has none (no family with two or
/// more layer indices) or two families tie for the most layers; messages call the graph `what`
/// (default: "graph '<g.name>'").
LayerBlocks find_layer_blocks(const core::Graph& g, const std::string& what = "");

/// Builds the student named by `spec` from `teacher` (left unchanged):
///   from-teacher:layers=0,2,4   keep these blocks (ascending, distinct, at least one), drop the rest
/// Throws InputError naming the spec for a malformed spec or an unknown layer index, and naming the
/// layer when it cannot be dropped (not exactly one value in and one out, or they differ in shape).
/// `teacher_name` names the teacher in messages (its file or spec).
core::Graph derive_student(const core::Graph& teacher, const std::string& spec,
                           const std::string& teacher_name = "");

}  // namespace pare::distill
