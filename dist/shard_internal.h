// Private to the teacher-sharding files (dist/shard.h's implementation); not part of the API.
//
//   shard.cpp            the shared helpers below, ShardReport::to_text
//   teacher_parallel.cpp the --teacher-parallel modes: names and the `auto` policy
//   tensor_parallel.cpp  the tensor-parallel pass (shard_tensor_parallel; dist/tensor_parallel.h)
//   shard_facets.cpp     each op's sharding rule, the "dist.shard" facet
//   pipeline_plan.cpp    cutting a graph into pipeline stages (pipeline_stage)
//   wire.cpp             sending a tensor of any dtype and shape point-to-point
//   sharded_model.cpp    ShardedModel: runs a shard or stage with the other ranks
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph.h"
#include "dist/shard.h"
#include "dist/world.h"

namespace pare::dist::detail {

/// "12.34 MB" (decimal megabytes).
std::string mb(int64_t bytes);

/// The product of s[from, to) (1 when empty; `to` is clamped to s.size()).
int64_t prod(const std::vector<int64_t>& s, size_t from, size_t to);

/// The graph sorted and checked, with the Identity nodes of tied weights bypassed: they would hide
/// a MatMul's weight from the tensor-parallel pass and put every tied weight into the first stage.
/// Throws InputError unless the graph has one input and at least one output.
core::Graph prepare(const core::Graph& g);

/// shard_tensor_parallel; with `copy` false this rank's slices are views (for the report alone).
Shard tensor_parallel(const core::Graph& g, int rank, int ranks, bool copy, bool split_output = false);

/// Sends `t` (any dtype and shape, rank <= 8) to `dst` as a header (dtype, rank, sizes), then the
/// data. The tensors sent are kept in `keep` until the group's wait().
void send_tensor(ProcessGroup& pg, const at::Tensor& t, int dst, int tag, std::vector<at::Tensor>& keep);

/// Receives a tensor that send_tensor sent from `src` with `tag`.
at::Tensor recv_tensor(ProcessGroup& pg, int src, int tag);

}  // namespace pare::dist::detail
