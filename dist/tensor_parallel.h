// Private to dist/: the tensor-parallel pass (shard_tensor_parallel) and the "dist.shard" facet
// through which each op says how it is sharded, as prune's "prune.channels" facet says how
// channels flow through it.
//
// TensorParallelPass walks the graph in topological order and runs each node's sharding rule
// (dist/shard_facets.cpp); a rule reads how the node's inputs are laid out over the ranks and
// emits the node this rank runs, with the layout of its output. attach_shard_facets gives every
// op a rule: by name for the ops with weights or axes of their own (Conv, Gemm, MatMul,
// BatchNormalization, Softmax, ...), by core traits for elementwise, pooling and reduction ops,
// and "run it whole" for the rest (opaque ops included). The weight axes a rule slices along
// come from the op's declaration in core (core::weight_axes).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/op_registry.h"
#include "dist/shard.h"

namespace pare::dist::detail {

/// How the local version of a value relates to the whole value.
struct TpLayout {
  enum Kind { kWhole, kSplit, kPartial } kind = kWhole;
  int64_t axis = -1, full = 0;  ///< kSplit: along `axis`, whose whole size is `full` (rank r holds
                                ///< the r-th of `ranks` equal blocks)
};

class TensorParallelPass;

/// The "dist.shard" facet: emits the shard of one node.
struct ShardFacet {
  std::function<void(const core::Node&, TensorParallelPass&)> shard;
};
inline constexpr const char* kShardFacet = "dist.shard";

/// Attaches dist's sharding rule to one op (every op gets one; see the file comment).
void attach_shard_facets(core::OpDef& op);
/// The global registry with attach_shard_facets as a facet provider (added once, thread-safe).
const core::OpRegistry& shard_registry();

/// Rewrites a graph into the shard one rank runs. Sharding rules call the public methods.
class TensorParallelPass {
 public:
  /// `g`: prepare()d, `shapes`: its values' sizes at batch 1 (one probe serves every rank's pass).
  /// `copy`: this rank's slices are copied out of the whole weights (false: views, enough to count
  /// another rank's share for the report without holding it). `split_output`: a first output split
  /// along its last axis is left split (see shard_tensor_parallel).
  TensorParallelPass(const core::Graph& g, const std::map<std::string, std::vector<int64_t>>& shapes, int rank,
                     int ranks, bool copy, bool split_output = false);
  Shard run();

  // ---- for sharding rules -------------------------------------------------------------------
  int rank() const { return rank_; }
  int ranks() const { return n_; }
  const core::Graph& graph() const { return g_; }
  TpLayout layout(const std::string& v) const;
  /// Layout of input 0 (whole when the node has none).
  TpLayout input_layout(const core::Node& n) const;
  /// This rank's name for `v` (its local block, or `v` itself).
  std::string local(const std::string& v) const;
  const std::vector<int64_t>& full_shape(const std::string& v) const { return shapes_.at(v); }
  int64_t block(int64_t full) const { return full / n_; }
  bool is_init(const core::Node& n, size_t i) const { return n.has_input(i) && g_.is_initializer(n.inputs[i]); }
  const at::Tensor& init(const core::Node& n, size_t i) const { return g_.initializers.at(n.inputs[i]); }
  TpLayout split_layout(int64_t axis, int64_t full) const { return TpLayout{TpLayout::kSplit, axis, full}; }
  bool is_split(const std::string& v, int64_t axis) const;

  /// The whole value of `v` on every rank: an AllReduce of a partial sum, an AllGather of a split.
  std::string whole(const std::string& v);
  /// This rank's block along `axis` of the whole value `v`: a sliced copy of an initializer, or a
  /// Slice node.
  std::string split(const std::string& v, int64_t axis, int64_t full);
  /// A slice of initializer input `i` along `axis`.
  std::string split_init(const core::Node& n, size_t i, int64_t axis) {
    return split(n.inputs[i], axis, init(n, i).size(axis));
  }
  /// Adds an initializer to the shard under a fresh name derived from `base`; returns the name.
  std::string add_initializer(const std::string& base, at::Tensor t);
  /// Emits a node of `op` (default domain) reading `inputs` as they are named in the shard, with a
  /// fresh output derived from `base`; returns the output's name. For rules that add steps.
  std::string add_node(const std::string& op, const std::string& base, std::vector<std::string> inputs,
                       std::map<std::string, core::AttrValue> attrs = {});
  /// Emits `n` with new inputs; its outputs get `out` (output 0) and whole (the others).
  void emit_as(const core::Node& n, std::vector<std::string> inputs, TpLayout out,
               std::map<std::string, core::AttrValue> attrs = {});
  /// Emits `n` with input 0 as it is (split) and the others whole; output 0 gets `out`.
  void keep_split(const core::Node& n, TpLayout out, std::map<std::string, core::AttrValue> attrs = {});
  /// Runs `n` whole on every rank; `why` is reported when it has a weight.
  void replicate(const core::Node& n, const std::string& why);

 private:
  std::string fresh(const std::string& base);
  void emit(core::Node n);
  /// The block already made of the initializer that `v` is the transpose of (a tied LM head
  /// [hidden, vocab] reading the embedding [vocab, hidden]), for `v`'s block along `axis`: its
  /// transposed view then shares that block's memory. "" when there is none.
  std::string transposed_twin_block(const std::string& v, int64_t axis) const;

  const core::Graph& g_;
  int rank_, n_;
  bool copy_, split_output_;
  const std::map<std::string, std::vector<int64_t>>& shapes_;
  core::Graph out_;
  std::set<std::string> taken_, is_output_;
  std::map<std::string, TpLayout> layout_;
  std::map<std::string, std::string> local_, whole_, split_;
  std::vector<std::string> replicated_;
  int collectives_ = 0;
  std::vector<int64_t> flops_;
  int64_t node_flops_ = 0, rank_flops_ = 0;
};

}  // namespace pare::dist::detail
